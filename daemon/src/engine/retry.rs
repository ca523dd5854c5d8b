//! Retried reports: a client whose report got no answer (the daemon restarted, the connection
//! dropped) sends it again. If its messages are already the memory's newest reply, the retry
//! is answered without storing them twice.

use super::records::{Source, StoredMessage};
use crate::formats::Message;

/// Whether `reply` (the messages report would store) equals what the memory stored from
/// replies since its last request message. A reply is only ever reported once per request,
/// so an equal tail means this one already was.
pub(super) fn already_reported(messages: &[StoredMessage], reply: &[Message]) -> bool {
    if reply.is_empty() {
        return false;
    }
    let since_request = messages
        .iter()
        .rposition(|m| m.source == Source::Request)
        .map(|i| i + 1)
        .unwrap_or(0);
    let tail: Vec<u64> = messages[since_request..]
        .iter()
        .filter(|m| !m.note && m.superseded_at.is_none())
        .map(|m| m.fingerprint)
        .collect();
    let incoming: Vec<u64> = reply.iter().map(Message::fingerprint).collect();
    tail == incoming
}

/// `again`: the reply held only the note call (now removed), so the model must be called once
/// more.
pub(super) fn again(
    response: &serde_json::Value,
    removed: &[crate::formats::ToolCall],
) -> Result<bool, super::EngineError> {
    let reparsed = crate::formats::parse_response(response)?;
    Ok(!removed.is_empty() && !reparsed.has_content() && reparsed.messages.iter().all(|m| m.tool_calls.is_empty()))
}
