//! Replies: `chat.completion` and Responses `response` objects, and taking tool calls out.

use serde::{Deserialize, Serialize};
use serde_json::{json, Value};

use super::{chat, messages, responses, wrong, Format, FormatError, Kind, Message, ToolCall};

/// The provider's token counts for one call.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct Usage {
    /// Chat `usage.prompt_tokens`; Responses `usage.input_tokens`.
    pub prompt_tokens: u64,
    /// Chat `usage.completion_tokens`; Responses `usage.output_tokens` (0 when absent).
    pub completion_tokens: u64,
}

/// A provider reply taken apart.
#[derive(Debug, Clone, PartialEq)]
pub struct ParsedResponse {
    pub format: Format,
    /// Chat: the message of `choices[0]` (none when `choices` is empty); Responses: every
    /// `output` item, one message each.
    pub messages: Vec<Message>,
    pub usage: Option<Usage>,
    pub model: Option<String>,
}

impl ParsedResponse {
    /// Whether the reply holds anything for the client: a message with text or a tool call
    /// (opaque items such as reasoning do not count).
    pub fn has_content(&self) -> bool {
        self.messages.iter().any(|m| {
            m.kind == Kind::Message
                && (!m.text.is_empty()
                    || !m.tool_calls.is_empty()
                    || matches!(m.raw.get("content"), Some(Value::Array(a)) if !a.is_empty()))
        })
    }
}

enum Shape {
    Chat,
    Responses,
    Messages,
}

fn shape(v: &Value) -> Result<Shape, FormatError> {
    let obj = v.as_object().ok_or_else(|| wrong("response", "an object", v))?;
    match obj.get("object").and_then(Value::as_str) {
        Some("chat.completion") => Ok(Shape::Chat),
        Some("response") => Ok(Shape::Responses),
        Some(other @ ("chat.completion.chunk" | "response.completed" | "response.output_item.done")) => {
            Err(FormatError::Invalid {
                at: "response.object".into(),
                message: format!("{other:?} is a stream event: report the assembled reply"),
            })
        }
        _ if obj.get("type").and_then(Value::as_str) == Some("message") && obj.contains_key("content") => {
            Ok(Shape::Messages)
        }
        _ if matches!(
            obj.get("type").and_then(Value::as_str),
            Some("message_start" | "content_block_delta")
        ) =>
        {
            Err(FormatError::Invalid {
                at: "response.type".into(),
                message: "a stream event: report the assembled message".into(),
            })
        }
        _ if obj.contains_key("choices") => Ok(Shape::Chat),
        _ if obj.contains_key("output") => Ok(Shape::Responses),
        _ => Err(FormatError::Invalid {
            at: "response".into(),
            message: "neither a chat.completion (choices) nor a response (output)".into(),
        }),
    }
}

/// Reads a reply: a `chat.completion` (its `choices[0].message`), a Responses `response`
/// (its `output` items) or an Anthropic `message` (one assistant message of its `content`).
pub fn parse_response(v: &Value) -> Result<ParsedResponse, FormatError> {
    let model = v.get("model").and_then(Value::as_str).map(str::to_string);
    let usage_of = |a: &str, b: &str| {
        let u = v.get("usage")?;
        Some(Usage {
            prompt_tokens: u.get(a)?.as_u64()?,
            completion_tokens: u.get(b).and_then(Value::as_u64).unwrap_or(0),
        })
    };
    match shape(v)? {
        Shape::Chat => {
            let messages = match v.get("choices") {
                None | Some(Value::Null) => Vec::new(),
                Some(Value::Array(choices)) => match choices.first() {
                    None => Vec::new(),
                    Some(c) => match c.get("message") {
                        None | Some(Value::Null) => {
                            if !c.is_object() {
                                return Err(wrong("choices[0]", "an object", c));
                            }
                            Vec::new()
                        }
                        Some(m) => vec![chat::parse_message(m, "choices[0].message")?],
                    },
                },
                Some(other) => return Err(wrong("choices", "an array", other)),
            };
            Ok(ParsedResponse {
                format: Format::ChatCompletions,
                messages,
                usage: usage_of("prompt_tokens", "completion_tokens"),
                model,
            })
        }
        Shape::Messages => {
            let msg = json!({"role": "assistant", "content": v.get("content").cloned().unwrap_or(Value::Null)});
            // Anthropic counts cached input apart from `input_tokens`: the prompt is their sum.
            let usage = v.get("usage").and_then(|u| {
                let n = |k: &str| u.get(k).and_then(Value::as_u64).unwrap_or(0);
                Some(Usage {
                    prompt_tokens: u.get("input_tokens")?.as_u64()?
                        + n("cache_creation_input_tokens")
                        + n("cache_read_input_tokens"),
                    completion_tokens: n("output_tokens"),
                })
            });
            Ok(ParsedResponse {
                format: Format::AnthropicMessages,
                messages: vec![messages::parse_message(&msg, "content")?],
                usage,
                model,
            })
        }
        Shape::Responses => {
            let mut messages = Vec::new();
            match v.get("output") {
                None | Some(Value::Null) => {}
                Some(Value::Array(items)) => {
                    for (i, it) in items.iter().enumerate() {
                        messages.push(responses::parse_item(it, &format!("output[{i}]"))?);
                    }
                }
                Some(other) => return Err(wrong("output", "an array", other)),
            }
            Ok(ParsedResponse {
                format: Format::Responses,
                messages,
                usage: usage_of("input_tokens", "output_tokens"),
                model,
            })
        }
    }
}

/// The reply without its calls to the function `name`, and the calls removed (in order).
///
/// Chat: from `choices[0].message.tool_calls` (other choices are left as they are); the key is
/// dropped when empty, and `finish_reason` becomes `"stop"` when no call remains and the message
/// has content. Responses: the `function_call` output items calling `name` are dropped.
/// Anything unreadable is returned unchanged with no calls.
pub fn remove_tool_calls(v: &Value, name: &str) -> (Value, Vec<ToolCall>) {
    let mut out = v.clone();
    let mut removed = Vec::new();
    match shape(v) {
        Ok(Shape::Chat) => {
            if let Some(choice) = out.get_mut("choices").and_then(|c| c.get_mut(0)) {
                if let Some(msg) = choice.get_mut("message") {
                    removed = chat::drop_calls(msg, name);
                    let no_calls = msg.get("tool_calls").is_none();
                    let has_content = match msg.get("content") {
                        Some(Value::String(s)) => !s.is_empty(),
                        Some(Value::Array(a)) => !a.is_empty(),
                        _ => false,
                    };
                    if !removed.is_empty() && no_calls && has_content {
                        if let Some(obj) = choice.as_object_mut() {
                            if obj.contains_key("finish_reason") {
                                obj.insert("finish_reason".into(), Value::String("stop".into()));
                            }
                        }
                    }
                }
            }
        }
        Ok(Shape::Messages) => {
            removed = messages::drop_calls(&mut out, name);
            let calls_left = out["content"].as_array().is_some_and(|bs| {
                bs.iter()
                    .any(|b| b.get("type").and_then(Value::as_str) == Some("tool_use"))
            });
            if !removed.is_empty() && !calls_left && out.get("stop_reason").and_then(Value::as_str) == Some("tool_use")
            {
                out["stop_reason"] = json!("end_turn");
            }
        }
        Ok(Shape::Responses) => {
            if let Some(Value::Array(items)) = out.get_mut("output") {
                items.retain(|it| {
                    if it.get("type").and_then(Value::as_str) != Some("function_call") {
                        return true;
                    }
                    match responses::parse_item(it, "") {
                        Ok(m) if m.tool_calls.first().is_some_and(|c| c.name == name) => {
                            removed.extend(m.tool_calls);
                            false
                        }
                        _ => true,
                    }
                });
            }
        }
        Err(_) => {}
    }
    (out, removed)
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn a_messages_reply_counts_cached_input_as_input() {
        let reply = |usage: Value| {
            json!({"id": "msg_1", "type": "message", "role": "assistant", "model": "claude-x",
                "content": [{"type": "text", "text": "Done."}], "stop_reason": "end_turn", "usage": usage})
        };
        let cached = parse_response(&reply(json!({"input_tokens": 12, "cache_creation_input_tokens": 300,
            "cache_read_input_tokens": 4000, "output_tokens": 7})))
        .unwrap();
        assert_eq!(cached.format, Format::AnthropicMessages);
        let usage = cached.usage.unwrap();
        assert_eq!(
            (usage.prompt_tokens, usage.completion_tokens),
            (4312, 7),
            "every input token the model read"
        );
        let plain = parse_response(&reply(json!({"input_tokens": 12, "output_tokens": 7}))).unwrap();
        assert_eq!(plain.usage.unwrap().prompt_tokens, 12);
        let none = parse_response(&reply(json!({"output_tokens": 7}))).unwrap();
        assert!(none.usage.is_none(), "no input count: no usage to learn the ratio from");
    }
}
