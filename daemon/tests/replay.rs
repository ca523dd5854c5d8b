//! Replays the real agent traces of `$RECALLD_BENCH_DIR/agent-traces-dev.jsonl` (tau-bench
//! airline and SWE-agent, Chat Completions with tool calls) through the socket against the real
//! daemon, as an agent would, with a small ceiling (4,000 tokens) so that fading, note asks and
//! seals happen all the time.
//!
//! The client keeps the full original history. For each assistant message of the trace it
//! decorates the whole history up to it (system message first), then reports that assistant
//! message as the model's reply. When the decorated request carries the note tool (a note ask),
//! the simulated model first answers with a reply holding only a note call; report must say
//! `again: true`, and the client decorates again before the real reply.
//!
//! Checked on every decorated request:
//! - a valid transcript: every assistant tool call is answered by a tool message with its id
//!   after it, and no tool message comes without its call earlier in the request;
//! - the request is within the ceiling (`info.request_tokens <= 4000`) whenever the current turn
//!   fits. Rule: the current turn is the client's messages since its last user message (the
//!   user message included), counted with cl100k (text + tool-call names and arguments + 4 per
//!   message); it fits when `info.fixed + turn tokens <= ceiling`.
//!
//! At the end of each conversation: a lossless export (every non-system message the client
//! sent, and every note reply it reported, appears in export's messages, compared by role,
//! content, tool-call ids and tool_call_id). The system message is instructions, not history:
//! whether export holds it is printed, not asserted.
//!
//! The data file is required: the test FAILS when it is missing.

use crate::util;

use std::collections::HashMap;
use std::path::PathBuf;
use std::time::Instant;

use serde_json::{json, Value};
use util::Daemon;

const CEILING: u64 = 4_000;
/// How many note asks in a row one step may see before we call it a loop.
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
        Value::Null => String::new(),
        other => other.to_string(),
    }
}

/// Identity of a message "by content".
fn key(m: &Value) -> String {
    let ids: Vec<String> = m["tool_calls"]
        .as_array()
        .map(|cs| {
            cs.iter()
                .map(|c| format!("{}:{}", c["id"].as_str().unwrap_or(""), c["function"]["arguments"]))
                .collect()
        })
        .unwrap_or_default();
    format!(
        "{}|{}|{}|{}",
        m["role"].as_str().unwrap_or(""),
        text_of(&m["content"]),
        m["tool_call_id"].as_str().unwrap_or(""),
        ids.join(",")
    )
}

/// Problems with the transcript of a request's messages (empty when valid).
fn transcript_problems(messages: &[Value]) -> Vec<String> {
    let mut problems = Vec::new();
    let mut called: HashMap<String, usize> = HashMap::new();
    let mut answered: HashMap<String, usize> = HashMap::new();
    for (i, m) in messages.iter().enumerate() {
        if m["role"] == "tool" {
            let id = m["tool_call_id"].as_str().unwrap_or("").to_string();
            if !called.contains_key(&id) {
                problems.push(format!("tool message {i} answers {id:?}, not called earlier"));
            }
            answered.insert(id, i);
        }
        if let Some(calls) = m["tool_calls"].as_array() {
            for c in calls {
                called.insert(c["id"].as_str().unwrap_or("").to_string(), i);
            }
        }
    }
    for (id, at) in &called {
        match answered.get(id) {
            Some(j) if j > at => {}
            _ => problems.push(format!("tool call {id:?} (message {at}) has no tool message after it")),
        }
    }
    problems
}

/// Tool calls answered, but not by the messages right after the call (OpenAI wants the tool
/// messages directly after their assistant message). Counted, not asserted.
fn non_contiguous(messages: &[Value]) -> usize {
    let mut bad = 0;
    for (i, m) in messages.iter().enumerate() {
        let Some(calls) = m["tool_calls"].as_array() else {
            continue;
        };
        let mut j = i + 1;
        let mut seen = std::collections::HashSet::new();
        while j < messages.len() && messages[j]["role"] == "tool" {
            seen.insert(messages[j]["tool_call_id"].as_str().unwrap_or("").to_string());
            j += 1;
        }
        bad += calls
            .iter()
            .filter(|c| !seen.contains(c["id"].as_str().unwrap_or("")))
            .count();
    }
    bad
}

struct Counter {
    bpe: &'static bpe_openai::Tokenizer,
}

impl Counter {
    fn message(&self, m: &Value) -> u64 {
        let mut n = self.bpe.count(&text_of(&m["content"])) as u64 + 4;
        if let Some(calls) = m["tool_calls"].as_array() {
            for c in calls {
                n += self.bpe.count(c["function"]["name"].as_str().unwrap_or("")) as u64;
                n += self.bpe.count(c["function"]["arguments"].as_str().unwrap_or("")) as u64;
            }
        }
        n
    }
    /// The current turn: messages since the last user message (included).
    fn current_turn(&self, history: &[Value]) -> u64 {
        let start = history.iter().rposition(|m| m["role"] == "user").unwrap_or(0);
        history[start..]
            .iter()
            .filter(|m| m["role"] != "system")
            .map(|m| self.message(m))
            .sum()
    }
}

#[derive(Default)]
struct Summary {
    conversations: usize,
    decorates: usize,
    note_asks: usize,
    reports: usize,
    sealed: usize,
    forgotten: usize,
    leaving: usize,
    live: usize,
    facts: usize,
    max_request_tokens: u64,
    max_request_tokens_fitting: u64,
    checked_ceiling: usize,
    turn_did_not_fit: usize,
    non_contiguous: usize,
    hidden_for_ceiling: usize,
    system_in_export: usize,
}

fn completion(id: &str, message: Value, prompt_tokens: u64) -> Value {
    let finish = if message.get("tool_calls").is_some_and(|t| t.is_array()) {
        "tool_calls"
    } else {
        "stop"
    };
    json!({"id": id, "object": "chat.completion", "created": 1_700_000_000, "model": "gpt-4o",
        "choices": [{"index": 0, "finish_reason": finish, "message": message}],
        "usage": {"prompt_tokens": prompt_tokens, "completion_tokens": 20, "total_tokens": prompt_tokens + 20}})
}

/// A sentence from the messages that are leaving: the assistant/user texts of the history
/// before the current turn (the oldest non-empty one not yet noted).
fn note_sentence(history: &[Value], used: usize) -> String {
    let texts: Vec<String> = history
        .iter()
        .filter(|m| m["role"] == "user" || m["role"] == "assistant")
        .map(|m| text_of(&m["content"]))
        .filter(|t| !t.trim().is_empty())
        .collect();
    let t = texts
        .get(used.min(texts.len().saturating_sub(1)))
        .cloned()
        .unwrap_or_else(|| "The conversation began.".into());
    let sentence = t
        .split(['.', '\n'])
        .map(str::trim)
        .find(|s| s.len() > 8)
        .unwrap_or(t.trim());
    sentence.chars().take(200).collect()
}

fn replay(c: &mut recalld::client::Client, conv: &Value, counter: &Counter, sum: &mut Summary) {
    let id = conv["id"].as_str().unwrap();
    let memory = format!("replay-{}", id.replace('/', "-"));
    let tools = conv["tools"].clone();
    let trace = conv["messages"].as_array().unwrap();
    let mut now = 1.7e9;
    let mut history: Vec<Value> = Vec::new();
    let mut sent: Vec<Value> = Vec::new(); // every message the client sent (history + reports)
    let mut notes_used = 0;
    for msg in trace {
        now += 30.0;
        if msg["role"] != "assistant" {
            history.push(msg.clone());
            continue;
        }
        let mut asks = 0;
        let mut last_request_tokens;
        loop {
            let mut req = json!({"model": "gpt-4o", "temperature": 0.0, "messages": history.clone()});
            if tools.as_array().is_some_and(|t| !t.is_empty()) {
                req["tools"] = tools.clone();
            }
            let r = c
                .call(
                    "decorate",
                    json!({"memory": memory, "request": req, "now": now, "ceiling": CEILING}),
                )
                .unwrap_or_else(|e| panic!("{id}: decorate failed: {e}"));
            sum.decorates += 1;
            for m in &history {
                if !sent.iter().any(|s| s == m) {
                    sent.push(m.clone());
                }
            }
            let info = &r["info"];
            let out = r["request"]["messages"]
                .as_array()
                .unwrap_or_else(|| panic!("{id}: no messages in {}", r["request"]));
            let problems = transcript_problems(out);
            assert!(
                problems.is_empty(),
                "{id} at message {}: invalid transcript: {problems:?}\ninfo: {info}",
                history.len()
            );
            sum.non_contiguous += non_contiguous(out);
            let request_tokens = info["request_tokens"]
                .as_u64()
                .unwrap_or_else(|| panic!("{id}: no request_tokens in {info}"));
            let fixed = info["fixed"].as_u64().unwrap();
            let turn = counter.current_turn(&history);
            sum.max_request_tokens = sum.max_request_tokens.max(request_tokens);
            last_request_tokens = request_tokens;
            if !info["hidden_for_ceiling"].as_array().is_none_or(|h| h.is_empty()) {
                sum.hidden_for_ceiling += 1;
            }
            if fixed + turn <= CEILING {
                sum.checked_ceiling += 1;
                sum.max_request_tokens_fitting = sum.max_request_tokens_fitting.max(request_tokens);
                assert!(
                    request_tokens <= CEILING,
                    "{id} at message {}: request {request_tokens} tokens over the ceiling {CEILING} though the current turn fits \
                     (fixed {fixed} + turn {turn})\ninfo: {info}",
                    history.len()
                );
            } else {
                sum.turn_did_not_fit += 1;
            }
            let has_note_tool = r["request"]["tools"].as_array().is_some_and(|ts| {
                ts.iter()
                    .any(|t| t["function"]["name"] == "note" || t["name"] == "note")
            });
            assert_eq!(
                has_note_tool,
                info["note_ask"] == true,
                "{id}: note tool and info.note_ask disagree: {info}"
            );
            if !has_note_tool {
                break;
            }
            // A note ask: the model answers with a note call only.
            asks += 1;
            sum.note_asks += 1;
            assert!(
                asks <= MAX_ASKS_PER_STEP,
                "{id}: {asks} note asks in a row at message {}: {info}",
                history.len()
            );
            let sentence = note_sentence(&history, notes_used);
            notes_used += 1;
            let args = json!({"notes": [{"note": sentence, "subject": "customer", "object": format!("topic {notes_used}"), "milestone": false}]});
            let call_id = format!("call_note_{}_{}", sum.decorates, asks);
            let reply_msg = json!({"role": "assistant", "content": null, "tool_calls": [
                {"id": call_id, "type": "function", "function": {"name": "note", "arguments": args.to_string()}}]});
            let rep = c
                .call("report", json!({"memory": memory, "response": completion(&call_id, reply_msg.clone(), request_tokens), "now": now}))
                .unwrap_or_else(|e| panic!("{id}: report of a note failed: {e}"));
            sum.reports += 1;
            assert_eq!(
                rep["again"], true,
                "{id}: a reply holding only a note call must give again: true: {rep}"
            );
            sent.push(reply_msg);
            now += 1.0;
        }
        // The real reply.
        let rep = c
            .call("report", json!({"memory": memory, "response": completion(&format!("c{}", sum.reports), msg.clone(), last_request_tokens), "now": now}))
            .unwrap_or_else(|e| panic!("{id}: report failed: {e}"));
        sum.reports += 1;
        assert_eq!(rep["again"], false, "{id}: a real reply must not ask again: {rep}");
        history.push(msg.clone());
        sent.push(msg.clone());
    }
    // Lossless export.
    let export = c
        .call("export", json!({"memory": memory}))
        .unwrap_or_else(|e| panic!("{id}: export failed: {e}"));
    let stored: std::collections::HashSet<String> = export["messages"]
        .as_array()
        .unwrap()
        .iter()
        .map(|m| key(&m["message"]))
        .collect();
    for m in &sent {
        if m["role"] == "system" {
            if stored.contains(&key(m)) {
                sum.system_in_export += 1;
            }
            continue;
        }
        assert!(
            stored.contains(&key(m)),
            "{id}: export lost a message the client sent: {m}"
        );
    }
    for e in export["episodes"].as_array().unwrap() {
        match e["state"].as_str().unwrap_or("") {
            "sealed" => sum.sealed += 1,
            "forgotten" => sum.forgotten += 1,
            "leaving" => sum.leaving += 1,
            _ => sum.live += 1,
        }
    }
    sum.facts += export["facts"].as_array().map_or(0, Vec::len);
    sum.conversations += 1;
}

#[test]
fn agent_traces_replay_within_the_ceiling_with_valid_transcripts_and_lossless_export() {
    let path = bench_dir().join("agent-traces-dev.jsonl");
    let text = std::fs::read_to_string(&path)
        .unwrap_or_else(|e| panic!("bench data {} is required (set RECALLD_BENCH_DIR): {e}", path.display()));
    let convs: Vec<Value> = text
        .lines()
        .filter(|l| !l.trim().is_empty())
        .map(|l| serde_json::from_str(l).unwrap())
        .collect();
    assert_eq!(convs.len(), 111, "expected 100 tau-bench + 11 SWE-agent conversations");
    let counter = Counter {
        bpe: bpe_openai::cl100k_base(),
    };
    let d = match std::env::var_os("RECALLD_REPLAY_BIN") {
        Some(bin) if !bin.is_empty() => {
            let dir = tempfile::tempdir().unwrap();
            let socket = dir.path().join("recalld.sock");
            let data = dir.path().join("data");
            let mut child = std::process::Command::new(bin)
                .arg("serve")
                .arg("--socket")
                .arg(&socket)
                .arg("--data")
                .arg(&data)
                .env_remove("RECALLD_CONFIG")
                .env("RECALLD_LOG", "warn")
                .env("RECALLD_MODEL_DIR", util::model_dir())
                .stdout(std::process::Stdio::null())
                .spawn()
                .unwrap();
            util::wait_for_socket(&socket, &mut child);
            Daemon {
                child: Some(child),
                dir,
                socket,
                data,
            }
        }
        _ => Daemon::start(),
    };
    let mut c = d.client();
    let mut sum = Summary::default();
    let started = Instant::now();
    // The debug daemon's built-in embedder is slow (about 15 s for a tau-bench conversation
    // that cuts episodes), so by default a fixed sample is replayed: every 20th tau-bench
    // conversation and the first 2 SWE-agent ones. RECALLD_REPLAY_ALL=1 replays all 111;
    // RECALLD_REPLAY_BIN=target/release/recalld runs them against a release daemon (about 1 min).
    let all = std::env::var("RECALLD_REPLAY_ALL").is_ok_and(|v| v == "1");
    let (mut tau, mut swe) = (0, 0);
    let chosen: Vec<&Value> = convs
        .iter()
        .filter(|c| {
            if all {
                return true;
            }
            if c["source"] == "tau-bench" {
                tau += 1;
                (tau - 1) % 20 == 0
            } else {
                swe += 1;
                swe <= 2
            }
        })
        .collect();
    eprintln!(
        "replaying {} of {} conversations{}",
        chosen.len(),
        convs.len(),
        if all {
            ""
        } else {
            " (sample; RECALLD_REPLAY_ALL=1 for all)"
        }
    );
    for conv in chosen {
        let t = Instant::now();
        let before = sum.decorates;
        replay(&mut c, conv, &counter, &mut sum);
        eprintln!(
            "replayed {} ({} decorates) in {:.2} s",
            conv["id"],
            sum.decorates - before,
            t.elapsed().as_secs_f64()
        );
    }
    eprintln!(
        "replay: {} conversations in {:.1} s; {} decorates, {} reports, {} note asks; episodes: {} sealed, {} forgotten, \
         {} leaving, {} live; {} facts; max request tokens {} (max {} where the turn fits, {} decorates checked, {} with a \
         current turn too big for the ceiling); {} decorates held episodes back for the ceiling; {} tool calls not answered \
         right after their message; system message in export for {} conversations",
        sum.conversations,
        started.elapsed().as_secs_f64(),
        sum.decorates,
        sum.reports,
        sum.note_asks,
        sum.sealed,
        sum.forgotten,
        sum.leaving,
        sum.live,
        sum.facts,
        sum.max_request_tokens,
        sum.max_request_tokens_fitting,
        sum.checked_ceiling,
        sum.turn_did_not_fit,
        sum.hidden_for_ceiling,
        sum.non_contiguous,
        sum.system_in_export,
    );
    assert!(
        sum.note_asks > 0,
        "a 4,000-token ceiling over these traces must ask for notes"
    );
    assert!(sum.sealed + sum.forgotten > 0, "some episodes must seal");
}
