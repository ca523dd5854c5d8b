//! Golden tests of the engine through the real daemon: scripted multi-turn conversations with
//! tool calls, in Chat Completions, Responses and Anthropic Messages shape, at a small ceiling
//! so history fades.
//! At each checkpoint the assembled request (and the `info` fields that matter) is compared
//! with a checked-in file in `tests/golden/`. `UPDATE_GOLDEN=1` rewrites the files; read the
//! diff before keeping it.
//!
//! Checkpoints: (a) before any fade; (b) while episodes leave (note ask last, in the
//! instructions' role — in Messages, last in `system` — note tool appended to `tools`); (c) after
//! the model's note (episodes sealed, their messages gone, facts block after the instructions); (d) after forgetting (a
//! forgotten episode's facts leave the block); (e) after a 25-hour gap (sleep, faded to the
//! landing).

use crate::util;

use std::path::PathBuf;

use serde_json::{json, Value};
use util::Daemon;

#[derive(Clone, Copy, PartialEq, Debug)]
enum Fmt {
    Chat,
    Responses,
    Messages,
}

const WORDS: &[&str] = &[
    "build", "cache", "linker", "target", "release", "module", "crate", "kernel", "socket", "buffer", "thread",
    "queue", "index", "vector", "schema", "parser", "token", "frame", "driver", "packet", "router", "branch", "commit",
    "deploy",
];

/// Deterministic filler text of `n` words.
fn words(seed: u64, n: usize) -> String {
    let mut x = seed.wrapping_mul(6364136223846793005).wrapping_add(1442695040888963407);
    let mut out = Vec::with_capacity(n);
    for _ in 0..n {
        x = x.wrapping_mul(6364136223846793005).wrapping_add(1442695040888963407);
        out.push(WORDS[((x >> 33) % WORDS.len() as u64) as usize]);
    }
    out.join(" ")
}

fn golden_dir() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("tests/golden")
}

/// Compares `actual` with `tests/golden/<name>.json`, or rewrites it under `UPDATE_GOLDEN=1`.
fn check_golden(name: &str, actual: &Value) {
    let path = golden_dir().join(format!("{name}.json"));
    let pretty = serde_json::to_string_pretty(actual).unwrap() + "\n";
    if std::env::var_os("UPDATE_GOLDEN").is_some_and(|v| v == "1") {
        std::fs::create_dir_all(golden_dir()).unwrap();
        std::fs::write(&path, &pretty).unwrap();
        return;
    }
    let expected = std::fs::read_to_string(&path)
        .unwrap_or_else(|e| panic!("{}: {e} (run with UPDATE_GOLDEN=1 to create it)", path.display()));
    let expected_v: Value = serde_json::from_str(&expected).unwrap();
    if &expected_v != actual {
        let exp_lines: Vec<&str> = expected.lines().collect();
        let act_lines: Vec<&str> = pretty.lines().collect();
        let first = exp_lines
            .iter()
            .zip(&act_lines)
            .position(|(a, b)| a != b)
            .unwrap_or(exp_lines.len().min(act_lines.len()));
        panic!(
            "golden {name} differs at line {}:\n expected: {:?}\n   actual: {:?}\n(UPDATE_GOLDEN=1 rewrites; full actual:\n{pretty})",
            first + 1,
            exp_lines.get(first),
            act_lines.get(first)
        );
    }
}

/// The `info` fields a golden keeps: deterministic ones (no floats that depend on the judge).
fn info_view(info: &Value) -> Value {
    let keys = [
        "format",
        "turn",
        "sleep",
        "faded",
        "note_ask",
        "facts_written",
        "ceiling",
        "budget",
        "landing",
        "fixed",
        "room",
        "typical_turn",
        "view_tokens",
        "request_tokens",
        "in_view",
        "hidden_for_ceiling",
    ];
    let mut out = serde_json::Map::new();
    for k in keys {
        out.insert(k.into(), info[k].clone());
    }
    let episodes: Vec<Value> = info["episodes"]
        .as_array()
        .unwrap()
        .iter()
        .map(|e| json!({"n": e["n"], "state": e["state"], "turns": e["turns"], "seqs": e["seqs"], "tokens": e["tokens"], "facts": e["facts"]}))
        .collect();
    out.insert("episodes".into(), Value::Array(episodes));
    Value::Object(out)
}

/// One scripted conversation: the client's own history (provider items), and the model.
struct Convo {
    fmt: Fmt,
    memory: String,
    ceiling: u64,
    history: Vec<Value>,
    now: f64,
    notes_sent: u64,
    turn: u64,
}

impl Convo {
    fn request(&self) -> Value {
        match self.fmt {
            Fmt::Chat => {
                let mut messages = vec![
                    json!({"role": "system", "content": "You are the build assistant for the recalld repo. Run commands with run_shell and report results briefly."}),
                ];
                messages.extend(self.history.iter().cloned());
                json!({
                    "model": "gpt-4o",
                    "max_tokens": 300,
                    "messages": messages,
                    "tools": [{"type": "function", "function": {"name": "run_shell", "description": "Run a shell command.",
                        "parameters": {"type": "object", "properties": {"cmd": {"type": "string"}}, "required": ["cmd"]}}}],
                })
            }
            // No `tools` field: the note tool must still be appended when asked.
            Fmt::Responses => json!({
                "model": "gpt-4.1",
                "max_output_tokens": 300,
                "instructions": "You are the build assistant for the recalld repo. Report results briefly.",
                "input": self.history,
            }),
            Fmt::Messages => json!({
                "model": "claude-sonnet-4-5",
                "max_tokens": 300,
                "system": "You are the build assistant for the recalld repo. Run commands with run_shell and report results briefly.",
                "messages": self.history,
                "tools": [{"name": "run_shell", "description": "Run a shell command.",
                    "input_schema": {"type": "object", "properties": {"cmd": {"type": "string"}}, "required": ["cmd"]}}],
            }),
        }
    }

    fn decorate(&mut self, c: &mut recalld::client::Client) -> Value {
        self.now += 30.0;
        c.call(
            "decorate",
            json!({"memory": self.memory, "request": self.request(), "now": self.now, "ceiling": self.ceiling}),
        )
        .unwrap()
    }

    fn user(&mut self, text: String) {
        self.turn += 1;
        self.history.push(match self.fmt {
            Fmt::Chat | Fmt::Responses | Fmt::Messages => json!({"role": "user", "content": text}),
        });
    }

    fn tool_output(&mut self, id: &str, text: String) {
        self.history.push(match self.fmt {
            Fmt::Chat => json!({"role": "tool", "tool_call_id": id, "content": text}),
            Fmt::Responses => json!({"type": "function_call_output", "call_id": id, "output": text}),
            Fmt::Messages => {
                json!({"role": "user", "content": [{"type": "tool_result", "tool_use_id": id, "content": text}]})
            }
        });
    }

    fn note_args(&self) -> String {
        let t = self.turn;
        json!({"notes": [
            {"note": format!("Build target t{t} passed with run_shell at turn {t}."), "subject": format!("target t{t}"), "object": "run_shell", "milestone": false},
            {"note": format!("The user approved release step {t}."), "subject": "user", "object": format!("release step {t}"), "milestone": true},
        ]})
        .to_string()
    }

    /// The model's reply: an optional note call, then a tool call or a text (or nothing).
    fn reply(&mut self, note: bool, call: Option<(&str, String)>, text: Option<String>) -> Value {
        let note_id = note.then(|| {
            self.notes_sent += 1;
            format!("note_{}", self.notes_sent)
        });
        match self.fmt {
            Fmt::Chat => {
                let mut calls = Vec::new();
                if let Some(id) = &note_id {
                    calls.push(json!({"id": id, "type": "function", "function": {"name": "note", "arguments": self.note_args()}}));
                }
                if let Some((id, cmd)) = &call {
                    calls.push(json!({"id": id, "type": "function", "function": {"name": "run_shell", "arguments": json!({"cmd": cmd}).to_string()}}));
                }
                let mut message = json!({"role": "assistant", "content": text});
                if !calls.is_empty() {
                    message["tool_calls"] = Value::Array(calls);
                }
                let finish = if call.is_some() || (note && text.is_none()) {
                    "tool_calls"
                } else {
                    "stop"
                };
                json!({"id": format!("cc{}", self.now), "object": "chat.completion", "model": "gpt-4o",
                    "choices": [{"index": 0, "finish_reason": finish, "message": message}]})
            }
            Fmt::Responses => {
                let mut output = Vec::new();
                if let Some(id) = &note_id {
                    output.push(json!({"type": "function_call", "id": format!("fc_{id}"), "call_id": id, "name": "note", "arguments": self.note_args(), "status": "completed"}));
                }
                if let Some((id, cmd)) = &call {
                    output.push(json!({"type": "function_call", "id": format!("fc_{id}"), "call_id": id, "name": "run_shell", "arguments": json!({"cmd": cmd}).to_string(), "status": "completed"}));
                }
                if let Some(t) = &text {
                    output.push(json!({"type": "message", "id": format!("msg_{}", self.now), "role": "assistant", "status": "completed",
                        "content": [{"type": "output_text", "text": t, "annotations": []}]}));
                }
                json!({"id": format!("resp_{}", self.now), "object": "response", "model": "gpt-4.1", "output": output})
            }
            Fmt::Messages => {
                let mut content = Vec::new();
                if let Some(t) = &text {
                    content.push(json!({"type": "text", "text": t}));
                }
                if let Some(id) = &note_id {
                    let input: Value = serde_json::from_str(&self.note_args()).unwrap();
                    content.push(json!({"type": "tool_use", "id": id, "name": "note", "input": input}));
                }
                if let Some((id, cmd)) = &call {
                    content.push(json!({"type": "tool_use", "id": id, "name": "run_shell", "input": {"cmd": cmd}}));
                }
                let stop = if call.is_some() || (note && text.is_none()) {
                    "tool_use"
                } else {
                    "end_turn"
                };
                json!({"id": format!("msg_{}", self.now), "type": "message", "role": "assistant", "model": "claude-sonnet-4-5",
                    "content": content, "stop_reason": stop, "stop_sequence": null})
            }
        }
    }

    /// Reports a reply and appends what the client keeps of it to its history.
    fn report(&mut self, c: &mut recalld::client::Client, reply: Value) -> Value {
        self.now += 5.0;
        let r = c
            .call(
                "report",
                json!({"memory": self.memory, "response": reply, "now": self.now}),
            )
            .unwrap();
        wait_for_lane(c);
        let resp = &r["response"];
        match self.fmt {
            Fmt::Chat => {
                let m = &resp["choices"][0]["message"];
                assert!(
                    m["tool_calls"]
                        .as_array()
                        .is_none_or(|cs| cs.iter().all(|c| c["function"]["name"] != "note")),
                    "the note call never reaches the client: {resp}"
                );
                if m["content"].is_string() || m["tool_calls"].is_array() {
                    self.history.push(m.clone());
                }
            }
            Fmt::Responses => {
                for it in resp["output"].as_array().unwrap() {
                    assert_ne!(it["name"], "note", "the note call never reaches the client: {resp}");
                    let mut it = it.clone();
                    // As an SDK user resending output items as input.
                    if let Some(o) = it.as_object_mut() {
                        o.remove("status");
                        o.remove("id");
                    }
                    self.history.push(it);
                }
            }
            Fmt::Messages => {
                let content = resp["content"].as_array().unwrap();
                assert!(
                    content.iter().all(|b| b["name"] != "note"),
                    "the note call never reaches the client: {resp}"
                );
                if !content.is_empty() {
                    self.history.push(json!({"role": "assistant", "content": content}));
                }
            }
        }
        r
    }
}

fn has_note_tool(fmt: Fmt, request: &Value) -> bool {
    request["tools"].as_array().is_some_and(|ts| {
        ts.iter().any(|t| match fmt {
            Fmt::Chat => t["function"]["name"] == "note",
            Fmt::Responses | Fmt::Messages => t["name"] == "note",
        })
    })
}

/// The request's message list (Chat `messages`, Responses `input`; Messages: `system` as a first
/// system message, then `messages`).
fn items(fmt: Fmt, request: &Value) -> Vec<Value> {
    match fmt {
        Fmt::Messages => {
            let mut out = vec![json!({"role": "system", "content": request["system"]})];
            out.extend(request["messages"].as_array().unwrap().iter().cloned());
            out
        }
        Fmt::Chat => request["messages"].as_array().unwrap().clone(),
        Fmt::Responses => match &request["input"] {
            Value::Array(a) => a.clone(),
            Value::String(s) => vec![json!({"role": "user", "content": s})],
            _ => vec![],
        },
    }
}

fn text_of(item: &Value) -> String {
    match &item["content"] {
        Value::String(s) => s.clone(),
        Value::Array(parts) => parts
            .iter()
            .filter_map(|p| p["text"].as_str().or_else(|| p["content"].as_str()))
            .collect::<Vec<_>>()
            .join(""),
        _ => item["output"].as_str().unwrap_or("").to_string(),
    }
}

fn states(info: &Value) -> Vec<String> {
    info["episodes"]
        .as_array()
        .unwrap()
        .iter()
        .map(|e| e["state"].as_str().unwrap().to_string())
        .collect()
}

fn snapshot(d: &Value) -> Value {
    json!({"request": d["request"], "info": info_view(&d["info"])})
}

/// Block role: system for Chat with system instructions, developer for Responses.
fn block_role(fmt: Fmt) -> &'static str {
    match fmt {
        Fmt::Chat => "system",
        Fmt::Responses => "developer",
        Fmt::Messages => "system",
    }
}

fn run_scenario(fmt: Fmt, name: &str, ceiling: u64) {
    // The fade, seal, forget and sleep mechanism alone: recall blocks (tests/recall.rs) would
    // add their sizes to the view and move every checkpoint.
    let d = Daemon::start_with_config("[engine]\nrecall = false\n");
    let mut c = d.client();
    let mut cv = Convo {
        fmt,
        memory: name.into(),
        ceiling,
        history: vec![],
        now: 1_767_225_600.0,
        notes_sent: 0,
        turn: 0,
    };
    let role = block_role(fmt);
    let mut seen = [false; 4]; // a, b, c, d
    let mut last_decorate = Value::Null;

    for i in 1..=40u64 {
        cv.user(format!(
            "Turn {i}: please build target t{i}. {}",
            words(i, 40 + (i % 3) as usize * 25)
        ));
        // Step 1 of the turn: the model calls a tool. Step 2: it answers in text.
        for step in 0..2 {
            let mut dec = cv.decorate(&mut c);
            let mut info = dec["info"].clone();
            let req = dec["request"].clone();
            let its = items(fmt, &req);

            // Always: the turn in progress is in the request; the ask comes with the tool.
            assert_eq!(info["note_ask"].as_bool().unwrap(), has_note_tool(fmt, &req), "{info}");
            let user_text = text_of(
                cv.history
                    .iter()
                    .rev()
                    .find(|m| m["role"] == "user" && m["content"].is_string())
                    .unwrap(),
            );
            assert!(
                its.iter().any(|m| text_of(m) == user_text),
                "the current user message is in view"
            );

            if !seen[0] && i == 3 && step == 0 {
                // (a) before any fade: everything in view, no ask, no blocks.
                assert_eq!(info["faded"], false);
                assert!(states(&info).iter().all(|s| s == "live"), "{info}");
                assert!(!has_note_tool(fmt, &req));
                seen[0] = true;
                check_golden(&format!("{name}_a_before_fade"), &snapshot(&dec));
            }

            let forgotten: Vec<&Value> = info["episodes"]
                .as_array()
                .unwrap()
                .iter()
                .filter(|e| e["state"] == "forgotten")
                .collect();
            if !seen[3] && !forgotten.is_empty() {
                // (d) after forgetting: the forgotten episodes' facts leave the block.
                seen[3] = true;
                let facts_text = its
                    .iter()
                    .map(text_of)
                    .find(|t| t.contains("Recorded facts"))
                    .unwrap_or_default();
                for e in &forgotten {
                    for f in e["facts"].as_array().unwrap() {
                        let f = f.as_u64().unwrap();
                        let export = c.call("export", json!({"memory": name})).unwrap();
                        let note = export["facts"]
                            .as_array()
                            .unwrap()
                            .iter()
                            .find(|x| x["n"] == f)
                            .unwrap()["note"]
                            .as_str()
                            .unwrap()
                            .to_string();
                        assert!(
                            !facts_text.contains(&note),
                            "forgotten fact {note:?} still in the block:\n{facts_text}"
                        );
                    }
                }
                check_golden(&format!("{name}_d_forgotten"), &snapshot(&dec));
            }

            let ask = has_note_tool(fmt, &req);
            if ask {
                // The ask is the last message, in the instructions' role (Messages: the end of
                // `system`); the note tool is last.
                let last = if fmt == Fmt::Messages {
                    &its[0]
                } else {
                    its.last().unwrap()
                };
                assert_eq!(last["role"], role, "{last}");
                assert!(text_of(last).contains("is leaving live context"));
                let tools = req["tools"].as_array().unwrap();
                let t = tools.last().unwrap();
                assert!(if fmt == Fmt::Chat {
                    t["function"]["name"] == "note"
                } else {
                    t["name"] == "note"
                });
                assert!(states(&info).iter().any(|s| s == "leaving"), "{info}");
                if !seen[1] {
                    // (b) while leaving.
                    seen[1] = true;
                    check_golden(&format!("{name}_b_leaving"), &snapshot(&dec));
                    // First ask: the model answers with the note call alone.
                    let reply = cv.reply(true, None, None);
                    let r = cv.report(&mut c, reply);
                    assert_eq!(r["again"], true, "the note call was all it held: {r}");
                    // Call again, as the client does on `again`.
                    dec = cv.decorate(&mut c);
                    info = dec["info"].clone();
                    let its2 = items(fmt, &dec["request"]);
                    assert_eq!(info["note_ask"], false, "no ask right after the note: {info}");
                    assert!(its2.iter().any(|m| text_of(m) == user_text));
                    // (c) is checked on this very request.
                    let sealed: Vec<&Value> = info["episodes"]
                        .as_array()
                        .unwrap()
                        .iter()
                        .filter(|e| e["state"] == "sealed")
                        .collect();
                    assert!(!sealed.is_empty(), "sealed after the note: {info}");
                    let facts_at = if fmt == Fmt::Responses { 0 } else { 1 };
                    let facts_item = if fmt == Fmt::Messages {
                        &its2[0]
                    } else {
                        &its2[facts_at]
                    };
                    assert_eq!(facts_item["role"], role);
                    let facts_text = text_of(facts_item);
                    let facts_text = facts_text.split("\n\n").last().unwrap();
                    assert!(
                        facts_text.starts_with("Recorded facts from compacted history"),
                        "{}",
                        facts_item
                    );
                    let in_view: Vec<u64> = info["in_view"]
                        .as_array()
                        .unwrap()
                        .iter()
                        .map(|v| v.as_u64().unwrap())
                        .collect();
                    for e in &sealed {
                        let (a, b) = (e["seqs"][0].as_u64().unwrap(), e["seqs"][1].as_u64().unwrap());
                        assert!(
                            in_view.iter().all(|s| *s < a || *s > b),
                            "sealed messages leave the view: {info}"
                        );
                    }
                    seen[2] = true;
                    check_golden(&format!("{name}_c_sealed"), &snapshot(&dec));
                }
            }
            let _ = info;
            last_decorate = dec.clone();
            let ask_now = has_note_tool(fmt, &dec["request"]);
            // The model's move: a tool call then a text answer; a later ask is answered with the
            // note alongside.
            let call_id = format!("call_{i}");
            let reply = if step == 0 {
                cv.reply(ask_now, Some((&call_id, format!("make t{i}"))), None)
            } else {
                cv.reply(ask_now, None, Some(format!("Built t{i}. {}", words(100 + i, 30))))
            };
            let r = cv.report(&mut c, reply);
            assert_eq!(r["again"], false, "{r}");
            if step == 0 {
                cv.tool_output(
                    &call_id,
                    format!("$ make t{i}\n{}", words(1000 + i, 120 + (i % 4) as usize * 20)),
                );
            }
        }
        // Once forgotten, go on until the view sits between the landing and the trigger (no
        // fade due, none in progress), so that only the gap below makes it fade.
        let li = &last_decorate["info"];
        if seen[3] && li["note_ask"] == false && li["view_tokens"].as_u64() > li["landing"].as_u64() {
            break;
        }
    }
    assert!(
        seen.iter().all(|s| *s),
        "all checkpoints reached: {seen:?}; last info {}",
        last_decorate["info"]
    );

    // (e) a 25-hour gap: the next user turn sleeps; the view fades to the landing.
    cv.now += 25.0 * 3600.0;
    cv.user(format!(
        "Back after a day: what is the state of the release? {}",
        words(7777, 30)
    ));
    let dec = cv.decorate(&mut c);
    let info = &dec["info"];
    assert_eq!(info["sleep"], true, "{info}");
    assert_eq!(
        info["faded"], true,
        "the view was above the landing before the gap: {info}"
    );
    let leaving_tokens: u64 = info["episodes"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|e| e["state"] == "leaving")
        .map(|e| e["tokens"].as_u64().unwrap())
        .sum();
    let view = info["view_tokens"].as_u64().unwrap();
    let landing = info["landing"].as_u64().unwrap();
    assert!(
        view - leaving_tokens <= landing,
        "faded to the landing: view {view} − leaving {leaving_tokens} > landing {landing}: {:#}",
        info_view(info)
    );
    check_golden(&format!("{name}_e_sleep"), &snapshot(&dec));
}

#[test]
fn chat_completions_conversation_fades_seals_forgets_and_sleeps() {
    run_scenario(Fmt::Chat, "chat", 2500);
}

#[test]
fn responses_conversation_fades_seals_forgets_and_sleeps() {
    run_scenario(Fmt::Responses, "responses", 2500);
}

#[test]
fn anthropic_messages_conversation_fades_seals_forgets_and_sleeps() {
    run_scenario(Fmt::Messages, "messages", 2500);
}

/// Waits until the background lane has run every queued job, so each step sees the same state
/// (an agent's next model call usually gives the lane that time).
fn wait_for_lane(c: &mut recalld::client::Client) {
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(60);
    while c.call("stats", json!({})).unwrap()["jobs_pending"] != 0 {
        assert!(
            std::time::Instant::now() < deadline,
            "background jobs did not finish within 60 s"
        );
        std::thread::sleep(std::time::Duration::from_millis(5));
    }
}
