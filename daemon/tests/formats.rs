//! formats against real traffic: every conversation of agent-traces-dev.jsonl, as Chat
//! Completions, as Responses and as Anthropic Messages, parses, renders back unchanged, pairs every tool call with its
//! output, and fingerprints alike when equal and apart when edited.

use std::collections::HashMap;
use std::path::PathBuf;

use recalld::formats::{parse_request, render_request, Format, Kind, Message, ParsedRequest, Role};
use serde_json::{json, Value};

/// The bench conversations. Fails (never skips) when the file is missing.
fn traces() -> Vec<Value> {
    let dir = std::env::var_os("RECALLD_BENCH_DIR")
        .map(PathBuf::from)
        .unwrap_or_else(|| PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../../shared/bench"));
    let file = dir.join("agent-traces-dev.jsonl");
    let text = std::fs::read_to_string(&file)
        .unwrap_or_else(|e| panic!("cannot read {} (set RECALLD_BENCH_DIR): {e}", file.display()));
    let lines: Vec<Value> = text
        .lines()
        .filter(|l| !l.trim().is_empty())
        .enumerate()
        .map(|(i, l)| serde_json::from_str(l).unwrap_or_else(|e| panic!("line {}: {e}", i + 1)))
        .collect();
    assert!(
        lines.len() >= 100,
        "only {} conversations in {}",
        lines.len(),
        file.display()
    );
    lines
}

fn chat_request(t: &Value) -> Value {
    json!({"messages": t["messages"], "model": "gpt-4o", "temperature": 0.0, "tools": t["tools"]})
}

/// The same conversation as a Responses request, in the shapes clients really send: the system
/// prompt in `instructions`, user messages alternating between the short and the typed form,
/// assistant text as output items with ids, a reasoning item before each call batch, calls and
/// outputs as items.
fn responses_request(t: &Value) -> Value {
    let mut input = Vec::new();
    let mut instructions = None;
    for (i, m) in t["messages"].as_array().unwrap().iter().enumerate() {
        let content = m["content"].as_str().unwrap_or_default();
        match m["role"].as_str().unwrap() {
            "system" if instructions.is_none() => instructions = Some(content.to_string()),
            "user" if i % 2 == 0 => input.push(json!({"role": "user", "content": content})),
            "user" => input
                .push(json!({"type": "message", "role": "user", "content": [{"type": "input_text", "text": content}]})),
            "assistant" => {
                if !content.is_empty() {
                    input.push(
                        json!({"type": "message", "id": format!("msg_{i}"), "status": "completed", "role": "assistant",
                        "content": [{"type": "output_text", "text": content, "annotations": []}]}),
                    );
                }
                if let Some(calls) = m["tool_calls"].as_array() {
                    input.push(json!({"type": "reasoning", "id": format!("rs_{i}"), "summary": [], "encrypted_content": "gAAAA"}));
                    for c in calls {
                        input.push(json!({"type": "function_call", "id": format!("fc_{i}"), "status": "completed",
                            "call_id": c["id"], "name": c["function"]["name"], "arguments": c["function"]["arguments"]}));
                    }
                }
            }
            "tool" => {
                input.push(json!({"type": "function_call_output", "call_id": m["tool_call_id"], "output": content}))
            }
            other => panic!("unexpected role {other} in the bench file"),
        }
    }
    let tools: Vec<Value> = t["tools"]
        .as_array()
        .map(Vec::as_slice)
        .unwrap_or_default()
        .iter()
        .map(|tool| {
            let f = &tool["function"];
            json!({"type": "function", "name": f["name"], "description": f["description"], "parameters": f["parameters"]})
        })
        .collect();
    let mut v = json!({"model": "gpt-5", "input": input, "tools": tools, "store": false});
    if let Some(i) = instructions {
        v["instructions"] = json!(i);
    }
    v
}

fn render_back(p: &ParsedRequest) -> Value {
    render_request(p.format, &p.instructions, &p.history, &p.rest, &[])
}

/// Every call in the history has its output after it, and every output answers an earlier call.
fn check_tool_pairs(id: &str, history: &[Message]) {
    let mut open: HashMap<&str, usize> = HashMap::new();
    let mut calls = 0;
    for (i, m) in history.iter().enumerate() {
        for c in &m.tool_calls {
            assert!(!c.id.is_empty(), "{id}: history[{i}] has a call without id");
            assert!(open.insert(&c.id, i).is_none(), "{id}: call id {} repeated", c.id);
            calls += 1;
        }
        if m.role == Role::Tool && m.kind == Kind::Message {
            let answered = m
                .tool_call_id
                .as_deref()
                .unwrap_or_else(|| panic!("{id}: history[{i}] tool output without id"));
            assert!(
                open.remove(answered).is_some(),
                "{id}: history[{i}] answers unknown call {answered}"
            );
        }
    }
    assert!(open.is_empty(), "{id}: calls without output: {open:?}");
    let outputs = history.iter().filter(|m| m.role == Role::Tool).count();
    assert_eq!(calls, outputs, "{id}");
}

#[test]
fn chat_conversations_round_trip() {
    let mut calls = 0;
    for t in traces() {
        let id = t["id"].as_str().unwrap();
        let v = chat_request(&t);
        let p = parse_request(v.clone()).unwrap_or_else(|e| panic!("{id}: {e}"));
        assert_eq!(p.format, Format::ChatCompletions);
        assert_eq!(render_back(&p), v, "{id}");
        // Same key order too: byte for byte.
        assert_eq!(
            serde_json::to_string(&render_back(&p)).unwrap(),
            serde_json::to_string(&v).unwrap(),
            "{id}"
        );
        let n = t["messages"].as_array().unwrap().len();
        assert_eq!(p.instructions.len(), 1, "{id}");
        assert_eq!(p.instructions_role, Role::System);
        assert_eq!(p.instructions.len() + p.history.len(), n, "{id}");
        assert!(p
            .history
            .iter()
            .all(|m| m.kind == Kind::Message && m.format == Format::ChatCompletions));
        assert_eq!(p.model.as_deref(), Some("gpt-4o"));
        assert_eq!(p.rest["tools"], t["tools"]);
        for (m, raw) in p
            .instructions
            .iter()
            .chain(&p.history)
            .zip(t["messages"].as_array().unwrap())
        {
            assert_eq!(&m.raw, raw);
            if let Some(s) = raw["content"].as_str() {
                assert!(m.text.starts_with(s), "{id}: text lost its content");
            }
        }
        check_tool_pairs(id, &p.history);
        calls += p.history.iter().map(|m| m.tool_calls.len()).sum::<usize>();
    }
    assert!(calls > 700, "only {calls} tool calls seen");
}

#[test]
fn responses_conversations_round_trip() {
    for t in traces() {
        let id = t["id"].as_str().unwrap();
        let v = responses_request(&t);
        let p = parse_request(v.clone()).unwrap_or_else(|e| panic!("{id}: {e}"));
        assert_eq!(p.format, Format::Responses);
        assert_eq!(render_back(&p), v, "{id}");
        assert_eq!(p.instructions.len(), 1, "{id}");
        assert_eq!(p.instructions[0].raw, v["instructions"]);
        assert_eq!(p.instructions_role, Role::Developer);
        assert_eq!(p.history.len(), v["input"].as_array().unwrap().len(), "{id}");
        assert_eq!(p.provider_history, None);
        check_tool_pairs(id, &p.history);

        // The chat form of the same conversation carries the same text and calls.
        let c = parse_request(chat_request(&t)).unwrap();
        let calls = |h: &[Message]| h.iter().flat_map(|m| m.tool_calls.clone()).collect::<Vec<_>>();
        assert_eq!(calls(&p.history), calls(&c.history), "{id}");
        let texts = |h: &[Message]| {
            h.iter()
                .filter(|m| m.kind == Kind::Message)
                .map(Message::content_text)
                .filter(|t| !t.is_empty())
                .collect::<Vec<_>>()
        };
        assert_eq!(texts(&p.history), texts(&c.history), "{id}");
    }
}

#[test]
fn anthropic_messages_conversations_round_trip() {
    for t in traces() {
        let id = t["id"].as_str().unwrap();
        // The chat conversation rendered as Messages, with its tools as {name, description, input_schema}.
        let c = parse_request(chat_request(&t)).unwrap();
        let mut rest = c.rest.clone();
        rest.remove("tools");
        let mut v = render_request(Format::AnthropicMessages, &c.instructions, &c.history, &rest, &[]);
        let tools: Vec<Value> = t["tools"]
            .as_array()
            .into_iter()
            .flatten()
            .map(|x| json!({"name": x["function"]["name"], "description": x["function"]["description"], "input_schema": x["function"]["parameters"]}))
            .collect();
        v["tools"] = Value::Array(tools);
        assert!(v["system"].is_string(), "{id}: instructions go to system");
        let p = parse_request(v.clone()).unwrap_or_else(|e| panic!("{id}: {e}"));
        assert_eq!(p.format, Format::AnthropicMessages, "{id}");
        assert_eq!(render_back(&p), v, "{id}");
        assert_eq!(p.instructions.len(), 1, "{id}");
        assert_eq!(p.instructions_role, Role::System);
        check_tool_pairs(id, &p.history);
        let calls = |h: &[Message]| {
            h.iter()
                .flat_map(|m| m.tool_calls.iter().map(|c| (c.id.clone(), c.name.clone())))
                .collect::<Vec<_>>()
        };
        assert_eq!(calls(&p.history), calls(&c.history), "{id}");
        let texts = |h: &[Message]| {
            h.iter()
                .map(Message::content_text)
                .filter(|t| !t.is_empty())
                .collect::<Vec<_>>()
        };
        assert_eq!(texts(&p.history), texts(&c.history), "{id}");
        let roles = |h: &[Message]| h.iter().map(|m| m.role).collect::<Vec<_>>();
        assert_eq!(roles(&p.history), roles(&c.history), "{id}");
    }
}

#[test]
fn conversions_between_formats_keep_fingerprints() {
    for t in traces() {
        let id = t["id"].as_str().unwrap();
        let c = parse_request(chat_request(&t)).unwrap();
        // Chat → Responses → Chat gives the same messages, call for call.
        let r = render_request(Format::Responses, &c.instructions, &c.history, &c.rest, &[]);
        let rp = parse_request(r.clone()).unwrap_or_else(|e| panic!("{id}: {e}"));
        check_tool_pairs(id, &rp.history);
        let back = render_request(Format::ChatCompletions, &rp.instructions, &rp.history, &rp.rest, &[]);
        let bp = parse_request(back.clone()).unwrap();
        let fps = |h: &[Message]| h.iter().map(Message::fingerprint).collect::<Vec<_>>();
        assert_eq!(fps(&bp.history), fps(&c.history), "{id}");
        assert_eq!(fps(&bp.instructions), fps(&c.instructions), "{id}");
    }
}

/// A copy of the message with one thing changed, in its own format.
fn edits(m: &Message) -> Vec<Value> {
    let mut out = Vec::new();
    let raw = &m.raw;
    if let Some(s) = raw["content"].as_str() {
        let mut e = raw.clone();
        e["content"] = json!(format!("{s}."));
        out.push(e);
        let mut e = raw.clone();
        e["role"] = json!(if m.role == Role::User { "assistant" } else { "user" });
        if m.role != Role::Tool {
            out.push(e);
        }
    }
    if raw.get("tool_calls").is_some() {
        let mut e = raw.clone();
        let args = e["tool_calls"][0]["function"]["arguments"]
            .as_str()
            .unwrap()
            .to_string();
        e["tool_calls"][0]["function"]["arguments"] = json!(format!("{args} "));
        out.push(e);
        let mut e = raw.clone();
        e["tool_calls"][0]["id"] = json!("call_other");
        out.push(e);
    }
    if raw.get("tool_call_id").is_some() {
        let mut e = raw.clone();
        e["tool_call_id"] = json!("call_other");
        out.push(e);
    }
    out
}

#[test]
fn fingerprints_match_equal_and_split_edited() {
    let mut by_fp: HashMap<u64, Value> = HashMap::new();
    let mut edited = 0;
    for t in traces() {
        let id = t["id"].as_str().unwrap();
        let a = parse_request(chat_request(&t)).unwrap();
        let b = parse_request(chat_request(&t)).unwrap();
        for (x, y) in a.history.iter().zip(&b.history) {
            assert_eq!(x.fingerprint(), y.fingerprint(), "{id}");
        }
        // The Responses form of a plain text message or tool output fingerprints like the chat
        // one (assistant text said together with calls is one chat message but two items).
        let r = parse_request(responses_request(&t)).unwrap();
        let plain = |h: &[Message]| {
            h.iter()
                .enumerate()
                .filter(|(i, m)| {
                    m.kind == Kind::Message
                        && m.tool_calls.is_empty()
                        && !m.text.is_empty()
                        && (m.role != Role::Assistant || h.get(i + 1).is_none_or(|n| n.kind == Kind::Message))
                })
                .map(|(_, m)| m.fingerprint())
                .collect::<Vec<_>>()
        };
        let chat_plain: Vec<u64> = a
            .history
            .iter()
            .filter(|m| m.tool_calls.is_empty() && !m.text.is_empty())
            .map(Message::fingerprint)
            .collect();
        assert_eq!(chat_plain, plain(&r.history), "{id}");
        for m in a.instructions.iter().chain(&a.history) {
            // Different messages never share a fingerprint.
            let key = json!({"role": m.role.as_str(), "content": m.raw["content"], "tool_calls": m.raw.get("tool_calls"), "tool_call_id": m.raw.get("tool_call_id")});
            if let Some(prev) = by_fp.insert(m.fingerprint(), key.clone()) {
                assert_eq!(prev, key, "{id}: two different messages share a fingerprint");
            }
            for e in edits(m) {
                let ep = parse_request(json!({"messages": [e]})).unwrap();
                let em = ep.instructions.iter().chain(&ep.history).next().unwrap().clone();
                assert_ne!(em.fingerprint(), m.fingerprint(), "{id}: edit not seen: {}", em.raw);
                edited += 1;
            }
        }
    }
    assert!(edited > 5000, "only {edited} edits tried");
}

/// Found by fuzzing (`fuzz/corpus/requests/crash-system-message-with-tool-result.json`): a Chat
/// request whose system message held a `tool_result` block was read as Anthropic Messages and
/// rendered back as Chat. A role only Chat has decides.
#[test]
fn a_system_message_with_a_tool_result_block_is_read_as_chat() {
    let request = serde_json::json!({
        "model": "m",
        "messages": [
            {"role": "system", "content": [{"type": "tool_result", "tool_use_id": "c", "content": "x"}]},
            {"role": "user", "content": "hi"},
        ],
    });
    let p = parse_request(request.clone()).unwrap();
    assert_eq!(p.format, Format::ChatCompletions);
    let again = parse_request(render_back(&p)).unwrap();
    assert_eq!(again.format, Format::ChatCompletions);
    assert_eq!(render_back(&again), render_back(&p));
}
