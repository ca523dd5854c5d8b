//! Tool outputs answer calls: a Chat tool message whose call was never made is refused, since
//! a memory that kept it would hand back a transcript every provider rejects.

use std::collections::HashSet;

use super::records::StoredMessage;
use super::EngineError;
use crate::formats::{Format, Kind, Message, ParsedRequest, Role};

/// Checks the request's new messages against the calls already stored (`kept`) and the calls
/// earlier in the new messages themselves. The error names the message as the request has it.
/// Only the calls the new outputs answer are looked for in `kept` (a set of every call a long
/// history made, built at each decorate, was 4% of decorate's CPU on agent traffic).
pub(super) fn check_tool_outputs<'a>(
    kept: impl Iterator<Item = &'a StoredMessage>,
    new: &[Message],
    request: &ParsedRequest,
) -> Result<(), EngineError> {
    // The outputs no call before them among the new messages answers: the call each names, or
    // None for a legacy `function` message, which carries no id and needs some call before it.
    let mut wanted: Vec<(&Message, Option<&str>)> = Vec::new();
    let mut calls: HashSet<&str> = HashSet::new();
    for m in new {
        if m.format == Format::ChatCompletions && m.role == Role::Tool && m.kind == Kind::Message {
            match m.tool_call_id.as_deref().filter(|id| !id.is_empty()) {
                Some(id) if calls.contains(id) => {}
                None if !calls.is_empty() => {}
                id => wanted.push((m, id)),
            }
        }
        calls.extend(m.tool_calls.iter().map(|c| c.id.as_str()));
    }
    if wanted.is_empty() {
        return Ok(());
    }
    for m in kept {
        for c in &m.message.tool_calls {
            wanted.retain(|(_, id)| id.is_some_and(|id| id != c.id));
        }
        if wanted.is_empty() {
            return Ok(());
        }
    }
    let (m, id) = wanted[0];
    Err(EngineError::InvalidArgument(format!(
        "{}: tool output for call {:?} has no preceding assistant message making that call; \
         providers reject such a history, so nothing was stored",
        name_in_request(m, request),
        id.unwrap_or("")
    )))
}

/// `messages[i]` for the message as it sits in the request (instructions lead in Chat).
fn name_in_request(m: &Message, request: &ParsedRequest) -> String {
    let found = request.history.iter().position(|h| h.raw == m.raw && h.role == m.role);
    match found {
        Some(i) => format!("messages[{}]", request.instructions.len() + i),
        None => "a tool message".to_string(),
    }
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;
    use crate::engine::records::{MemoryRecord, Source};
    use crate::formats::parse_request;

    /// The request's history: the first `stored` messages as the memory kept them, the rest new.
    fn check(messages: serde_json::Value, stored: usize) -> Result<(), String> {
        let request = parse_request(json!({"model": "gpt-4o", "messages": messages})).unwrap();
        let memory = MemoryRecord::new("m", 0.0);
        let kept: Vec<StoredMessage> = request.history[..stored]
            .iter()
            .map(|m| StoredMessage::new(&memory, m.clone(), 0.0, Source::Request))
            .collect();
        check_tool_outputs(kept.iter(), &request.history[stored..], &request).map_err(|e| e.to_string())
    }

    fn call(id: &str) -> serde_json::Value {
        json!({"role": "assistant", "content": null, "tool_calls": [
            {"id": id, "type": "function", "function": {"name": "f", "arguments": "{}"}}]})
    }

    #[test]
    fn an_output_is_answered_by_its_call_stored_long_before_or_new_before_it() {
        let mut history = vec![json!({"role": "user", "content": "go"}), call("c1")];
        for i in 0..50 {
            history.push(json!({"role": "user", "content": format!("turn {i}")}));
            history.push(json!({"role": "assistant", "content": "ok"}));
        }
        let stored = history.len();
        history.push(json!({"role": "tool", "tool_call_id": "c1", "content": "late"}));
        history.push(call("c2"));
        history.push(json!({"role": "tool", "tool_call_id": "c2", "content": "at once"}));
        history.push(json!({"role": "function", "name": "f", "content": "legacy"}));
        assert_eq!(check(json!(history), stored), Ok(()));
        // A legacy output needs some call before it, stored or new.
        let legacy = json!([call("c1"), {"role": "function", "name": "f", "content": "x"}]);
        assert_eq!(check(legacy.clone(), 1), Ok(()));
        assert!(check(json!([legacy[1]]), 0).is_err());
    }

    #[test]
    fn the_first_output_no_call_answers_is_named() {
        let history = json!([
            call("c1"),
            {"role": "tool", "tool_call_id": "c1", "content": "fine"},
            {"role": "tool", "tool_call_id": "c7", "content": "no call"},
            {"role": "tool", "tool_call_id": "c8", "content": "no call either"},
        ]);
        let err = check(history.clone(), 1).unwrap_err();
        assert!(err.contains("messages[2]") && err.contains("\"c7\""), "{err}");
        // A call made after an output does not answer it.
        let later = json!([{"role": "tool", "tool_call_id": "c3", "content": "early"}, call("c3")]);
        assert!(check(later, 0).unwrap_err().contains("messages[0]"));
    }
}
