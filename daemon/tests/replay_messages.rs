//! The agent-trace replay (see replay.rs) in the Anthropic Messages format: each trace is
//! converted from Chat Completions (system → `system`; assistant tool calls → `tool_use` blocks;
//! a run of tool messages → one user message of `tool_result` blocks) and replayed through the
//! socket at a 4,000-token ceiling against the real daemon.
//!
//! Checked on every decorated request: it stays in the Messages shape (top-level `system`, only
//! user/assistant messages, our blocks in `system`); a valid transcript (every `tool_use` is
//! answered by a `tool_result` in the message right after it, no result without its call); the
//! note tool is offered exactly when `info.note_ask`; the request is within the ceiling whenever
//! the current turn fits. A note ask is answered with a reply holding only a note `tool_use`
//! (report must say `again`), then the real reply. At the end: a lossless export.
//!
//! The data file is required: the test FAILS when it is missing.

use crate::util;

use std::collections::{HashMap, HashSet};
use std::path::PathBuf;

use serde_json::{json, Value};
use util::Daemon;

const CEILING: u64 = 4_000;
const MAX_ASKS_PER_STEP: usize = 4;

fn bench_dir() -> PathBuf {
    match std::env::var_os("RECALLD_BENCH_DIR") {
        Some(d) if !d.is_empty() => PathBuf::from(d),
        _ => PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../../shared/bench"),
    }
}

fn text_of(content: &Value) -> String {
    match content {
        Value::String(s) => s.clone(),
        Value::Array(parts) => parts
            .iter()
            .filter_map(|p| p.get("text").and_then(Value::as_str))
            .collect::<Vec<_>>()
            .join("\n"),
        _ => String::new(),
    }
}

/// A Chat trace as (system, Messages history).
fn to_messages(trace: &[Value]) -> (String, Vec<Value>) {
    let mut system = Vec::new();
    let mut out: Vec<Value> = Vec::new();
    for m in trace {
        match m["role"].as_str().unwrap_or("") {
            "system" | "developer" => system.push(text_of(&m["content"])),
            "user" => out.push(json!({"role": "user", "content": text_of(&m["content"])})),
            "assistant" => {
                let mut blocks = Vec::new();
                let text = text_of(&m["content"]);
                if !text.is_empty() {
                    blocks.push(json!({"type": "text", "text": text}));
                }
                for c in m["tool_calls"].as_array().into_iter().flatten() {
                    let args = c["function"]["arguments"].as_str().unwrap_or("{}");
                    let input: Value = serde_json::from_str(args).unwrap_or_else(|_| json!({}));
                    let input = if input.is_object() {
                        input
                    } else {
                        json!({"value": input})
                    };
                    blocks.push(
                        json!({"type": "tool_use", "id": c["id"], "name": c["function"]["name"], "input": input}),
                    );
                }
                if blocks.is_empty() {
                    blocks.push(json!({"type": "text", "text": "(no reply)"}));
                }
                out.push(json!({"role": "assistant", "content": blocks}));
            }
            "tool" => {
                let result =
                    json!({"type": "tool_result", "tool_use_id": m["tool_call_id"], "content": text_of(&m["content"])});
                match out.last_mut() {
                    Some(prev) if prev["role"] == "user" && prev["content"].is_array() => {
                        prev["content"].as_array_mut().unwrap().push(result);
                    }
                    _ => out.push(json!({"role": "user", "content": [result]})),
                }
            }
            _ => {}
        }
    }
    (system.join("\n\n"), out)
}

fn tool_uses(m: &Value) -> Vec<String> {
    m["content"]
        .as_array()
        .into_iter()
        .flatten()
        .filter(|b| b["type"] == "tool_use")
        .map(|b| b["id"].as_str().unwrap_or("").to_string())
        .collect()
}

fn tool_results(m: &Value) -> Vec<String> {
    m["content"]
        .as_array()
        .into_iter()
        .flatten()
        .filter(|b| b["type"] == "tool_result")
        .map(|b| b["tool_use_id"].as_str().unwrap_or("").to_string())
        .collect()
}

/// Problems with a Messages transcript (empty when valid).
fn transcript_problems(messages: &[Value]) -> Vec<String> {
    let mut problems = Vec::new();
    let mut called = HashSet::new();
    for (i, m) in messages.iter().enumerate() {
        let role = m["role"].as_str().unwrap_or("");
        if role != "user" && role != "assistant" {
            problems.push(format!("message {i} has role {role:?}"));
        }
        for id in tool_results(m) {
            if !called.contains(&id) {
                problems.push(format!("tool_result in message {i} answers {id:?}, not called before"));
            }
        }
        let uses = tool_uses(m);
        if !uses.is_empty() {
            let answered: HashSet<String> = messages
                .get(i + 1)
                .map(tool_results)
                .unwrap_or_default()
                .into_iter()
                .collect();
            for id in &uses {
                if !answered.contains(id) && i + 1 < messages.len() {
                    problems.push(format!(
                        "tool_use {id:?} (message {i}) is not answered by the next message"
                    ));
                }
            }
        }
        called.extend(uses);
    }
    problems
}

/// Identity of a message by content: role, texts, tool_use ids and inputs, tool_result ids.
fn key(m: &Value) -> String {
    let blocks: Vec<String> = match &m["content"] {
        Value::String(s) => vec![s.clone()],
        Value::Array(bs) => bs
            .iter()
            .map(|b| match b["type"].as_str().unwrap_or("") {
                "text" => b["text"].as_str().unwrap_or("").to_string(),
                "tool_use" => format!("use:{}:{}", b["id"], b["input"]),
                "tool_result" => format!("result:{}:{}", b["tool_use_id"], text_of(&b["content"])),
                other => other.to_string(),
            })
            .collect(),
        _ => vec![],
    };
    format!("{}|{}", m["role"].as_str().unwrap_or(""), blocks.join("|"))
}

fn tokens(bpe: &bpe_openai::Tokenizer, m: &Value) -> u64 {
    let mut n = 4;
    for b in m["content"]
        .as_array()
        .cloned()
        .unwrap_or_else(|| vec![json!({"text": m["content"]})])
    {
        for k in ["text", "name"] {
            n += bpe.count(b[k].as_str().unwrap_or("")) as u64;
        }
        if b["type"] == "tool_use" {
            n += bpe.count(&b["input"].to_string()) as u64;
        }
        if b["type"] == "tool_result" {
            n += bpe.count(&text_of(&b["content"])) as u64;
        }
    }
    n
}

#[derive(Default)]
struct Summary {
    decorates: usize,
    note_asks: usize,
    sealed: usize,
    checked_ceiling: usize,
}

fn replay(
    c: &mut recalld::client::Client,
    id: &str,
    system: &str,
    trace: &[Value],
    bpe: &bpe_openai::Tokenizer,
    sum: &mut Summary,
) {
    let memory = format!("replay-messages-{}", id.replace('/', "-"));
    let mut now = 1.7e9;
    let mut history: Vec<Value> = Vec::new();
    let mut notes = 0;
    let mut sent = 0; // history[..sent] went out in a decorate or a report
    for msg in trace {
        now += 30.0;
        if msg["role"] != "assistant" {
            history.push(msg.clone());
            continue;
        }
        let mut asks = 0;
        loop {
            let req = json!({"model": "claude-sonnet-4-5", "max_tokens": 1024, "system": system, "messages": history});
            let r = c
                .call(
                    "decorate",
                    json!({"memory": memory, "request": req, "now": now, "ceiling": CEILING}),
                )
                .unwrap_or_else(|e| panic!("{id}: decorate failed: {e}"));
            sum.decorates += 1;
            let info = &r["info"];
            let out = r["request"]["messages"]
                .as_array()
                .unwrap_or_else(|| panic!("{id}: no messages: {}", r["request"]));
            let problems = transcript_problems(out);
            assert!(
                problems.is_empty(),
                "{id} at message {}: {problems:?}\ninfo: {info}",
                history.len()
            );
            if !system.is_empty() {
                let sent = r["request"]["system"].as_str().unwrap_or("");
                assert!(
                    sent.starts_with(system),
                    "{id}: the client's system comes first in system"
                );
            }
            let turn_start = history
                .iter()
                .rposition(|m| m["role"] == "user" && m["content"].is_string())
                .unwrap_or(0);
            let turn: u64 = history[turn_start..].iter().map(|m| tokens(bpe, m)).sum();
            if info["fixed"].as_u64().unwrap() + turn <= CEILING {
                sum.checked_ceiling += 1;
                let request_tokens = info["request_tokens"].as_u64().unwrap();
                assert!(
                    request_tokens <= CEILING,
                    "{id}: request {request_tokens} tokens over the ceiling: {info}"
                );
            }
            let offered = r["request"]["tools"]
                .as_array()
                .is_some_and(|ts| ts.iter().any(|t| t["name"] == "note"));
            assert_eq!(
                offered,
                info["note_ask"] == true,
                "{id}: note tool and info.note_ask disagree: {info}"
            );
            if !offered {
                break;
            }
            assert!(
                r["request"]["system"]
                    .as_str()
                    .unwrap()
                    .contains("is leaving live context"),
                "{id}: ask in system"
            );
            asks += 1;
            sum.note_asks += 1;
            assert!(asks <= MAX_ASKS_PER_STEP, "{id}: {asks} note asks in a row: {info}");
            notes += 1;
            let reply = json!({"id": format!("msg_note_{notes}"), "type": "message", "role": "assistant", "model": "claude-sonnet-4-5",
                "content": [{"type": "tool_use", "id": format!("toolu_note_{notes}"), "name": "note",
                    "input": {"notes": [{"note": format!("Customer fact {notes} from the leaving turns."), "subject": "customer", "object": format!("topic {notes}"), "milestone": false}]}}],
                "stop_reason": "tool_use", "usage": {"input_tokens": 1000, "output_tokens": 40}});
            let rep = c
                .call("report", json!({"memory": memory, "response": reply, "now": now}))
                .unwrap();
            assert_eq!(
                rep["again"], true,
                "{id}: a reply of only the note must give again: {rep}"
            );
            assert_eq!(rep["response"]["content"], json!([]), "{id}: the note is taken out");
            now += 1.0;
        }
        let reply = json!({"id": "msg", "type": "message", "role": "assistant", "model": "claude-sonnet-4-5",
            "content": msg["content"], "stop_reason": if tool_uses(msg).is_empty() { "end_turn" } else { "tool_use" },
            "usage": {"input_tokens": 1000, "output_tokens": 40}});
        let rep = c
            .call("report", json!({"memory": memory, "response": reply, "now": now}))
            .unwrap();
        assert_eq!(rep["again"], false, "{id}: a real reply must not ask again: {rep}");
        assert_eq!(
            rep["response"], reply,
            "{id}: a reply without a note comes back as it was"
        );
        history.push(msg.clone());
        sent = history.len();
    }
    let export = c.call("export", json!({"memory": memory})).unwrap();
    let stored: HashSet<String> = export["messages"]
        .as_array()
        .unwrap()
        .iter()
        .map(|m| key(&m["message"]))
        .collect();
    for m in &history[..sent] {
        assert!(stored.contains(&key(m)), "{id}: export lost a message: {m}");
    }
    let states: HashMap<String, usize> =
        export["episodes"]
            .as_array()
            .unwrap()
            .iter()
            .fold(HashMap::new(), |mut acc, e| {
                *acc.entry(e["state"].as_str().unwrap_or("").to_string()).or_default() += 1;
                acc
            });
    sum.sealed += states.get("sealed").copied().unwrap_or(0) + states.get("forgotten").copied().unwrap_or(0);
}

#[test]
fn agent_traces_replay_in_anthropic_messages_format() {
    let path = bench_dir().join("agent-traces-dev.jsonl");
    let text = std::fs::read_to_string(&path)
        .unwrap_or_else(|e| panic!("bench data {} is required (set RECALLD_BENCH_DIR): {e}", path.display()));
    let convs: Vec<Value> = text
        .lines()
        .filter(|l| !l.trim().is_empty())
        .map(|l| serde_json::from_str(l).unwrap())
        .collect();
    let bpe = bpe_openai::cl100k_base();
    let d = Daemon::start();
    let mut c = d.client();
    let mut sum = Summary::default();
    // The same sample as replay.rs: every 20th tau-bench conversation and the first SWE-agent one.
    let (mut tau, mut swe) = (0, 0);
    for conv in &convs {
        let take = if conv["source"] == "tau-bench" {
            tau += 1;
            (tau - 1) % 20 == 0
        } else {
            swe += 1;
            swe <= 1
        };
        if !take {
            continue;
        }
        let (system, trace) = to_messages(conv["messages"].as_array().unwrap());
        replay(&mut c, conv["id"].as_str().unwrap(), &system, &trace, bpe, &mut sum);
    }
    eprintln!(
        "messages replay: {} decorates, {} note asks, {} episodes sealed or forgotten, {} decorates checked against the ceiling",
        sum.decorates, sum.note_asks, sum.sealed, sum.checked_ceiling
    );
    assert!(
        sum.note_asks > 0,
        "a 4,000-token ceiling over these traces must ask for notes"
    );
    assert!(sum.sealed > 0, "some episodes must seal");
}
