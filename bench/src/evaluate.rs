//! Scoring one replayed conversation: recalld's request for each question, and each baseline's
//! at the same token count (the full context at the ceiling).

use serde_json::{json, Value};

use crate::baselines::{choose, request_of, Rankings, SYSTEMS};
use crate::locomo::Conversation;
use crate::replay::{system_prompt, Asked};
use crate::score::{message_tokens, request_tokens, RequestText, Scorer};
use crate::table::{Score, Table};

/// Adds every system's score on every asked question to `table`; returns per-question details.
pub fn evaluate(
    conv: &Conversation,
    rankings: &Rankings,
    asked: &[Asked],
    ceiling: u64,
    table: &mut Table,
) -> Vec<Value> {
    let scorer = Scorer::new(conv);
    let system = system_prompt(conv);
    let mut details = Vec::new();
    for a in asked {
        let q = &conv.questions[a.question];
        let fixed = message_tokens(&system) + message_tokens(&q.text);
        let mut row = json!({
            "conversation": conv.id, "question": a.question, "category": q.category,
            "evidence": q.evidence,
        });
        // Where dense retrieval ranks each evidence turn (0 = its best match): how deep a search
        // must go to find it.
        let dense_rank: serde_json::Map<String, Value> = q
            .evidence
            .iter()
            .filter_map(|d| {
                let i = conv.turns().position(|t| &t.dia == d)?;
                let rank = rankings
                    .dense
                    .get(a.question)?
                    .iter()
                    .filter(|&&j| j < a.said)
                    .position(|&j| j == i)?;
                Some((d.clone(), json!(rank)))
            })
            .collect();
        row["dense_rank"] = Value::Object(dense_rank);
        for s in SYSTEMS {
            let (request, tokens) = if s == "recalld" {
                (a.request.clone(), a.tokens)
            } else {
                let budget = if s == "full context" { ceiling } else { a.tokens };
                let chosen = choose(s, rankings, a.question, budget, fixed, a.said);
                let r = request_of(&system, &rankings.items, &chosen, &q.text);
                let t = request_tokens(&r);
                (r, t)
            };
            let text = RequestText::of(&request);
            let availability = scorer.availability(&q.evidence, &text).unwrap_or(0.0);
            table.add(s, q.category, Score { availability, tokens });
            let how: serde_json::Map<String, Value> = q
                .evidence
                .iter()
                .map(|d| (d.clone(), json!(scorer.presence(d, &text))))
                .collect();
            row[s] = json!({"availability": availability, "tokens": tokens, "evidence": how});
            if s == "recalld" {
                row[s]["parts"] = parts(&request);
                // For looking into what recalld sent: RECALLD_BENCH_REQUESTS=1 keeps the requests.
                if std::env::var_os("RECALLD_BENCH_REQUESTS").is_some() {
                    row[s]["request"] = request.clone();
                    row[s]["recall"] = a.recall.clone();
                }
            }
        }
        details.push(row);
    }
    details
}

/// Where recalld's request spends its tokens: the facts block, recall blocks, the note ask,
/// other instructions, and the messages in view.
fn parts(request: &Value) -> Value {
    let mut out = json!({"facts": 0, "recall": 0, "ask": 0, "instructions": 0, "view": 0});
    for m in request.get("messages").and_then(Value::as_array).into_iter().flatten() {
        let text = crate::score::content_text(m.get("content").unwrap_or(&Value::Null));
        let role = m.get("role").and_then(Value::as_str).unwrap_or("");
        let part = match role {
            "system" | "developer" if text.starts_with("Recorded facts") => "facts",
            "system" | "developer" if text.starts_with("Recalled from earlier") => "recall",
            "system" | "developer" if text.starts_with("History from turn") => "ask",
            "system" | "developer" => "instructions",
            _ => "view",
        };
        let t = out[part].as_u64().unwrap_or(0) + message_tokens(&text);
        out[part] = json!(t);
    }
    out
}
