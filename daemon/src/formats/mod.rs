//! Formats: the only place that knows provider JSON. Translates OpenAI Chat Completions,
//! OpenAI Responses and Anthropic Messages requests and replies to the neutral [`Message`] type
//! and back.
//!
//! Invariants:
//! - every provider message or item becomes exactly one [`Message`], whose `raw` is the JSON
//!   exactly as it came; rendering a message into its own format returns `raw` unchanged, so an
//!   unchanged request renders back equal to itself;
//! - a `raw` that is a JSON string (not an object) marks a message that came from a string
//!   field: the Responses `instructions` field, or a Responses `input` given as a string;
//! - nothing here panics on any JSON input: bad shapes are [`FormatError`]s that say where.

mod chat;
mod messages;
mod note;
mod request;
mod response;
mod responses;

use serde::{Deserialize, Serialize};
use serde_json::Value;
use sha2::{Digest, Sha256};

pub use note::{
    note_arguments, note_tool, recall_arguments, recall_tool, remember_arguments, remember_tool, NoteFact, Remember,
};
pub use request::{parse_request, parse_request_with, render_request, render_request_moving, ParsedRequest, Rendered};
pub use response::{parse_response, remove_tool_calls, ParsedResponse, Usage};

/// Reads back one message as stored and exported (`raw` in its provider `format`): the same
/// [`Message`] the request or reply parser made of it, so import restores it exactly.
pub fn parse_stored(raw: &Value, format: Format, at: &str) -> Result<Message, FormatError> {
    match (format, raw) {
        (Format::Responses, Value::String(s)) => Ok(responses::string_input(s)),
        (Format::Responses, _) => responses::parse_item(raw, at),
        (Format::ChatCompletions, _) => chat::parse_message(raw, at),
        (Format::AnthropicMessages, _) => messages::parse_message(raw, at),
    }
}

/// A provider API shape.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Format {
    /// OpenAI Chat Completions (`messages`, `chat.completion`).
    ChatCompletions,
    /// OpenAI Responses (`input`, `instructions`, `response`).
    Responses,
    /// Anthropic Messages (`system`, `messages` of content blocks, `message`).
    AnthropicMessages,
}

/// Who a message is from.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Role {
    System,
    Developer,
    User,
    Assistant,
    /// A tool output (Chat `tool` and legacy `function`; Responses `function_call_output`).
    Tool,
}

impl Role {
    /// The provider name of the role (`tool` for [`Role::Tool`]).
    pub fn as_str(self) -> &'static str {
        match self {
            Role::System => "system",
            Role::Developer => "developer",
            Role::User => "user",
            Role::Assistant => "assistant",
            Role::Tool => "tool",
        }
    }
}

/// Whether the engine can read a message, or only carry it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Kind {
    /// A message, a tool call or a tool output.
    Message,
    /// A provider item we only carry (Responses `reasoning`, `web_search_call`, …).
    Opaque,
}

/// One function call made by the assistant.
#[derive(Debug, Clone, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub struct ToolCall {
    /// Chat `tool_calls[].id`; Responses `call_id` (not the item `id`).
    pub id: String,
    pub name: String,
    /// The arguments as the model wrote them (a JSON text, not parsed).
    pub arguments: String,
}

/// One provider message or item, 1:1.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Message {
    pub role: Role,
    pub kind: Kind,
    /// All human-readable text in it (content text, refusals, tool-call name and arguments, tool
    /// output), joined with newlines; for sizing and search.
    pub text: String,
    /// Assistant tool calls (Chat `tool_calls`; Responses: the one `function_call`).
    pub tool_calls: Vec<ToolCall>,
    /// For tool outputs: the id of the call answered.
    pub tool_call_id: Option<String>,
    /// The message or item exactly as it came.
    pub raw: Value,
    pub format: Format,
    /// The bytes `raw` came as, when known (see [`Wire`]).
    #[serde(skip)]
    pub wire: Wire,
}

/// The MessagePack bytes a message came as in a request, while its `raw` is their value
/// unchanged: assembled into the reply as it is, the message is written as these bytes instead
/// of being encoded again. Whoever changes a message's `raw` makes a new message (the parsers
/// leave this empty). Not stored, and no part of what a message is: any two compare equal.
#[derive(Clone, Default)]
pub struct Wire(pub Option<bytes::Bytes>);

impl PartialEq for Wire {
    fn eq(&self, _: &Wire) -> bool {
        true
    }
}

impl std::fmt::Debug for Wire {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match &self.0 {
            Some(b) => write!(f, "Wire({} bytes)", b.len()),
            None => f.write_str("Wire(none)"),
        }
    }
}

/// A provider request, reply or note call that cannot be read. The message says where.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum FormatError {
    #[error("{at}: expected {expected}, found {found}")]
    WrongType {
        at: String,
        expected: &'static str,
        found: &'static str,
    },
    #[error("{at}: missing")]
    Missing { at: String },
    #[error("{at}: unknown role {role:?}")]
    UnknownRole { at: String, role: String },
    #[error("{at}: invalid json: {message}")]
    Json { at: String, message: String },
    #[error("{at}: {message}")]
    Invalid { at: String, message: String },
}

impl Message {
    /// A plain text message of `role` in `format`, for the engine's own blocks
    /// (`{"role", "content"}` in Chat, `{"type":"message", "role", "content"}` in Responses).
    /// [`Role::Tool`] builds a tool output without a call id; use [`Message::tool_output`].
    pub fn new(format: Format, role: Role, text: impl Into<String>) -> Message {
        let text = text.into();
        if role == Role::Tool {
            return Message::tool_output(format, "", text);
        }
        let raw = match format {
            Format::ChatCompletions => {
                serde_json::json!({"role": role.as_str(), "content": text})
            }
            Format::Responses => {
                serde_json::json!({"type": "message", "role": role.as_str(), "content": text})
            }
            Format::AnthropicMessages => messages::text_message(role, &text),
        };
        Message {
            role,
            kind: Kind::Message,
            text,
            tool_calls: Vec::new(),
            tool_call_id: None,
            raw,
            format,
            wire: Wire::default(),
        }
    }

    pub fn system(format: Format, text: impl Into<String>) -> Message {
        Message::new(format, Role::System, text)
    }

    pub fn developer(format: Format, text: impl Into<String>) -> Message {
        Message::new(format, Role::Developer, text)
    }

    pub fn user(format: Format, text: impl Into<String>) -> Message {
        Message::new(format, Role::User, text)
    }

    pub fn assistant(format: Format, text: impl Into<String>) -> Message {
        Message::new(format, Role::Assistant, text)
    }

    /// A tool output answering `call_id` (Chat `tool` message; Responses `function_call_output`).
    pub fn tool_output(format: Format, call_id: impl Into<String>, text: impl Into<String>) -> Message {
        let (call_id, text) = (call_id.into(), text.into());
        let raw = match format {
            Format::ChatCompletions => {
                serde_json::json!({"role": "tool", "tool_call_id": call_id, "content": text})
            }
            Format::Responses => serde_json::json!({
                "type": "function_call_output", "call_id": call_id, "output": text
            }),
            Format::AnthropicMessages => messages::tool_output(&call_id, &text),
        };
        Message {
            role: Role::Tool,
            kind: Kind::Message,
            text,
            tool_calls: Vec::new(),
            tool_call_id: Some(call_id),
            raw,
            format,
            wire: Wire::default(),
        }
    }

    /// The message in the given format: itself when already in it, else a conversion of its
    /// role, text content and tool calls (see [`render_request`]).
    pub fn to_format(&self, format: Format) -> Vec<Message> {
        if self.format == format {
            return vec![self.clone()];
        }
        request::convert(self, format)
            .into_iter()
            .filter_map(|raw| match format {
                Format::ChatCompletions => chat::parse_owned(raw, "").ok(),
                Format::Responses => responses::parse_item(&raw, "").ok(),
                Format::AnthropicMessages => messages::parse_message(&raw, "").ok(),
            })
            .collect()
    }

    /// The text of the content only: `text` without tool-call names and arguments.
    pub fn content_text(&self) -> String {
        match self.format {
            Format::ChatCompletions => chat::content_text(&self.raw),
            Format::Responses => responses::content_text(&self.raw),
            Format::AnthropicMessages => messages::content_text(&self.raw),
        }
    }

    /// This message without its calls to the tool `name`: `None` when nothing would remain
    /// (a Responses `function_call` to it, or a Chat assistant message holding only such calls
    /// and no content), else the message with those calls taken out of `raw` too (unchanged
    /// when it has none).
    pub fn without_tool_calls(&self, name: &str) -> Option<Message> {
        if !self.tool_calls.iter().any(|c| c.name == name) {
            return Some(self.clone());
        }
        match self.format {
            Format::Responses => None,
            Format::ChatCompletions => {
                let mut raw = self.raw.clone();
                chat::drop_calls(&mut raw, name);
                let msg = chat::parse_owned(raw, "").ok()?;
                let has_content =
                    !msg.text.is_empty() || matches!(msg.raw.get("content"), Some(Value::Array(a)) if !a.is_empty());
                if msg.tool_calls.is_empty() && !has_content {
                    None
                } else {
                    Some(msg)
                }
            }
            Format::AnthropicMessages => {
                let mut raw = self.raw.clone();
                messages::drop_calls(&mut raw, name);
                let msg = messages::parse_message(&raw, "").ok()?;
                let has_content = match raw.get("content") {
                    Some(Value::Array(a)) => !a.is_empty(),
                    Some(Value::String(s)) => !s.is_empty(),
                    _ => false,
                };
                has_content.then_some(msg)
            }
        }
    }

    /// A stable hash of role, content, tool calls and tool_call_id, used to align a resent
    /// history with the stored one. It ignores the format, volatile fields (Responses item `id`
    /// and `status`, `annotations`, `logprobs`) and the content's spelling: a string and the
    /// same text as one text part hash alike, and empty text counts as none (`""` = `null`).
    /// Opaque items hash their whole `raw` but `status`.
    /// SHA-256 truncated to 64 bits: the same on every run and machine.
    pub fn fingerprint(&self) -> u64 {
        let mut h = Sha256::new();
        put(&mut h, b"role", self.role.as_str().as_bytes());
        match self.kind {
            Kind::Opaque => {
                let mut raw = self.raw.clone();
                if let Value::Object(m) = &mut raw {
                    m.remove("status");
                }
                let mut bytes = Vec::new();
                canonical(&raw, &mut bytes);
                put(&mut h, b"opaque", &bytes);
            }
            Kind::Message => {
                let parts = match self.format {
                    Format::ChatCompletions => chat::content_parts(&self.raw),
                    Format::Responses => responses::content_parts(&self.raw),
                    Format::AnthropicMessages => messages::content_parts(&self.raw),
                };
                for part in parts {
                    match part {
                        Part::Text(t) if t.is_empty() => {}
                        Part::Text(t) => put(&mut h, b"text", t.as_bytes()),
                        Part::Refusal(t) => put(&mut h, b"refusal", t.as_bytes()),
                        Part::Other(v) => {
                            let mut bytes = Vec::new();
                            canonical(&v, &mut bytes);
                            put(&mut h, b"part", &bytes);
                        }
                    }
                }
            }
        }
        for call in &self.tool_calls {
            put(&mut h, b"call.id", call.id.as_bytes());
            put(&mut h, b"call.name", call.name.as_bytes());
            put(&mut h, b"call.arguments", call.arguments.as_bytes());
        }
        if let Some(id) = &self.tool_call_id {
            put(&mut h, b"tool_call_id", id.as_bytes());
        }
        let digest = h.finalize();
        let mut first = [0u8; 8];
        first.copy_from_slice(&digest[..8]);
        u64::from_be_bytes(first)
    }
}

/// One piece of content, normalised for fingerprints.
pub(crate) enum Part {
    Text(String),
    Refusal(String),
    Other(Value),
}

/// Content parts of a content value (string, null or list of parts), shared by both formats.
pub(crate) fn parts_of(content: Option<&Value>) -> Vec<Part> {
    match content {
        None | Some(Value::Null) => Vec::new(),
        Some(Value::String(s)) => vec![Part::Text(s.clone())],
        Some(Value::Array(items)) => items
            .iter()
            .map(|p| match p {
                Value::String(s) => Part::Text(s.clone()),
                Value::Object(m) => match (m.get("text"), m.get("refusal")) {
                    (Some(Value::String(t)), _) if is_text_part(m) => Part::Text(t.clone()),
                    (_, Some(Value::String(r))) => Part::Refusal(r.clone()),
                    _ => {
                        let mut m = m.clone();
                        for k in ["id", "status", "annotations", "logprobs"] {
                            m.remove(k);
                        }
                        Part::Other(Value::Object(m))
                    }
                },
                other => Part::Other(other.clone()),
            })
            .collect(),
        Some(other) => vec![Part::Other(other.clone())],
    }
}

fn is_text_part(m: &serde_json::Map<String, Value>) -> bool {
    matches!(
        m.get("type").and_then(Value::as_str),
        None | Some("text" | "input_text" | "output_text" | "summary_text")
    )
}

/// The readable text of a content value: text parts and refusals joined with newlines.
pub(crate) fn text_of(content: Option<&Value>) -> String {
    let texts: Vec<String> = parts_of(content)
        .into_iter()
        .filter_map(|p| match p {
            Part::Text(t) | Part::Refusal(t) => Some(t),
            Part::Other(_) => None,
        })
        .collect();
    texts.join("\n")
}

/// `text` of a message: content text, then one `name arguments` line per call.
pub(crate) fn join_text(content: String, calls: &[ToolCall]) -> String {
    let mut out = content;
    for c in calls {
        if !out.is_empty() {
            out.push('\n');
        }
        out.push_str(&c.name);
        if !c.arguments.is_empty() {
            out.push(' ');
            out.push_str(&c.arguments);
        }
    }
    out
}

fn put(h: &mut Sha256, tag: &[u8], bytes: &[u8]) {
    h.update((tag.len() as u64).to_be_bytes());
    h.update(tag);
    h.update((bytes.len() as u64).to_be_bytes());
    h.update(bytes);
}

/// A deterministic serialisation with object keys sorted, for hashing.
fn canonical(v: &Value, out: &mut Vec<u8>) {
    match v {
        Value::Object(m) => {
            let mut keys: Vec<&String> = m.keys().collect();
            keys.sort();
            out.push(b'{');
            for k in keys {
                out.extend_from_slice(Value::String(k.clone()).to_string().as_bytes());
                out.push(b':');
                canonical(&m[k.as_str()], out);
                out.push(b',');
            }
            out.push(b'}');
        }
        Value::Array(a) => {
            out.push(b'[');
            for x in a {
                canonical(x, out);
                out.push(b',');
            }
            out.push(b']');
        }
        other => out.extend_from_slice(other.to_string().as_bytes()),
    }
}

/// Equal and written alike: the same keys in the same order at every depth. serde_json's `==`
/// ignores the order of a map's keys; the bytes a provider sees, and its cached prefix, do not.
pub(crate) fn identical(a: &Value, b: &Value) -> bool {
    match (a, b) {
        (Value::Object(x), Value::Object(y)) => {
            x.len() == y.len()
                && x.iter()
                    .zip(y)
                    .all(|((ka, va), (kb, vb))| ka == kb && identical(va, vb))
        }
        (Value::Array(x), Value::Array(y)) => x.len() == y.len() && x.iter().zip(y).all(|(va, vb)| identical(va, vb)),
        _ => a == b,
    }
}

/// "a string", "an array", … for error messages.
pub(crate) fn kind_of(v: &Value) -> &'static str {
    match v {
        Value::Null => "null",
        Value::Bool(_) => "a boolean",
        Value::Number(_) => "a number",
        Value::String(_) => "a string",
        Value::Array(_) => "an array",
        Value::Object(_) => "an object",
    }
}

pub(crate) fn wrong(at: impl Into<String>, expected: &'static str, v: &Value) -> FormatError {
    FormatError::WrongType {
        at: at.into(),
        expected,
        found: kind_of(v),
    }
}

/// `base.key`, or `key` when base is empty.
pub(crate) fn path(base: &str, key: &str) -> String {
    if base.is_empty() {
        key.to_string()
    } else {
        format!("{base}.{key}")
    }
}

/// `base` for an empty path, so errors on a lone message still name something.
pub(crate) fn at_or(base: &str, fallback: &str) -> String {
    if base.is_empty() {
        fallback.to_string()
    } else {
        base.to_string()
    }
}

/// Reads a role name; `legacy_function` maps Chat's `function` role to Tool.
pub(crate) fn role_of(v: Option<&Value>, at: &str, legacy_function: bool) -> Result<Role, FormatError> {
    match v {
        None => Err(FormatError::Missing { at: at.to_string() }),
        Some(Value::String(s)) => match s.as_str() {
            "system" => Ok(Role::System),
            "developer" => Ok(Role::Developer),
            "user" => Ok(Role::User),
            "assistant" => Ok(Role::Assistant),
            "tool" => Ok(Role::Tool),
            "function" if legacy_function => Ok(Role::Tool),
            _ => Err(FormatError::UnknownRole {
                at: at.to_string(),
                role: s.clone(),
            }),
        },
        Some(other) => Err(wrong(at, "a string", other)),
    }
}

/// Function-call arguments as text: a string as it is, anything else serialised.
pub(crate) fn arguments_text(v: Option<&Value>) -> String {
    match v {
        None | Some(Value::Null) => String::new(),
        Some(Value::String(s)) => s.clone(),
        Some(other) => other.to_string(),
    }
}

#[cfg(test)]
mod tests;
