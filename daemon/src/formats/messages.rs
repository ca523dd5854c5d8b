//! Anthropic Messages: `{role: "user"|"assistant", content: string | blocks}`, a top-level
//! `system`, `tool_use` blocks in assistant messages answered by `tool_result` blocks in the
//! next user message, and replies `{type: "message", content, stop_reason, usage}`.
//!
//! One message is one [`Message`]. A user message holding `tool_result` blocks is a
//! [`Role::Tool`] message answering the first result's `tool_use_id` (every result's text is in
//! it). The `system` field is one [`Role::System`] instruction whose `raw` is the field's value;
//! our own blocks are System messages too, and all of them render into `system`.

use serde_json::{json, Map, Value};
use std::borrow::Cow;

use super::{
    at_or, join_text, parts_of, path, text_of, wrong, Format, FormatError, Kind, Message, Part, Role, ToolCall,
};

/// Reads one Messages message; `at` names it in errors (`messages[3]`).
pub(crate) fn parse_message(v: &Value, at: &str) -> Result<Message, FormatError> {
    let m = v
        .as_object()
        .ok_or_else(|| wrong(at_or(at, "message"), "an object", v))?;
    let role = match m.get("role") {
        None => return Err(FormatError::Missing { at: path(at, "role") }),
        Some(Value::String(r)) if r == "user" => Role::User,
        Some(Value::String(r)) if r == "assistant" => Role::Assistant,
        // Our own blocks, held as messages while the engine works; rendered into `system`.
        Some(Value::String(r)) if r == "system" => Role::System,
        Some(Value::String(r)) => {
            return Err(FormatError::UnknownRole {
                at: path(at, "role"),
                role: r.clone(),
            })
        }
        Some(other) => return Err(wrong(path(at, "role"), "a string", other)),
    };
    let content = m.get("content");
    let blocks: &[Value] = match content {
        None | Some(Value::Null | Value::String(_)) => &[],
        Some(Value::Array(a)) => a,
        Some(other) => return Err(wrong(path(at, "content"), "a string, an array or null", other)),
    };
    let mut calls = Vec::new();
    let mut answers: Option<String> = None;
    let mut texts = Vec::new();
    if let Some(Value::String(s)) = content {
        texts.push(s.clone());
    }
    for (i, b) in blocks.iter().enumerate() {
        let bat = format!("{}[{i}]", path(at, "content"));
        let Some(bo) = b.as_object() else {
            return Err(wrong(bat, "an object", b));
        };
        match bo.get("type").and_then(Value::as_str) {
            Some("text") => texts.push(bo.get("text").and_then(Value::as_str).unwrap_or("").to_string()),
            Some("thinking") => texts.push(bo.get("thinking").and_then(Value::as_str).unwrap_or("").to_string()),
            Some("tool_use" | "server_tool_use") if role == Role::Assistant => {
                let id = str_field(bo, "id", &bat)?;
                let name = str_field(bo, "name", &bat)?;
                let arguments = match bo.get("input") {
                    None | Some(Value::Null) => "{}".to_string(),
                    Some(input) => input.to_string(),
                };
                calls.push(ToolCall { id, name, arguments });
            }
            Some("tool_result") => {
                let id = str_field(bo, "tool_use_id", &bat)?;
                answers.get_or_insert(id);
                texts.push(text_of(bo.get("content")));
            }
            _ => {}
        }
    }
    texts.retain(|t| !t.is_empty());
    let (role, tool_call_id) = match (role, answers) {
        (Role::User, Some(id)) => (Role::Tool, Some(id)),
        (role, _) => (role, None),
    };
    Ok(Message {
        role,
        kind: Kind::Message,
        text: join_text(texts.join("\n"), &calls),
        tool_calls: calls,
        tool_call_id,
        raw: v.clone(),
        format: Format::AnthropicMessages,
        wire: Default::default(),
    })
}

fn str_field(m: &Map<String, Value>, key: &str, at: &str) -> Result<String, FormatError> {
    match m.get(key) {
        None => Err(FormatError::Missing { at: path(at, key) }),
        Some(Value::String(s)) => Ok(s.clone()),
        Some(other) => Err(wrong(path(at, key), "a string", other)),
    }
}

/// The `system` field as one System instruction (`raw` is the field's value).
pub(crate) fn system_instruction(v: &Value) -> Result<Message, FormatError> {
    let text = match v {
        Value::String(s) => s.clone(),
        Value::Array(_) => text_of(Some(v)),
        other => return Err(wrong("system", "a string or an array of text blocks", other)),
    };
    Ok(Message {
        role: Role::System,
        kind: Kind::Message,
        text,
        tool_calls: Vec::new(),
        tool_call_id: None,
        raw: v.clone(),
        format: Format::AnthropicMessages,
        wire: Default::default(),
    })
}

/// Text of the text blocks and tool results only (no tool-use names or inputs).
pub(crate) fn content_text(raw: &Value) -> String {
    if raw.is_string() {
        return raw.as_str().unwrap_or_default().to_string();
    }
    let mut out = Vec::new();
    match raw.get("content") {
        Some(Value::String(s)) => out.push(s.clone()),
        Some(Value::Array(blocks)) => {
            for b in blocks {
                match b.get("type").and_then(Value::as_str) {
                    Some("text") => out.push(b.get("text").and_then(Value::as_str).unwrap_or("").to_string()),
                    Some("tool_result") => out.push(text_of(b.get("content"))),
                    _ => {}
                }
            }
        }
        _ => {}
    }
    out.retain(|t| !t.is_empty());
    out.join("\n")
}

/// Content parts for fingerprints: text blocks as text, tool results by their content,
/// anything else (images, documents) as it is; tool_use blocks are hashed as calls.
pub(crate) fn content_parts(raw: &Value) -> Vec<Part> {
    match raw.get("content") {
        Some(Value::Array(blocks)) => blocks
            .iter()
            .flat_map(|b| match b.get("type").and_then(Value::as_str) {
                Some("tool_use" | "server_tool_use") => Vec::new(),
                Some("tool_result") => parts_of(b.get("content")),
                _ => parts_of(Some(&Value::Array(vec![b.clone()]))),
            })
            .collect(),
        other => parts_of(other),
    }
}

/// Removes `tool_use` blocks calling `name` from an assistant message. Returns the calls removed.
pub(crate) fn drop_calls(raw: &mut Value, name: &str) -> Vec<ToolCall> {
    let mut removed = Vec::new();
    if let Some(Value::Array(blocks)) = raw.get_mut("content") {
        blocks.retain(|b| {
            let is_call = b.get("type").and_then(Value::as_str) == Some("tool_use")
                && b.get("name").and_then(Value::as_str) == Some(name);
            if is_call {
                removed.push(ToolCall {
                    id: b.get("id").and_then(Value::as_str).unwrap_or("").to_string(),
                    name: name.to_string(),
                    arguments: b.get("input").map(Value::to_string).unwrap_or_else(|| "{}".into()),
                });
            }
            !is_call
        });
    }
    removed
}

/// A plain message of `role` (our blocks; converted messages).
pub(crate) fn text_message(role: Role, text: &str) -> Value {
    json!({"role": role.as_str(), "content": text})
}

pub(crate) fn tool_output(call_id: &str, text: &str) -> Value {
    json!({"role": "user", "content": [{"type": "tool_result", "tool_use_id": call_id, "content": text}]})
}

/// A message of another format as a Messages message: text and tool_use blocks for an
/// assistant, a tool_result for a tool output, text (and image URLs) for a user.
pub(crate) fn convert(m: &Message, images: Vec<(String, Option<Value>)>) -> Vec<Value> {
    let text = m.content_text();
    match m.role {
        Role::Tool => vec![tool_output(m.tool_call_id.as_deref().unwrap_or(""), &text)],
        Role::Assistant => {
            let mut blocks = Vec::new();
            if !text.is_empty() {
                blocks.push(json!({"type": "text", "text": text}));
            }
            for c in &m.tool_calls {
                let input: Value = serde_json::from_str(&c.arguments).unwrap_or_else(|_| json!({}));
                let input = if input.is_object() { input } else { json!({}) };
                blocks.push(json!({"type": "tool_use", "id": c.id, "name": c.name, "input": input}));
            }
            if blocks.is_empty() {
                return Vec::new();
            }
            vec![json!({"role": "assistant", "content": blocks})]
        }
        Role::User if !images.is_empty() => {
            let mut blocks = Vec::new();
            if !text.is_empty() {
                blocks.push(json!({"type": "text", "text": text}));
            }
            for (url, _) in images {
                blocks.push(json!({"type": "image", "source": {"type": "url", "url": url}}));
            }
            vec![json!({"role": "user", "content": blocks})]
        }
        role => vec![text_message(role, &text)],
    }
}

/// Renders instructions and messages (in order): every System/Developer message (the request's
/// `system`, our blocks) goes into the `system` field, returned first (none when empty), the
/// rest into `messages`, returned second (an Anthropic message as its `raw`, moved or referred
/// to). A `system` that came as a string stays a string when everything in it is text (joined
/// by a blank line); otherwise it is a list of text blocks, the original blocks kept as they were.
pub(crate) fn render<'a>(
    all: impl Iterator<Item = Cow<'a, Message>>,
) -> (Option<Value>, Vec<super::request::Item<'a>>) {
    let mut system: Vec<Value> = Vec::new();
    let mut list = Vec::new();
    for m in all {
        let is_system = matches!(m.role, Role::System | Role::Developer);
        if is_system {
            match (&m.raw, m.format) {
                (Value::String(s), Format::AnthropicMessages) => system.push(Value::String(s.clone())),
                (Value::Array(blocks), Format::AnthropicMessages) => system.extend(blocks.iter().cloned()),
                _ => system.push(Value::String(m.content_text())),
            }
            continue;
        }
        if m.format == Format::AnthropicMessages {
            list.push(super::request::raw_of(m));
        } else if m.kind == Kind::Message {
            list.extend(
                super::request::convert(&m, Format::AnthropicMessages)
                    .into_iter()
                    .map(super::request::Item::made),
            );
        }
    }
    let system: Vec<Value> = system.into_iter().filter(|s| s.as_str() != Some("")).collect();
    let system = (!system.is_empty()).then(|| {
        if system.iter().all(Value::is_string) {
            Value::String(system.iter().filter_map(Value::as_str).collect::<Vec<_>>().join("\n\n"))
        } else {
            Value::Array(
                system
                    .into_iter()
                    .map(|s| match s {
                        Value::String(t) => json!({"type": "text", "text": t}),
                        block => block,
                    })
                    .collect(),
            )
        }
    });
    (system, list)
}

/// Whether a request with `messages` is in the Messages shape rather than Chat Completions:
/// a field only Messages has (`system`, `top_k`, `stop_sequences`, `thinking`); else not when a
/// field only Chat has is there (`max_completion_tokens`, `n`, `response_format`, …); else when
/// tools have `input_schema`; else not when a message has a role only Chat has (system,
/// developer, tool); else when a message holds tool_use/tool_result blocks. A minimal request
/// (`model`, `max_tokens`, plain `messages`) reads the same in both: Messages clients mark it
/// with a `system` field (an empty string is left out of the decorated request).
/// `raw_tools`: the request's tools when they came as bytes (its `tools` is then null).
pub(crate) fn is_messages_request(obj: &Map<String, Value>, raw_tools: Option<&recalld_protocol::Raw>) -> bool {
    const ANTHROPIC_ONLY: [&str; 4] = ["system", "top_k", "stop_sequences", "thinking"];
    const CHAT_ONLY: [&str; 9] = [
        "max_completion_tokens",
        "n",
        "response_format",
        "logprobs",
        "frequency_penalty",
        "presence_penalty",
        "seed",
        "stream_options",
        "parallel_tool_calls",
    ];
    if ANTHROPIC_ONLY.iter().any(|k| obj.contains_key(*k)) {
        return true;
    }
    if CHAT_ONLY.iter().any(|k| obj.contains_key(*k)) {
        return false;
    }
    let tools: &[Value] = obj.get("tools").and_then(Value::as_array).map_or(&[], Vec::as_slice);
    if tools.iter().any(|t| t.get("input_schema").is_some())
        || raw_tools.is_some_and(|t| t.has_item_with_key("input_schema"))
    {
        return true;
    }
    let messages: &[Value] = obj.get("messages").and_then(Value::as_array).map_or(&[], Vec::as_slice);
    // Messages knows only the user and assistant roles: a system, developer or tool message
    // is Chat's, whatever its content holds (found by fuzzing: a system message with a
    // `tool_result` block was read as Messages and rendered back as Chat).
    if messages.iter().any(|m| {
        matches!(
            m.get("role").and_then(Value::as_str),
            Some("system" | "developer" | "tool")
        )
    }) {
        return false;
    }
    let mut block_types = messages
        .iter()
        .filter_map(|m| m.get("content").and_then(Value::as_array))
        .flatten()
        .filter_map(|b| b.get("type").and_then(Value::as_str));
    block_types.any(|t| matches!(t, "tool_use" | "tool_result"))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_user_message_with_tool_results_is_a_tool_output_with_all_texts() {
        let v = json!({"role": "user", "content": [
            {"type": "tool_result", "tool_use_id": "toolu_1", "content": "42 passed"},
            {"type": "tool_result", "tool_use_id": "toolu_2", "content": [{"type": "text", "text": "ok"}]}
        ]});
        let m = parse_message(&v, "messages[2]").unwrap();
        assert_eq!(m.role, Role::Tool);
        assert_eq!(m.tool_call_id.as_deref(), Some("toolu_1"));
        assert_eq!(m.text, "42 passed\nok");
        assert_eq!(m.raw, v);
    }

    #[test]
    fn assistant_tool_use_blocks_are_calls_with_their_input_as_arguments() {
        let v = json!({"role": "assistant", "content": [
            {"type": "text", "text": "Running it."},
            {"type": "tool_use", "id": "toolu_1", "name": "shell", "input": {"command": "make"}}
        ]});
        let m = parse_message(&v, "").unwrap();
        assert_eq!(
            m.tool_calls,
            vec![ToolCall {
                id: "toolu_1".into(),
                name: "shell".into(),
                arguments: "{\"command\":\"make\"}".into()
            }]
        );
        assert_eq!(m.content_text(), "Running it.");
        let mut raw = v.clone();
        assert_eq!(drop_calls(&mut raw, "shell").len(), 1);
        assert_eq!(raw["content"].as_array().unwrap().len(), 1);
    }

    #[test]
    fn bad_shapes_are_errors_that_say_where() {
        let e = parse_message(&json!({"role": "tool", "content": "x"}), "messages[1]").unwrap_err();
        assert_eq!(e.to_string(), "messages[1].role: unknown role \"tool\"");
        let e = parse_message(
            &json!({"role": "user", "content": [{"type": "tool_result"}]}),
            "messages[0]",
        )
        .unwrap_err();
        assert_eq!(e.to_string(), "messages[0].content[0].tool_use_id: missing");
    }

    #[test]
    fn requests_are_told_apart_from_chat() {
        let o = |v: Value| v.as_object().unwrap().clone();
        let is_messages_request = |o: &Map<String, Value>| is_messages_request(o, None);
        assert!(is_messages_request(&o(json!({"system": "s", "messages": []}))));
        assert!(is_messages_request(&o(
            json!({"system": "", "max_tokens": 10, "messages": [{"role": "user", "content": "hi"}]})
        )));
        assert!(!is_messages_request(&o(
            json!({"max_tokens": 10, "messages": [{"role": "user", "content": "hi"}]})
        )));
        assert!(!is_messages_request(&o(
            json!({"messages": [{"role": "user", "content": "hi"}]})
        )));
        assert!(!is_messages_request(&o(
            json!({"max_tokens": 10, "messages": [{"role": "system", "content": "s"}]})
        )));
        assert!(!is_messages_request(&o(
            json!({"max_tokens": 9, "max_completion_tokens": 7, "messages": []})
        )));
        assert!(is_messages_request(&o(
            json!({"tools": [{"name": "t", "input_schema": {}}], "messages": []})
        )));
        // Tools that came as bytes are read for it too.
        let raw = |v: Value| Some(recalld_protocol::Raw::of(&v));
        let placeholder = o(json!({"tools": null, "messages": []}));
        assert!(super::is_messages_request(
            &placeholder,
            raw(json!([{"name": "t", "input_schema": {}}])).as_ref()
        ));
        assert!(!super::is_messages_request(
            &placeholder,
            raw(json!([{"type": "function"}])).as_ref()
        ));
    }
}
