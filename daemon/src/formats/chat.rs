//! Chat Completions messages: `{role, content, tool_calls?, tool_call_id?}`.

use serde_json::Value;

use super::{
    arguments_text, at_or, join_text, parts_of, path, role_of, text_of, wrong, Format, FormatError, Kind, Message,
    Part, Role, ToolCall,
};

/// Reads one Chat Completions message; `at` names it in errors (`messages[3]`).
pub(crate) fn parse_message(v: &Value, at: &str) -> Result<Message, FormatError> {
    read(v, at).map(|m| Message { raw: v.clone(), ..m })
}

/// [`parse_message`] of a value the caller gives up: it becomes the message's `raw` without a
/// copy (a request's messages are most of its bytes).
pub(crate) fn parse_owned(v: Value, at: &str) -> Result<Message, FormatError> {
    let m = read(&v, at)?;
    Ok(Message { raw: v, ..m })
}

/// The message's fields, its `raw` left null for the callers above to fill.
fn read(v: &Value, at: &str) -> Result<Message, FormatError> {
    let m = v
        .as_object()
        .ok_or_else(|| wrong(at_or(at, "message"), "an object", v))?;
    let role = role_of(m.get("role"), &path(at, "role"), true)?;
    let content = m.get("content");
    match content {
        None | Some(Value::Null | Value::String(_) | Value::Array(_)) => {}
        Some(other) => {
            return Err(wrong(path(at, "content"), "a string, an array or null", other));
        }
    }
    let mut text = text_of(content);
    if let Some(Value::String(r)) = m.get("refusal") {
        if !r.is_empty() {
            if !text.is_empty() {
                text.push('\n');
            }
            text.push_str(r);
        }
    }
    let tool_calls = if role == Role::Assistant {
        calls_of(m, at)?
    } else {
        Vec::new()
    };
    let tool_call_id = if role == Role::Tool {
        match m.get("tool_call_id") {
            None | Some(Value::Null) => None,
            Some(Value::String(s)) => Some(s.clone()),
            Some(other) => return Err(wrong(path(at, "tool_call_id"), "a string", other)),
        }
    } else {
        None
    };
    Ok(Message {
        role,
        kind: Kind::Message,
        text: join_text(text, &tool_calls),
        tool_calls,
        tool_call_id,
        raw: Value::Null,
        format: Format::ChatCompletions,
        wire: Default::default(),
    })
}

/// `tool_calls` (and a legacy `function_call`, read as a call with an empty id).
fn calls_of(m: &serde_json::Map<String, Value>, at: &str) -> Result<Vec<ToolCall>, FormatError> {
    let mut calls = Vec::new();
    match m.get("tool_calls") {
        None | Some(Value::Null) => {}
        Some(Value::Array(items)) => {
            for (i, c) in items.iter().enumerate() {
                let cat = format!("{}[{i}]", path(at, "tool_calls"));
                calls.push(call_of(c, &cat)?);
            }
        }
        Some(other) => return Err(wrong(path(at, "tool_calls"), "an array or null", other)),
    }
    if let Some(f) = m.get("function_call").filter(|f| !f.is_null()) {
        let fat = path(at, "function_call");
        let f = f.as_object().ok_or_else(|| wrong(&fat, "an object", f))?;
        calls.push(ToolCall {
            id: String::new(),
            name: string_field(f, "name", &fat)?,
            arguments: arguments_text(f.get("arguments")),
        });
    }
    Ok(calls)
}

fn call_of(c: &Value, at: &str) -> Result<ToolCall, FormatError> {
    let c = c.as_object().ok_or_else(|| wrong(at, "an object", c))?;
    let id = match c.get("id") {
        None | Some(Value::Null) => String::new(),
        Some(Value::String(s)) => s.clone(),
        Some(other) => return Err(wrong(path(at, "id"), "a string", other)),
    };
    // `{type:"function", function:{name, arguments}}`, or a custom tool `{custom:{name, input}}`.
    let (key, args_key) = if c.contains_key("function") || !c.contains_key("custom") {
        ("function", "arguments")
    } else {
        ("custom", "input")
    };
    let fat = path(at, key);
    let f = match c.get(key) {
        None => return Err(FormatError::Missing { at: fat }),
        Some(Value::Object(f)) => f,
        Some(other) => return Err(wrong(fat, "an object", other)),
    };
    Ok(ToolCall {
        id,
        name: string_field(f, "name", &fat)?,
        arguments: arguments_text(f.get(args_key)),
    })
}

fn string_field(m: &serde_json::Map<String, Value>, key: &str, at: &str) -> Result<String, FormatError> {
    match m.get(key) {
        None => Err(FormatError::Missing { at: path(at, key) }),
        Some(Value::String(s)) => Ok(s.clone()),
        Some(other) => Err(wrong(path(at, key), "a string", other)),
    }
}

/// Text of the content and refusal only.
pub(crate) fn content_text(raw: &Value) -> String {
    let mut parts = vec![text_of(raw.get("content"))];
    if let Some(Value::String(r)) = raw.get("refusal") {
        parts.push(r.clone());
    }
    parts.retain(|p| !p.is_empty());
    parts.join("\n")
}

pub(crate) fn content_parts(raw: &Value) -> Vec<Part> {
    let mut parts = parts_of(raw.get("content"));
    if let Some(Value::String(r)) = raw.get("refusal") {
        parts.push(Part::Refusal(r.clone()));
    }
    parts
}

/// Removes calls to `name` from a Chat assistant message; drops `tool_calls` when empty.
/// Returns the calls removed (only well-formed ones are recognised).
pub(crate) fn drop_calls(raw: &mut Value, name: &str) -> Vec<ToolCall> {
    let mut removed = Vec::new();
    let Some(m) = raw.as_object_mut() else {
        return removed;
    };
    if let Some(Value::Array(items)) = m.get_mut("tool_calls") {
        items.retain(|c| match call_of(c, "") {
            Ok(call) if call.name == name => {
                removed.push(call);
                false
            }
            _ => true,
        });
        if items.is_empty() {
            m.remove("tool_calls");
        }
    }
    removed
}
