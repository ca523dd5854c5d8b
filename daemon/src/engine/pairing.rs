//! Tool outputs answer calls: a Chat tool message whose call was never made is refused, since
//! a memory that kept it would hand back a transcript every provider rejects.

use std::collections::HashSet;

use super::records::StoredMessage;
use super::EngineError;
use crate::formats::{Format, Kind, Message, ParsedRequest, Role};

/// Checks the request's new messages against the calls already stored (`kept`) and the calls
/// earlier in the new messages themselves. The error names the message as the request has it.
pub(super) fn check_tool_outputs<'a>(
    kept: impl Iterator<Item = &'a StoredMessage>,
    new: &[Message],
    request: &ParsedRequest,
) -> Result<(), EngineError> {
    let mut calls: HashSet<&str> = HashSet::new();
    let mut any_call = false;
    for m in kept {
        for c in &m.message.tool_calls {
            calls.insert(&c.id);
            any_call = true;
        }
    }
    for m in new {
        for c in &m.tool_calls {
            calls.insert(&c.id);
            any_call = true;
        }
        if m.format != Format::ChatCompletions || m.role != Role::Tool || m.kind != Kind::Message {
            continue;
        }
        // A legacy `function` message carries no id: it needs some call before it.
        let answered = match m.tool_call_id.as_deref() {
            Some(id) if !id.is_empty() => calls.contains(id),
            _ => any_call,
        };
        if !answered {
            return Err(EngineError::InvalidArgument(format!(
                "{}: tool output for call {:?} has no preceding assistant message making that call; \
                 providers reject such a history, so nothing was stored",
                name_in_request(m, request),
                m.tool_call_id.as_deref().unwrap_or("")
            )));
        }
    }
    Ok(())
}

/// `messages[i]` for the message as it sits in the request (instructions lead in Chat).
fn name_in_request(m: &Message, request: &ParsedRequest) -> String {
    let found = request.history.iter().position(|h| h.raw == m.raw && h.role == m.role);
    match found {
        Some(i) => format!("messages[{}]", request.instructions.len() + i),
        None => "a tool message".to_string(),
    }
}
