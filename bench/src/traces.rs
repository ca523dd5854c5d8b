//! The agent traces file (`agent-traces-dev.jsonl`, see the bench data README): one
//! conversation a line, OpenAI Chat Completions messages with tool calls and tool outputs.
//!
//! A memory outgrows any one trace, so the load mode plays traces one after another as the
//! sessions of one agent. A session is a trace made unique to its memory and repetition: the
//! first user message is tagged and tool call ids get a suffix. Without that, a trace played
//! twice in one memory would align with its first playing (an "edit" that supersedes history).

use std::path::Path;

use serde_json::{json, Value};

#[derive(Debug, Clone)]
pub struct Trace {
    pub id: String,
    pub messages: Vec<Value>,
    pub tools: Vec<Value>,
}

pub fn load(path: &Path) -> Result<Vec<Trace>, String> {
    let text = std::fs::read_to_string(path).map_err(|e| format!("{}: {e}", path.display()))?;
    let mut out = Vec::new();
    for (i, line) in text.lines().enumerate().filter(|(_, l)| !l.trim().is_empty()) {
        let v: Value = serde_json::from_str(line).map_err(|e| format!("{}:{}: {e}", path.display(), i + 1))?;
        let messages = v["messages"].as_array().cloned().unwrap_or_default();
        if !messages.iter().any(|m| m["role"] == "assistant") {
            continue; // nothing for the model to say: no call to make
        }
        out.push(Trace {
            id: v["id"].as_str().unwrap_or("?").to_owned(),
            messages,
            tools: v["tools"].as_array().cloned().unwrap_or_default(),
        });
    }
    if out.is_empty() {
        return Err(format!("{}: no conversation with an assistant message", path.display()));
    }
    Ok(out)
}

/// `trace` as session `tag` of a memory: the first user message starts with `[tag]` and every
/// tool call id ends with `-tag`.
pub fn session(trace: &Trace, tag: &str) -> Vec<Value> {
    let mut tagged_user = false;
    trace
        .messages
        .iter()
        .map(|m| {
            let mut m = m.clone();
            if m["role"] == "user" && !tagged_user {
                tagged_user = true;
                let text = m["content"].as_str().unwrap_or("").to_owned();
                m["content"] = json!(format!("[{tag}] {text}"));
            }
            if let Some(calls) = m.get_mut("tool_calls").and_then(Value::as_array_mut) {
                for c in calls {
                    let id = c["id"].as_str().unwrap_or("call").to_owned();
                    c["id"] = json!(format!("{id}-{tag}"));
                }
            }
            if let Some(id) = m.get("tool_call_id").and_then(Value::as_str) {
                m["tool_call_id"] = json!(format!("{id}-{tag}"));
            }
            m
        })
        .collect()
}
