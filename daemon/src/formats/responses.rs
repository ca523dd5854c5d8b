//! Responses items: messages (with or without `type`), `function_call`, `function_call_output`,
//! and every other item carried opaque.

use serde_json::Value;

use super::{
    arguments_text, at_or, join_text, parts_of, path, role_of, text_of, wrong, Format, FormatError, Kind, Message,
    Part, Role, ToolCall,
};

/// Reads one Responses item (an object); `at` names it in errors (`input[3]`).
pub(crate) fn parse_item(v: &Value, at: &str) -> Result<Message, FormatError> {
    let m = v.as_object().ok_or_else(|| wrong(at_or(at, "item"), "an object", v))?;
    let ty = match m.get("type") {
        None | Some(Value::Null) => None,
        Some(Value::String(t)) => Some(t.as_str()),
        Some(other) => return Err(wrong(path(at, "type"), "a string", other)),
    };
    let message = |role: Role, kind: Kind, text: String, tool_calls: Vec<ToolCall>, id: Option<String>| Message {
        role,
        kind,
        text: join_text(text, &tool_calls),
        tool_calls,
        tool_call_id: id,
        raw: v.clone(),
        format: Format::Responses,
        wire: Default::default(),
    };
    match ty {
        None | Some("message") => {
            if ty.is_none() && !m.contains_key("role") {
                return Err(FormatError::Invalid {
                    at: at_or(at, "item"),
                    message: "item has neither type nor role".into(),
                });
            }
            let role = role_of(m.get("role"), &path(at, "role"), false)?;
            if role == Role::Tool {
                return Err(FormatError::UnknownRole {
                    at: path(at, "role"),
                    role: "tool".into(),
                });
            }
            let content = m.get("content");
            match content {
                None | Some(Value::Null | Value::String(_) | Value::Array(_)) => {}
                Some(other) => {
                    return Err(wrong(path(at, "content"), "a string, an array or null", other));
                }
            }
            Ok(message(role, Kind::Message, text_of(content), Vec::new(), None))
        }
        Some("function_call") => {
            let call = ToolCall {
                id: str_field(m, "call_id", at)?,
                name: str_field(m, "name", at)?,
                arguments: arguments_text(m.get("arguments")),
            };
            Ok(message(Role::Assistant, Kind::Message, String::new(), vec![call], None))
        }
        Some("function_call_output") => {
            let id = str_field(m, "call_id", at)?;
            let output = m.get("output");
            match output {
                None | Some(Value::Null | Value::String(_) | Value::Array(_)) => {}
                Some(other) => {
                    return Err(wrong(path(at, "output"), "a string, an array or null", other));
                }
            }
            Ok(message(
                Role::Tool,
                Kind::Message,
                text_of(output),
                Vec::new(),
                Some(id),
            ))
        }
        Some(t) => {
            // Carried as it came. Calls and outputs of other tools keep their pairing: a
            // `*_output` item answers its `call_id`; any other item with a `call_id` is a call.
            let text = opaque_text(v);
            let call_id = m.get("call_id").and_then(Value::as_str).map(str::to_string);
            let role = match m.get("role") {
                Some(r) => role_of(Some(r), &path(at, "role"), false).unwrap_or(Role::Assistant),
                None if t.ends_with("_output") => Role::Tool,
                None => Role::Assistant,
            };
            match call_id {
                Some(id) if t.ends_with("_output") => Ok(message(Role::Tool, Kind::Opaque, text, Vec::new(), Some(id))),
                Some(id) => {
                    let name = m.get("name").and_then(Value::as_str).unwrap_or(t).to_string();
                    let arguments = arguments_text(
                        m.get("arguments")
                            .or_else(|| m.get("input"))
                            .or_else(|| m.get("action")),
                    );
                    let call = ToolCall { id, name, arguments };
                    Ok(message(role, Kind::Opaque, text, vec![call], None))
                }
                None => Ok(message(role, Kind::Opaque, text, Vec::new(), None)),
            }
        }
    }
}

fn str_field(m: &serde_json::Map<String, Value>, key: &str, at: &str) -> Result<String, FormatError> {
    match m.get(key) {
        None => Err(FormatError::Missing { at: path(at, key) }),
        Some(Value::String(s)) => Ok(s.clone()),
        Some(other) => Err(wrong(path(at, key), "a string", other)),
    }
}

/// Readable text of an opaque item: every string under a `text`, `refusal` or `query` key.
fn opaque_text(v: &Value) -> String {
    fn walk(v: &Value, out: &mut Vec<String>, depth: usize) {
        if depth > 64 {
            return;
        }
        match v {
            Value::Object(m) => {
                for (k, x) in m {
                    match (k.as_str(), x) {
                        ("text" | "refusal" | "query", Value::String(s)) if !s.is_empty() => out.push(s.clone()),
                        _ => walk(x, out, depth + 1),
                    }
                }
            }
            Value::Array(a) => a.iter().for_each(|x| walk(x, out, depth + 1)),
            _ => {}
        }
    }
    let mut out = Vec::new();
    walk(v, &mut out, 0);
    out.join("\n")
}

/// Text of a message's content or a tool output only.
/// The `input` string form: one user message whose `raw` stays the string.
pub(crate) fn string_input(s: &str) -> Message {
    Message {
        role: Role::User,
        kind: Kind::Message,
        text: s.to_string(),
        tool_calls: Vec::new(),
        tool_call_id: None,
        raw: Value::String(s.to_string()),
        format: Format::Responses,
        wire: Default::default(),
    }
}

pub(crate) fn content_text(raw: &Value) -> String {
    match raw {
        Value::String(s) => s.clone(),
        _ => match raw.get("type").and_then(Value::as_str) {
            Some("function_call") => String::new(),
            Some("function_call_output") => text_of(raw.get("output")),
            None | Some("message") => text_of(raw.get("content")),
            Some(_) => String::new(),
        },
    }
}

pub(crate) fn content_parts(raw: &Value) -> Vec<Part> {
    match raw {
        Value::String(s) => vec![Part::Text(s.clone())],
        _ => match raw.get("type").and_then(Value::as_str) {
            Some("function_call") => Vec::new(),
            Some("function_call_output") => parts_of(raw.get("output")),
            _ => parts_of(raw.get("content")),
        },
    }
}
