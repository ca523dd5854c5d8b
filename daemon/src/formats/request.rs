//! Requests: provider JSON to instructions + history + pass-through fields, and back.

use recalld_protocol::Raw;
use serde_json::{json, Map, Value};
use std::borrow::{Borrow, Cow};

use super::{chat, messages, responses, wrong, Format, FormatError, Kind, Message, Role, Wire};

/// A provider request taken apart.
#[derive(Debug, Clone, PartialEq)]
pub struct ParsedRequest {
    pub format: Format,
    /// Chat: the leading system/developer messages. Responses: the `instructions` field as one
    /// Developer message whose `raw` is the JSON string (so it renders back into the field),
    /// then the leading system/developer items of `input`.
    pub instructions: Vec<Message>,
    /// Everything else in order, the last user message included.
    pub history: Vec<Message>,
    /// The role our blocks take: the last instruction's role in Chat (System when there are
    /// none); always Developer for Responses.
    pub instructions_role: Role,
    /// Responses: `Some("previous_response_id")` or `Some("conversation")` when history lives on
    /// the provider's side and cannot be trimmed here.
    pub provider_history: Option<String>,
    /// Chat `max_completion_tokens` (else `max_tokens`); Responses `max_output_tokens`. A copy:
    /// the field itself stays in `rest`.
    pub max_output_tokens: Option<u64>,
    /// A copy of `model`, which stays in `rest`.
    pub model: Option<String>,
    /// Every field but `messages` (Chat) or `input` and `instructions` (Responses), unchanged
    /// and in order (a null or empty `input` and a null `instructions` stay here; rendered
    /// message fields take precedence over them).
    pub rest: Map<String, Value>,
    /// The `tools` field as its bytes, passed through unread (`rest` holds a null in its place,
    /// see [`parse_request_with`]).
    pub tools: Option<Raw>,
}

/// Reads a request. `messages` → Chat Completions; else `input` (string or list) or
/// `instructions` → Responses; neither → error. A Responses `input` string is one user message.
/// The request is taken, not copied: its Chat messages become the messages' `raw`.
pub fn parse_request(v: Value) -> Result<ParsedRequest, FormatError> {
    parse_request_with(v, None, Vec::new())
}

/// [`parse_request`] of a request as the server decodes it: `tools`, its tools as bytes when
/// the request holds a null in their place (read only to tell the format, and rendered back as
/// they came); `wires`, the bytes of each message of its list (`messages`, or `input` when a
/// list), which the messages keep ([`Message::wire`]) when there is one for each.
pub fn parse_request_with(
    v: Value,
    tools: Option<Raw>,
    wires: Vec<Option<bytes::Bytes>>,
) -> Result<ParsedRequest, FormatError> {
    let obj = match v {
        Value::Object(obj) => obj,
        other => return Err(wrong("request", "an object", &other)),
    };
    let tools = tools.filter(|_| obj.get("tools").is_some_and(Value::is_null));
    let mut parsed = parse_object(obj, tools.as_ref(), wires)?;
    parsed.tools = tools;
    Ok(parsed)
}

/// Each message's wire bytes, when `wires` has them for a list of `len`; none otherwise.
fn wires_for(wires: Vec<Option<bytes::Bytes>>, len: usize) -> impl Iterator<Item = Wire> {
    let wires = if wires.len() == len { wires } else { Vec::new() };
    wires.into_iter().map(Wire).chain(std::iter::repeat_with(Wire::default))
}

fn parse_object(
    mut obj: Map<String, Value>,
    raw_tools: Option<&Raw>,
    wires: Vec<Option<bytes::Bytes>>,
) -> Result<ParsedRequest, FormatError> {
    let model = obj.get("model").and_then(Value::as_str).map(str::to_string);
    if obj.contains_key("messages") && messages::is_messages_request(&obj, raw_tools) {
        return parse_messages_request(&obj, model, wires);
    }
    // `shift_remove` keeps the other fields in their order (they render back as they came).
    if let Some(items) = obj.shift_remove("messages") {
        let items = match items {
            Value::Array(a) => a,
            other => return Err(wrong("messages", "an array", &other)),
        };
        let mut all = Vec::with_capacity(items.len());
        let mut wires = wires_for(wires, items.len());
        for (i, m) in items.into_iter().enumerate() {
            let mut message = chat::parse_owned(m, &format!("messages[{i}]"))?;
            message.wire = wires.next().unwrap_or_default();
            all.push(message);
        }
        let lead = leading_instructions(&all);
        let history = all.split_off(lead);
        let instructions_role = all.last().map(|m| m.role).unwrap_or(Role::System);
        let max_output_tokens = obj
            .get("max_completion_tokens")
            .and_then(Value::as_u64)
            .or_else(|| obj.get("max_tokens").and_then(Value::as_u64));
        return Ok(ParsedRequest {
            format: Format::ChatCompletions,
            instructions: all,
            history,
            instructions_role,
            provider_history: None,
            max_output_tokens,
            model,
            rest: obj,
            tools: None,
        });
    }
    if !obj.contains_key("input") && !obj.contains_key("instructions") {
        return Err(FormatError::Invalid {
            at: "request".into(),
            message: "has neither messages (chat completions) nor input or instructions (responses)".into(),
        });
    }
    let mut instructions = Vec::new();
    match obj.get("instructions") {
        None | Some(Value::Null) => {}
        Some(s @ Value::String(text)) => instructions.push(Message {
            role: Role::Developer,
            kind: Kind::Message,
            text: text.clone(),
            tool_calls: Vec::new(),
            tool_call_id: None,
            raw: s.clone(),
            format: Format::Responses,
            wire: Wire::default(),
        }),
        Some(other) => return Err(wrong("instructions", "a string or null", other)),
    }
    let mut items = Vec::new();
    match obj.get("input") {
        None | Some(Value::Null) => {}
        Some(Value::String(s)) => items.push(responses::string_input(s)),
        Some(Value::Array(a)) => {
            let mut wires = wires_for(wires, a.len());
            for (i, it) in a.iter().enumerate() {
                let mut item = responses::parse_item(it, &format!("input[{i}]"))?;
                item.wire = wires.next().unwrap_or_default();
                items.push(item);
            }
        }
        Some(other) => return Err(wrong("input", "a string, an array or null", other)),
    }
    let lead = if items.len() == 1 && items[0].raw.is_string() {
        0
    } else {
        leading_instructions(&items)
    };
    let history = items.split_off(lead);
    instructions.extend(items);
    let provider_history = ["previous_response_id", "conversation"]
        .into_iter()
        .find(|k| obj.get(*k).is_some_and(|x| !x.is_null()))
        .map(str::to_string);
    Ok(ParsedRequest {
        format: Format::Responses,
        instructions,
        history,
        instructions_role: Role::Developer,
        provider_history,
        max_output_tokens: obj.get("max_output_tokens").and_then(Value::as_u64),
        model,
        // A null or empty `input` and a null `instructions` stay in `rest`, so they render back.
        rest: without(
            &obj,
            &["input", "instructions"]
                .into_iter()
                .filter(|k| match obj.get(*k) {
                    Some(Value::Null) => false,
                    Some(Value::Array(a)) => !a.is_empty(),
                    _ => true,
                })
                .collect::<Vec<_>>(),
        ),
        tools: None,
    })
}

/// An Anthropic Messages request: `system` is the one instruction, every message is history.
fn parse_messages_request(
    obj: &Map<String, Value>,
    model: Option<String>,
    wires: Vec<Option<bytes::Bytes>>,
) -> Result<ParsedRequest, FormatError> {
    let items = match &obj["messages"] {
        Value::Array(a) => a,
        other => return Err(wrong("messages", "an array", other)),
    };
    let mut history = Vec::with_capacity(items.len());
    let mut wires = wires_for(wires, items.len());
    for (i, m) in items.iter().enumerate() {
        let mut message = messages::parse_message(m, &format!("messages[{i}]"))?;
        message.wire = wires.next().unwrap_or_default();
        history.push(message);
    }
    let instructions = match obj.get("system") {
        None | Some(Value::Null) => Vec::new(),
        Some(v) => vec![messages::system_instruction(v)?],
    };
    Ok(ParsedRequest {
        format: Format::AnthropicMessages,
        instructions,
        history,
        instructions_role: Role::System,
        provider_history: None,
        max_output_tokens: obj.get("max_tokens").and_then(Value::as_u64),
        model,
        rest: without(obj, &["messages", "system"]),
        tools: None,
    })
}

fn leading_instructions(all: &[Message]) -> usize {
    all.iter()
        .take_while(|m| m.kind == Kind::Message && matches!(m.role, Role::System | Role::Developer))
        .count()
}

fn without(obj: &Map<String, Value>, keys: &[&str]) -> Map<String, Value> {
    obj.iter()
        .filter(|(k, _)| !keys.contains(&k.as_str()))
        .map(|(k, v)| (k.clone(), v.clone()))
        .collect()
}

/// Builds the provider request: `instructions` then `messages` in order, in `format`, then the
/// fields of `rest` in order, with `extra_tools` appended to `tools` (created when absent; a
/// tool whose name is already there is not added twice).
///
/// Messages already in `format` render as their `raw`, unchanged. Others are converted from
/// their role, content text (and user images) and tool calls; opaque items of another format
/// are left out. Responses: an instruction whose `raw` is a JSON string goes to the
/// `instructions` field (several are joined by a blank line), other instructions lead `input`;
/// an `input` of exactly one string-raw user message is rendered as the string, and `input` is
/// left out when there is nothing to send. Chat: consecutive converted function calls merge into
/// one assistant message.
///
/// Key order: the message fields first (`messages`; or `instructions`, `input`), then `rest`.
/// Unchanged input renders equal to itself (serde_json maps compare regardless of key order).
pub fn render_request<M: Borrow<Message>>(
    format: Format,
    instructions: &[Message],
    messages: &[M],
    rest: &Map<String, Value>,
    extra_tools: &[Value],
) -> Value {
    let messages = messages.iter().map(|m| Cow::Borrowed(m.borrow())).collect();
    render_request_moving(format, instructions.to_vec(), messages, rest.clone(), None, extra_tools).into_value()
}

/// [`render_request`] for messages that may be owned or borrowed, rendered as a [`Rendered`]:
/// an owned message already in `format` gives up its `raw`, a borrowed one is referred to, not
/// copied (assembly renders the stored messages in view, and the reply is encoded from them
/// while the memory's state is held), and the instructions and `rest` move in (assembly moves
/// in what the request itself sent: a system prompt and tool definitions can be most of it).
/// `tools` are the request's tools as bytes (`rest` holding a null in their place), written
/// back as they came unless `extra_tools` join them.
pub fn render_request_moving<'a>(
    format: Format,
    instructions: Vec<Message>,
    messages: Vec<Cow<'a, Message>>,
    rest: Map<String, Value>,
    mut tools: Option<Raw>,
    extra_tools: &[Value],
) -> Rendered<'a> {
    let mut out = Map::new();
    let mut list = None;
    match format {
        Format::ChatCompletions => {
            let all = instructions.into_iter().map(Cow::Owned).chain(messages);
            list = Some(("messages", render_chat(all)));
        }
        Format::AnthropicMessages => {
            let all = instructions.into_iter().map(Cow::Owned).chain(messages);
            let (system, messages) = messages::render(all);
            if let Some(system) = system {
                out.insert("system".into(), system);
            }
            list = Some(("messages", messages));
        }
        Format::Responses => {
            let mut fields = Vec::new();
            let mut input: Vec<Cow<'_, Message>> = Vec::new();
            for m in instructions {
                match m.raw {
                    Value::String(s) if m.format == Format::Responses => fields.push(s),
                    _ => input.push(Cow::Owned(m)),
                }
            }
            input.extend(messages);
            if !fields.is_empty() {
                out.insert("instructions".into(), Value::String(fields.join("\n\n")));
            }
            if let [only] = input.as_slice() {
                if only.format == Format::Responses && only.raw.is_string() && only.role == Role::User {
                    out.insert("input".into(), only.raw.clone());
                }
            }
            if !input.is_empty() && !out.contains_key("input") {
                let items: Vec<Item<'a>> = input
                    .into_iter()
                    .flat_map(|m| match (&m.raw, m.format) {
                        (Value::String(s), Format::Responses) => {
                            vec![Item::made(json!({"role": m.role.as_str(), "content": s}))]
                        }
                        (_, Format::Responses) => vec![raw_of(m)],
                        _ => convert(&m, Format::Responses).into_iter().map(Item::made).collect(),
                    })
                    .collect();
                list = Some(("input", items));
            }
        }
    }
    if let Some((key, _)) = &list {
        // Its place in the key order; the list itself is written there when encoded.
        out.insert((*key).into(), Value::Null);
    }
    for (k, v) in rest {
        if !out.contains_key(&k) {
            out.insert(k, v);
        }
    }
    if !out.get("tools").is_some_and(Value::is_null) {
        tools = None;
    }
    if !extra_tools.is_empty() {
        if let Some(raw) = tools.take() {
            out.insert("tools".into(), raw.to_value());
        }
        let tools = out.entry("tools").or_insert_with(|| Value::Array(Vec::new()));
        if !tools.is_array() {
            *tools = Value::Array(Vec::new());
        }
        if let Value::Array(list) = tools {
            for t in extra_tools {
                let name = tool_name(t);
                if name.is_none() || !list.iter().any(|x| tool_name(x) == name) {
                    list.push(t.clone());
                }
            }
        }
    }
    Rendered {
        fields: out,
        list,
        tools,
    }
}

/// A provider request as [`render_request_moving`] builds it: a JSON object whose message list
/// may borrow stored messages. It serialises as that object (decorate's reply is encoded from
/// it without copying the history in view first) or becomes one (`into_value`).
#[derive(Debug)]
pub struct Rendered<'a> {
    /// The request's fields in order; the one the list is named by holds a null in its place.
    fields: Map<String, Value>,
    /// The messages (`messages`) or items (`input`).
    list: Option<(&'static str, Vec<Item<'a>>)>,
    /// The request's `tools` as they came, in the place of the null `fields` holds for them.
    tools: Option<Raw>,
}

/// One field's value as [`Rendered`] writes it.
enum Field<'r> {
    List(&'r [Item<'r>]),
    Raw(&'r Raw),
    Value(&'r Value),
}

impl<'a> Rendered<'a> {
    /// The request as a JSON value (the messages in view copied).
    pub fn into_value(self) -> Value {
        let Rendered {
            mut fields,
            list,
            tools,
        } = self;
        if let Some((key, items)) = list {
            if let Some(slot) = fields.get_mut(key) {
                *slot = Value::Array(items.into_iter().map(|it| it.value.into_owned()).collect());
            }
        }
        if let (Some(raw), Some(slot)) = (tools, fields.get_mut("tools")) {
            *slot = raw.to_value();
        }
        Value::Object(fields)
    }

    fn each(&self) -> impl Iterator<Item = (&str, Field<'_>)> {
        self.fields.iter().map(|(k, v)| {
            let field = match (&self.list, &self.tools) {
                (Some((key, items)), _) if key == k => Field::List(items),
                (_, Some(raw)) if k == "tools" => Field::Raw(raw),
                _ => Field::Value(v),
            };
            (k.as_str(), field)
        })
    }

    /// The request as MessagePack, the bytes its `Serialize` writes with named maps but for the
    /// tools, written as they came.
    pub fn to_msgpack(&self) -> Vec<u8> {
        let mut out = Vec::new();
        rmp::encode::write_map_len(&mut out, self.fields.len() as u32).expect("writing to a Vec");
        for (k, field) in self.each() {
            rmp::encode::write_str(&mut out, k).expect("writing to a Vec");
            match field {
                Field::List(items) => write_items(&mut out, items),
                Field::Value(v) => rmp_serde::encode::write_named(&mut out, v),
                Field::Raw(raw) => {
                    out.extend_from_slice(raw.bytes());
                    Ok(())
                }
            }
            .expect("a JSON value always encodes");
        }
        out
    }
}

/// A list of messages or items: each as the bytes it came as, or encoded.
fn write_items(out: &mut Vec<u8>, items: &[Item<'_>]) -> Result<(), rmp_serde::encode::Error> {
    rmp::encode::write_array_len(out, items.len() as u32)?;
    for it in items {
        match &it.wire {
            Some(bytes) => {
                debug_assert_eq!(
                    rmp_serde::from_slice::<Value>(bytes).ok().as_ref(),
                    Some(it.value.as_ref()),
                    "a message's bytes are its value"
                );
                out.extend_from_slice(bytes);
            }
            None => rmp_serde::encode::write_named(out, &it.value)?,
        }
    }
    Ok(())
}

impl serde::Serialize for Rendered<'_> {
    fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        use serde::ser::SerializeMap;
        let mut map = s.serialize_map(Some(self.fields.len()))?;
        for (k, field) in self.each() {
            match field {
                Field::List(items) => map.serialize_entry(k, items)?,
                Field::Raw(raw) => map.serialize_entry(k, &raw.to_value())?,
                Field::Value(v) => map.serialize_entry(k, v)?,
            }
        }
        map.end()
    }
}

/// One message or item of a rendered request: its value, and the bytes it came as while it is
/// unchanged (see [`Wire`]).
#[derive(Debug)]
pub(super) struct Item<'a> {
    value: Cow<'a, Value>,
    wire: Option<bytes::Bytes>,
}

impl<'a> Item<'a> {
    /// A message or item made here (converted, joined): no bytes of its own.
    pub(super) fn made(value: Value) -> Item<'a> {
        Item {
            value: Cow::Owned(value),
            wire: None,
        }
    }

    /// The value to change: its bytes no longer stand for it.
    fn value_mut(&mut self) -> &mut Value {
        self.wire = None;
        self.value.to_mut()
    }
}

impl serde::Serialize for Item<'_> {
    fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        self.value.serialize(s)
    }
}

/// A message's `raw` and bytes: moved out of an owned message, referred to in a borrowed one.
pub(super) fn raw_of(m: Cow<'_, Message>) -> Item<'_> {
    match m {
        Cow::Owned(m) => Item {
            value: Cow::Owned(m.raw),
            wire: m.wire.0,
        },
        Cow::Borrowed(m) => Item {
            value: Cow::Borrowed(&m.raw),
            wire: m.wire.0.clone(),
        },
    }
}

fn tool_name(t: &Value) -> Option<&str> {
    t.get("name")
        .or_else(|| t.get("function").and_then(|f| f.get("name")))
        .and_then(Value::as_str)
}

fn render_chat<'a>(all: impl Iterator<Item = Cow<'a, Message>>) -> Vec<Item<'a>> {
    let mut out: Vec<Item<'a>> = Vec::with_capacity(all.size_hint().0);
    // Index in `out` of the last converted assistant message, which later converted calls join.
    let mut open_assistant: Option<usize> = None;
    for m in all {
        if m.format == Format::ChatCompletions {
            out.push(raw_of(m));
            open_assistant = None;
            continue;
        }
        for raw in convert(&m, Format::ChatCompletions) {
            let is_assistant = raw.get("role").and_then(Value::as_str) == Some("assistant");
            let calls_only = is_assistant && raw.get("content").is_some_and(Value::is_null);
            match (open_assistant, calls_only) {
                (Some(i), true) => {
                    let new_calls = raw.get("tool_calls").cloned().unwrap_or(Value::Null);
                    if let (Some(Value::Object(prev)), Value::Array(calls)) =
                        (out.get_mut(i).map(Item::value_mut), new_calls)
                    {
                        match prev.get_mut("tool_calls") {
                            Some(Value::Array(list)) => list.extend(calls),
                            _ => {
                                prev.insert("tool_calls".into(), Value::Array(calls));
                            }
                        }
                    }
                }
                _ => {
                    out.push(Item::made(raw));
                    open_assistant = if is_assistant { Some(out.len() - 1) } else { None };
                }
            }
        }
    }
    out
}

/// A message as raw JSON in another format (one or more messages/items; none for an opaque
/// item). Content becomes its text, plus image parts of user messages.
pub(crate) fn convert(m: &Message, to: Format) -> Vec<Value> {
    if m.kind == Kind::Opaque && m.format != to {
        return Vec::new();
    }
    if m.format == to {
        return vec![m.raw.clone()];
    }
    let text = m.content_text();
    let images = if m.role == Role::User { images_of(m) } else { Vec::new() };
    match to {
        Format::AnthropicMessages => messages::convert(m, images),
        Format::ChatCompletions => match m.role {
            Role::Tool => vec![json!({
                "role": "tool",
                "tool_call_id": m.tool_call_id.clone().unwrap_or_default(),
                "content": text,
            })],
            Role::Assistant => {
                let mut msg = Map::new();
                msg.insert("role".into(), json!("assistant"));
                let content = if text.is_empty() && !m.tool_calls.is_empty() {
                    Value::Null
                } else {
                    json!(text)
                };
                msg.insert("content".into(), content);
                if !m.tool_calls.is_empty() {
                    let calls: Vec<Value> = m
                        .tool_calls
                        .iter()
                        .map(|c| json!({"id": c.id, "type": "function", "function": {"name": c.name, "arguments": c.arguments}}))
                        .collect();
                    msg.insert("tool_calls".into(), Value::Array(calls));
                }
                vec![Value::Object(msg)]
            }
            role => {
                let content = if images.is_empty() {
                    json!(text)
                } else {
                    let mut parts = Vec::new();
                    if !text.is_empty() {
                        parts.push(json!({"type": "text", "text": text}));
                    }
                    for (url, detail) in images {
                        let mut image = json!({"url": url});
                        if let Some(d) = detail {
                            image["detail"] = d;
                        }
                        parts.push(json!({"type": "image_url", "image_url": image}));
                    }
                    Value::Array(parts)
                };
                vec![json!({"role": role.as_str(), "content": content})]
            }
        },
        Format::Responses => match m.role {
            Role::Tool => vec![json!({
                "type": "function_call_output",
                "call_id": m.tool_call_id.clone().unwrap_or_default(),
                "output": text,
            })],
            Role::Assistant => {
                let mut items = Vec::new();
                if !text.is_empty() || m.tool_calls.is_empty() {
                    items.push(json!({"type": "message", "role": "assistant", "content": text}));
                }
                for c in &m.tool_calls {
                    items.push(
                        json!({"type": "function_call", "call_id": c.id, "name": c.name, "arguments": c.arguments}),
                    );
                }
                items
            }
            role => {
                let content = if images.is_empty() {
                    json!(text)
                } else {
                    let mut parts = Vec::new();
                    if !text.is_empty() {
                        parts.push(json!({"type": "input_text", "text": text}));
                    }
                    for (url, detail) in images {
                        let mut image = json!({"type": "input_image", "image_url": url});
                        image["detail"] = detail.unwrap_or_else(|| json!("auto"));
                        parts.push(image);
                    }
                    Value::Array(parts)
                };
                vec![json!({"type": "message", "role": role.as_str(), "content": content})]
            }
        },
    }
}

/// (url, detail) of the image parts of a message's content, in either format.
fn images_of(m: &Message) -> Vec<(String, Option<Value>)> {
    let Some(Value::Array(parts)) = m.raw.get("content") else {
        return Vec::new();
    };
    parts
        .iter()
        .filter_map(|p| match p.get("type").and_then(Value::as_str) {
            Some("image_url") => {
                let img = p.get("image_url")?;
                let url = img.as_str().or_else(|| img.get("url").and_then(Value::as_str))?;
                Some((url.to_string(), img.get("detail").cloned()))
            }
            Some("input_image") => {
                let url = p.get("image_url").and_then(Value::as_str)?;
                Some((url.to_string(), p.get("detail").cloned()))
            }
            _ => None,
        })
        .collect()
}
