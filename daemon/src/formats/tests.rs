//! Unit tests for formats: parsing, rendering, fingerprints, the note tool, odd inputs.

use serde_json::{json, Value};

use super::*;

fn round_trip(v: Value) -> ParsedRequest {
    let p = parse_request(v.clone()).unwrap();
    let back = render_request(p.format, &p.instructions, &p.history, &p.rest, &[]);
    assert_eq!(back, v);
    assert_encodes_as_its_value(&p, p.format);
    p
}

/// A request rendered from borrowed messages encodes to the bytes of the JSON value it stands
/// for (decorate's reply is encoded from it), in every format.
fn assert_encodes_as_its_value(p: &ParsedRequest, to: Format) {
    let render = || {
        let messages = p.history.iter().map(std::borrow::Cow::Borrowed).collect();
        let tool = json!({"type": "function", "function": {"name": "note"}});
        render_request_moving(
            to,
            p.instructions.clone(),
            messages,
            p.rest.clone(),
            p.tools.clone(),
            &[tool],
        )
    };
    let encoded = rmp_serde::to_vec_named(&render()).unwrap();
    let value = rmp_serde::to_vec_named(&render().into_value()).unwrap();
    assert_eq!(encoded, value, "{to:?}");
    assert_eq!(render().to_msgpack(), value, "{to:?}");
}

/// The bytes of each message of `v`'s list, as the server finds them in a decorate.
fn wires_of(v: &Value) -> Vec<Option<bytes::Bytes>> {
    let list = v.get("messages").or_else(|| v.get("input")).and_then(Value::as_array);
    list.map_or(Vec::new(), |l| {
        l.iter()
            .map(|m| Some(bytes::Bytes::from(rmp_serde::to_vec_named(m).unwrap())))
            .collect()
    })
}

/// A message's bytes as a client wrote them: `1` as a 9-byte integer where an encoder of the
/// value would write one byte.
fn wide_user_message() -> (Value, bytes::Bytes) {
    let mut b = Vec::new();
    rmp::encode::write_map_len(&mut b, 3).unwrap();
    rmp::encode::write_str(&mut b, "role").unwrap();
    rmp::encode::write_str(&mut b, "user").unwrap();
    rmp::encode::write_str(&mut b, "content").unwrap();
    rmp::encode::write_str(&mut b, "Where is my booking?").unwrap();
    rmp::encode::write_str(&mut b, "n").unwrap();
    rmp::encode::write_u64(&mut b, 1).unwrap();
    (
        json!({"role": "user", "content": "Where is my booking?", "n": 1}),
        bytes::Bytes::from(b),
    )
}

#[test]
fn a_message_that_came_as_bytes_is_written_back_as_those_bytes_while_unchanged() {
    let (message, wire) = wide_user_message();
    let contains = |hay: &[u8], needle: &[u8]| hay.windows(needle.len()).any(|w| w == needle);
    for format in [Format::ChatCompletions, Format::AnthropicMessages, Format::Responses] {
        let v = match format {
            Format::ChatCompletions => json!({"model": "m", "messages": [message]}),
            Format::AnthropicMessages => json!({"model": "m", "max_tokens": 5, "system": "S", "messages": [message]}),
            Format::Responses => json!({"model": "m", "input": [message]}),
        };
        let p = parse_request_with(v.clone(), None, vec![Some(wire.clone())]).unwrap();
        assert_eq!(p.format, format);
        let render = |p: &ParsedRequest, to: Format| {
            let messages = p.history.iter().map(std::borrow::Cow::Borrowed).collect();
            render_request_moving(to, p.instructions.clone(), messages, p.rest.clone(), None, &[]).to_msgpack()
        };
        // In its own format the bytes it came as; decoded whole, the value's own encoding.
        assert!(contains(&render(&p, format), &wire), "{format:?}");
        assert!(
            !contains(&render(&parse_request(v).unwrap(), format), &wire),
            "{format:?}"
        );
        // Converted to another format it is a new message.
        let other = if format == Format::ChatCompletions {
            Format::Responses
        } else {
            Format::ChatCompletions
        };
        assert!(!contains(&render(&p, other), &wire), "{format:?} as {other:?}");
    }
    // A list whose bytes do not match it in number gives none to any message.
    let p = parse_request_with(
        json!({"model": "m", "messages": [message, message]}),
        None,
        vec![Some(wire)],
    )
    .unwrap();
    assert!(p.history.iter().all(|m| m.wire.0.is_none()));
}

/// `v` with its tools taken out as bytes, as the server decodes a decorate.
fn with_raw_tools(v: &Value) -> (Value, recalld_protocol::Raw) {
    let mut lean = v.clone();
    let raw = recalld_protocol::Raw::of(&lean["tools"]);
    lean["tools"] = Value::Null;
    (lean, raw)
}

#[test]
fn tools_that_came_as_bytes_are_written_back_as_they_came() {
    let chat_tools = json!([{"type": "function", "function": {"name": "lookup", "description": "Finds ✓ things",
        "parameters": {"type": "object", "properties": {"id": {"type": "string"}}, "required": ["id"]}}}]);
    let requests = [
        json!({"model": "m", "tools": chat_tools, "messages": [{"role": "system", "content": "S"}, {"role": "user", "content": "U"}], "temperature": 0.5}),
        json!({"model": "m", "instructions": "S", "tools": [{"type": "function", "name": "lookup", "parameters": {}}], "input": "U"}),
        json!({"model": "m", "max_tokens": 10, "tools": [{"name": "lookup", "input_schema": {"type": "object"}}], "messages": [{"role": "user", "content": "U"}]}),
    ];
    for v in requests {
        let full = parse_request(v.clone()).unwrap();
        let (lean, raw) = with_raw_tools(&v);
        let p = parse_request_with(lean, Some(raw.clone()), wires_of(&v)).unwrap();
        let listed = !wires_of(&v).is_empty();
        assert!(
            p.history.iter().all(|m| m.wire.0.is_some() == listed),
            "each message keeps its bytes"
        );
        assert_eq!(p.format, full.format, "the format is told from the bytes too");
        assert_eq!(p.rest["tools"], Value::Null);
        assert_eq!(p.tools.as_ref(), Some(&raw));
        fn render<'p>(p: &'p ParsedRequest, extra: &[Value]) -> Rendered<'p> {
            let messages = p.history.iter().map(std::borrow::Cow::Borrowed).collect();
            render_request_moving(
                p.format,
                p.instructions.clone(),
                messages,
                p.rest.clone(),
                p.tools.clone(),
                extra,
            )
        }
        // As they came: the same bytes as the request decoded whole, the tools in their place.
        assert_eq!(
            render(&p, &[]).to_msgpack(),
            rmp_serde::to_vec_named(&render(&full, &[])).unwrap(),
            "{:?}",
            p.format
        );
        assert_eq!(render(&p, &[]).into_value(), v);
        // With the note tool joining them, read and joined as before.
        let note = [note_tool(p.format, "note")];
        assert_eq!(render(&p, &note).into_value(), render(&full, &note).into_value());
        assert_eq!(
            render(&p, &note).to_msgpack(),
            rmp_serde::to_vec_named(&render(&full, &note)).unwrap()
        );
        assert_encodes_as_its_value(&p, p.format);
    }
    // Bytes handed in for a request whose tools are not null are not its tools.
    let v = json!({"model": "m", "tools": [], "messages": [{"role": "user", "content": "U"}]});
    let p = parse_request_with(v, Some(recalld_protocol::Raw::of(&json!([1]))), Vec::new()).unwrap();
    assert!(p.tools.is_none());
}

fn err(v: Value) -> String {
    parse_request(v.clone()).unwrap_err().to_string()
}

#[test]
fn chat_request_is_taken_apart_and_rendered_back() {
    let v = json!({
        "model": "gpt-4o",
        "messages": [
            {"role": "system", "content": "Be brief."},
            {"role": "developer", "content": [{"type": "text", "text": "Use tools."}]},
            {"role": "user", "content": [
                {"type": "text", "text": "What is this?"},
                {"type": "image_url", "image_url": {"url": "https://x/y.png"}}
            ]},
            {"role": "assistant", "content": null, "tool_calls": [
                {"id": "call_1", "type": "function", "function": {"name": "look", "arguments": "{\"q\":1}"}}
            ]},
            {"role": "tool", "tool_call_id": "call_1", "content": "a cat"},
            {"role": "function", "name": "old", "content": "legacy"},
            {"role": "assistant", "content": "A cat.", "refusal": null}
        ],
        "max_tokens": 100,
        "temperature": 0.2
    });
    let p = round_trip(v);
    assert_eq!(p.format, Format::ChatCompletions);
    assert_eq!(p.instructions.len(), 2);
    assert_eq!(p.instructions_role, Role::Developer);
    assert_eq!(p.history.len(), 5);
    assert_eq!(p.history[0].text, "What is this?");
    assert_eq!(
        p.history[1].tool_calls,
        vec![ToolCall {
            id: "call_1".into(),
            name: "look".into(),
            arguments: "{\"q\":1}".into()
        }]
    );
    assert_eq!(p.history[1].text, "look {\"q\":1}");
    assert_eq!(p.history[2].tool_call_id.as_deref(), Some("call_1"));
    assert_eq!(p.history[3].role, Role::Tool);
    assert_eq!(p.history[3].tool_call_id, None);
    assert_eq!(p.max_output_tokens, Some(100));
    assert_eq!(p.model.as_deref(), Some("gpt-4o"));
    assert_eq!(
        p.rest.keys().collect::<Vec<_>>(),
        ["model", "max_tokens", "temperature"]
    );
    assert_eq!(p.provider_history, None);
}

#[test]
fn chat_without_instructions_uses_system() {
    let p = round_trip(
        json!({"messages": [{"role": "user", "content": "hi"}], "max_completion_tokens": 7, "max_tokens": 9}),
    );
    assert_eq!(p.instructions_role, Role::System);
    assert!(p.instructions.is_empty());
    assert_eq!(p.max_output_tokens, Some(7));
}

#[test]
fn responses_request_is_taken_apart_and_rendered_back() {
    let v = json!({
        "model": "gpt-5",
        "instructions": "Be brief.",
        "input": [
            {"role": "developer", "content": "Cite sources."},
            {"role": "user", "content": "Weather in Paris?"},
            {"type": "reasoning", "id": "rs_1", "summary": [{"type": "summary_text", "text": "think"}], "encrypted_content": "xx"},
            {"type": "function_call", "id": "fc_1", "call_id": "call_1", "name": "weather", "arguments": "{\"city\":\"Paris\"}", "status": "completed"},
            {"type": "function_call_output", "call_id": "call_1", "output": "rain"},
            {"type": "message", "id": "msg_1", "status": "completed", "role": "assistant",
             "content": [{"type": "output_text", "text": "Rain.", "annotations": []}]},
            {"type": "web_search_call", "id": "ws_1", "status": "completed", "action": {"type": "search", "query": "paris"}},
            {"type": "message", "role": "user", "content": [{"type": "input_text", "text": "Thanks"}, {"type": "input_image", "image_url": "data:x", "detail": "auto"}]}
        ],
        "max_output_tokens": 500,
        "previous_response_id": "resp_1",
        "tools": []
    });
    let p = round_trip(v);
    assert_eq!(p.format, Format::Responses);
    assert_eq!(p.instructions.len(), 2);
    assert_eq!(p.instructions[0].raw, json!("Be brief."));
    assert_eq!(p.instructions[0].role, Role::Developer);
    assert_eq!(p.instructions_role, Role::Developer);
    assert_eq!(p.provider_history.as_deref(), Some("previous_response_id"));
    assert_eq!(p.max_output_tokens, Some(500));
    let h = &p.history;
    assert_eq!(h.len(), 7);
    assert_eq!(
        (h[1].kind, h[1].role, h[1].text.as_str()),
        (Kind::Opaque, Role::Assistant, "think")
    );
    assert_eq!(h[2].tool_calls[0].id, "call_1");
    assert_eq!(h[2].text, "weather {\"city\":\"Paris\"}");
    assert_eq!(
        (h[3].role, h[3].tool_call_id.as_deref(), h[3].text.as_str()),
        (Role::Tool, Some("call_1"), "rain")
    );
    assert_eq!(h[4].text, "Rain.");
    assert_eq!(h[5].kind, Kind::Opaque);
    assert_eq!(h[6].text, "Thanks");
}

#[test]
fn responses_string_input_is_one_user_message() {
    let p = round_trip(json!({"model": "m", "input": "hello", "conversation": {"id": "conv_1"}}));
    assert_eq!(p.history.len(), 1);
    assert_eq!((p.history[0].role, p.history[0].text.as_str()), (Role::User, "hello"));
    assert_eq!(p.provider_history.as_deref(), Some("conversation"));
    let p = round_trip(json!({"instructions": "only"}));
    assert!(p.history.is_empty());
    assert_eq!(p.instructions.len(), 1);
}

#[test]
fn engine_blocks_render_in_place() {
    let p = parse_request(json!({"model": "m", "instructions": "Be brief.", "input": "hello"})).unwrap();
    let facts = Message::new(Format::Responses, p.instructions_role, "facts");
    let mut view = vec![facts];
    view.extend(p.history.clone());
    view.push(Message::developer(Format::Responses, "note ask"));
    let tool = note_tool(Format::Responses, "note");
    let out = render_request(p.format, &p.instructions, &view, &p.rest, std::slice::from_ref(&tool));
    assert_eq!(
        out,
        json!({
            "instructions": "Be brief.",
            "input": [
                {"type": "message", "role": "developer", "content": "facts"},
                {"role": "user", "content": "hello"},
                {"type": "message", "role": "developer", "content": "note ask"}
            ],
            "model": "m",
            "tools": [tool]
        })
    );
    // The tool is not added twice.
    let again = render_request(
        p.format,
        &p.instructions,
        &view,
        out.as_object().unwrap(),
        &[note_tool(Format::Responses, "note")],
    );
    assert_eq!(again["tools"].as_array().unwrap().len(), 1);

    let p = parse_request(json!({"messages": [{"role": "system", "content": "S"}, {"role": "user", "content": "U"}], "tools": [{"type": "function", "function": {"name": "t"}}]})).unwrap();
    let view = vec![
        Message::new(Format::ChatCompletions, p.instructions_role, "facts"),
        p.history[0].clone(),
    ];
    let out = render_request(
        p.format,
        &p.instructions,
        &view,
        &p.rest,
        &[note_tool(Format::ChatCompletions, "note")],
    );
    assert_eq!(
        out["messages"],
        json!([{"role": "system", "content": "S"}, {"role": "system", "content": "facts"}, {"role": "user", "content": "U"}])
    );
    assert_eq!(out["tools"][1]["function"]["name"], "note");
}

#[test]
fn errors_say_what_and_where() {
    assert_eq!(err(json!(3)), "request: expected an object, found a number");
    assert_eq!(
        err(json!({"model": "m"})),
        "request: has neither messages (chat completions) nor input or instructions (responses)"
    );
    assert_eq!(
        err(json!({"messages": {}})),
        "messages: expected an array, found an object"
    );
    assert_eq!(
        err(
            json!({"messages": [{"role": "user", "content": "a"}, {"role": "user", "content": "b"}, {"role": "user", "content": "c"}, {"role": "robot", "content": "d"}]})
        ),
        "messages[3].role: unknown role \"robot\""
    );
    assert_eq!(
        err(json!({"messages": [{"content": "a"}]})),
        "messages[0].role: missing"
    );
    assert_eq!(
        err(json!({"messages": [{"role": "user", "content": 5}]})),
        "messages[0].content: expected a string, an array or null, found a number"
    );
    assert_eq!(
        err(
            json!({"messages": [{"role": "assistant", "tool_calls": [{"id": "x", "type": "function", "function": {"arguments": "{}"}}]}]})
        ),
        "messages[0].tool_calls[0].function.name: missing"
    );
    assert_eq!(
        err(json!({"input": 1})),
        "input: expected a string, an array or null, found a number"
    );
    assert_eq!(
        err(json!({"input": [{"content": "x"}]})),
        "input[0]: item has neither type nor role"
    );
    assert_eq!(
        err(json!({"input": [{"type": "function_call", "name": "f"}]})),
        "input[0].call_id: missing"
    );
    assert_eq!(
        err(json!({"instructions": ["x"]})),
        "instructions: expected a string or null, found an array"
    );
    assert_eq!(
        err(json!({"input": [null]})),
        "input[0]: expected an object, found null"
    );
}

#[test]
fn fingerprints_ignore_spelling_and_volatile_fields() {
    let chat = |v: Value| parse_request(json!({"messages": [v]})).unwrap().history[0].fingerprint();
    let resp = |v: Value| parse_request(json!({"input": [v]})).unwrap().history[0].fingerprint();
    let a = chat(json!({"role": "user", "content": "hi"}));
    assert_eq!(
        a,
        chat(json!({"role": "user", "content": [{"type": "text", "text": "hi"}]}))
    );
    assert_eq!(a, chat(json!({"role": "user", "content": "hi", "name": "x"})));
    assert_ne!(a, chat(json!({"role": "user", "content": "hi!"})));
    assert_ne!(a, chat(json!({"role": "assistant", "content": "hi"})));
    assert_ne!(
        chat(json!({"role": "user", "content": [{"type": "text", "text": "a"}, {"type": "text", "text": "b"}]})),
        chat(json!({"role": "user", "content": [{"type": "text", "text": "ab"}]}))
    );
    let out = resp(
        json!({"type": "message", "id": "msg_1", "status": "completed", "role": "assistant", "content": [{"type": "output_text", "text": "Rain.", "annotations": []}]}),
    );
    assert_eq!(out, resp(json!({"role": "assistant", "content": "Rain."})));
    assert_eq!(
        out,
        chat(json!({"role": "assistant", "content": "Rain.", "refusal": null}))
    );
    let call = resp(
        json!({"type": "function_call", "id": "fc_1", "status": "completed", "call_id": "c", "name": "f", "arguments": "{}"}),
    );
    assert_eq!(
        call,
        resp(json!({"type": "function_call", "call_id": "c", "name": "f", "arguments": "{}"}))
    );
    assert_ne!(
        call,
        resp(json!({"type": "function_call", "call_id": "c", "name": "f", "arguments": "{ }"}))
    );
    assert_ne!(
        call,
        resp(json!({"type": "function_call", "call_id": "d", "name": "f", "arguments": "{}"}))
    );
    let out1 = resp(json!({"type": "function_call_output", "call_id": "c", "output": "x"}));
    assert_ne!(
        out1,
        resp(json!({"type": "function_call_output", "call_id": "d", "output": "x"}))
    );
    // Fixed across runs: a known value guards against an accidental change of the scheme.
    assert_eq!(a, Message::user(Format::Responses, "hi").fingerprint());
    assert_eq!(a, Message::user(Format::ChatCompletions, "hi").fingerprint());
}

#[test]
fn fingerprint_is_stable_across_builds() {
    // Stored fingerprints must stay valid: changing the scheme is a store migration.
    assert_eq!(
        Message::user(Format::ChatCompletions, "hi").fingerprint(),
        0x0629ea5ecb9ed534
    );
}

#[test]
fn note_tool_shapes() {
    let c = note_tool(Format::ChatCompletions, "note");
    assert_eq!(c["type"], "function");
    assert_eq!(c["function"]["name"], "note");
    let item = &c["function"]["parameters"]["properties"]["notes"]["items"];
    // Strict function calling: every property is required (optional ones are nullable/empty).
    let properties: Vec<&String> = item["properties"].as_object().unwrap().keys().collect();
    assert_eq!(item["required"], json!(properties));
    assert_eq!(
        item["required"].as_array().unwrap()[..4],
        json!(["note", "subject", "object", "milestone"]).as_array().unwrap()[..]
    );
    assert_eq!(item["additionalProperties"], false);
    let r = note_tool(Format::Responses, "remember");
    assert_eq!(r["name"], "remember");
    assert_eq!(r["parameters"], c["function"]["parameters"]);
}

fn call(args: &str) -> ToolCall {
    ToolCall {
        id: "c".into(),
        name: "note".into(),
        arguments: args.into(),
    }
}

#[test]
fn note_arguments_read_and_reject() {
    let fact = |n: &str, s: &str, o: &str, m: bool| NoteFact {
        note: n.into(),
        subject: s.into(),
        object: o.into(),
        milestone: m,
        subject_aliases: Vec::new(),
        object_aliases: Vec::new(),
        valid_from: None,
        valid_to: None,
    };
    assert_eq!(
        note_arguments(&call(r#"{"notes":[{"note":"A owns B.","subject":"A","object":"B","milestone":true},{"note":"C","subject":"c","object":"d"}]}"#)).unwrap(),
        vec![fact("A owns B.", "A", "B", true), fact("C", "c", "d", false)]
    );
    assert_eq!(
        note_arguments(&call(r#"[{"note":"x","subject":"a","object":"b","milestone":false}]"#)).unwrap(),
        vec![fact("x", "a", "b", false)]
    );
    assert_eq!(
        note_arguments(&call(r#"{"notes":[{"note":""}]}"#)).unwrap(),
        vec![fact("", "", "", false)]
    );
    assert_eq!(note_arguments(&call(r#""{\"notes\":[]}""#)).unwrap(), vec![]);
    let e = |a: &str| note_arguments(&call(a)).unwrap_err().to_string();
    assert!(
        e("not json").starts_with("arguments: invalid json: "),
        "{}",
        e("not json")
    );
    assert_eq!(e(r#"{"facts":[]}"#), "notes: missing");
    assert_eq!(e(r#"{"notes":{}}"#), "notes: expected an array, found an object");
    assert_eq!(
        e(r#"{"notes":[{"note":"x","subject":1,"object":"b"}]}"#),
        "notes[0].subject: expected a string, found a number"
    );
    assert_eq!(
        e(r#"{"notes":[{"note":"x","subject":"a"}]}"#),
        "notes[0].object: missing"
    );
    assert_eq!(
        e(r#"{"notes":[{"note":"x","subject":"a","object":"b","milestone":3}]}"#),
        "notes[0].milestone: expected a boolean, found a number"
    );
    assert_eq!(e(r#"{"notes":[7]}"#), "notes[0]: expected an object, found a number");
    assert_eq!(
        e("5"),
        "arguments: expected an object with notes or a list of notes, found a number"
    );
}

#[test]
fn chat_reply_parse_and_remove_note_call() {
    let reply = json!({
        "id": "chatcmpl-1", "object": "chat.completion", "model": "gpt-4o",
        "choices": [{"index": 0, "finish_reason": "tool_calls", "message": {
            "role": "assistant", "content": "Done.", "refusal": null,
            "tool_calls": [
                {"id": "c1", "type": "function", "function": {"name": "note", "arguments": "{\"notes\":[]}"}}
            ]}}],
        "usage": {"prompt_tokens": 120, "completion_tokens": 30, "total_tokens": 150}
    });
    let p = parse_response(&reply).unwrap();
    assert_eq!(p.format, Format::ChatCompletions);
    assert_eq!(
        p.usage,
        Some(Usage {
            prompt_tokens: 120,
            completion_tokens: 30
        })
    );
    assert_eq!(p.model.as_deref(), Some("gpt-4o"));
    assert_eq!(p.messages[0].tool_calls[0].name, "note");
    let (stripped, calls) = remove_tool_calls(&reply, "note");
    assert_eq!(calls.len(), 1);
    assert_eq!(stripped["choices"][0]["finish_reason"], "stop");
    assert!(stripped["choices"][0]["message"].get("tool_calls").is_none());
    assert!(parse_response(&stripped).unwrap().has_content());

    // Note plus another call: the other stays, finish_reason too.
    let mut two = reply.clone();
    two["choices"][0]["message"]["tool_calls"]
        .as_array_mut()
        .unwrap()
        .push(json!({"id": "c2", "type": "function", "function": {"name": "search", "arguments": "{}"}}));
    let (stripped, calls) = remove_tool_calls(&two, "note");
    assert_eq!(calls[0].id, "c1");
    assert_eq!(stripped["choices"][0]["finish_reason"], "tool_calls");
    assert_eq!(stripped["choices"][0]["message"]["tool_calls"][0]["id"], "c2");

    // Only the note call: nothing left for the client.
    let mut only = reply.clone();
    only["choices"][0]["message"]["content"] = Value::Null;
    let (stripped, _) = remove_tool_calls(&only, "note");
    assert_eq!(stripped["choices"][0]["finish_reason"], "tool_calls");
    assert!(!parse_response(&stripped).unwrap().has_content());

    // No call to remove: unchanged.
    assert_eq!(remove_tool_calls(&reply, "other"), (reply.clone(), vec![]));
}

#[test]
fn responses_reply_parse_and_remove_note_call() {
    let reply = json!({
        "id": "resp_1", "object": "response", "model": "gpt-5", "status": "completed",
        "output": [
            {"type": "reasoning", "id": "rs_1", "summary": []},
            {"type": "function_call", "id": "fc_1", "call_id": "c1", "name": "note", "arguments": "{\"notes\":[]}", "status": "completed"}
        ],
        "usage": {"input_tokens": 10, "output_tokens": 5, "total_tokens": 15}
    });
    let p = parse_response(&reply).unwrap();
    assert_eq!(p.messages.len(), 2);
    assert_eq!(
        p.usage,
        Some(Usage {
            prompt_tokens: 10,
            completion_tokens: 5
        })
    );
    let (stripped, calls) = remove_tool_calls(&reply, "note");
    assert_eq!(
        calls,
        vec![ToolCall {
            id: "c1".into(),
            name: "note".into(),
            arguments: "{\"notes\":[]}".into()
        }]
    );
    assert_eq!(stripped["output"].as_array().unwrap().len(), 1);
    assert!(!parse_response(&stripped).unwrap().has_content());
    assert!(parse_response(&reply).unwrap().has_content());
}

#[test]
fn stream_chunks_and_unknown_replies_are_errors() {
    assert_eq!(
        parse_response(&json!({"object": "chat.completion.chunk", "choices": []}))
            .unwrap_err()
            .to_string(),
        "response.object: \"chat.completion.chunk\" is a stream event: report the assembled reply"
    );
    assert_eq!(
        parse_response(&json!({"foo": 1})).unwrap_err().to_string(),
        "response: neither a chat.completion (choices) nor a response (output)"
    );
    assert_eq!(
        parse_response(&json!({"object": "chat.completion", "choices": [{"message": {"role": "bot"}}]}))
            .unwrap_err()
            .to_string(),
        "choices[0].message.role: unknown role \"bot\""
    );
}

#[test]
fn cross_format_conversion() {
    let chat = parse_request(json!({"messages": [
        {"role": "user", "content": [{"type": "text", "text": "look"}, {"type": "image_url", "image_url": {"url": "u", "detail": "low"}}]},
        {"role": "assistant", "content": "ok", "tool_calls": [
            {"id": "a", "type": "function", "function": {"name": "f", "arguments": "{}"}},
            {"id": "b", "type": "function", "function": {"name": "g", "arguments": "{}"}}]},
        {"role": "tool", "tool_call_id": "a", "content": "A"},
        {"role": "tool", "tool_call_id": "b", "content": "B"}
    ]}))
    .unwrap();
    for to in [Format::ChatCompletions, Format::Responses, Format::AnthropicMessages] {
        assert_encodes_as_its_value(&chat, to);
    }
    let r = render_request(Format::Responses, &[], &chat.history, &Default::default(), &[]);
    assert_eq!(
        r["input"],
        json!([
            {"type": "message", "role": "user", "content": [{"type": "input_text", "text": "look"}, {"type": "input_image", "image_url": "u", "detail": "low"}]},
            {"type": "message", "role": "assistant", "content": "ok"},
            {"type": "function_call", "call_id": "a", "name": "f", "arguments": "{}"},
            {"type": "function_call", "call_id": "b", "name": "g", "arguments": "{}"},
            {"type": "function_call_output", "call_id": "a", "output": "A"},
            {"type": "function_call_output", "call_id": "b", "output": "B"}
        ])
    );
    // And back: the calls merge into the assistant message again.
    let resp = parse_request(r.clone()).unwrap();
    let c = render_request(Format::ChatCompletions, &[], &resp.history, &Default::default(), &[]);
    let back = parse_request(c.clone()).unwrap();
    let fps = |h: &[Message]| h.iter().map(Message::fingerprint).collect::<Vec<_>>();
    assert_eq!(c["messages"].as_array().unwrap().len(), 4);
    assert_eq!(back.history[1].tool_calls, chat.history[1].tool_calls);
    assert_eq!(fps(&back.history)[1..], fps(&chat.history)[1..]);
    // Opaque items of another format are left out.
    let op = parse_request(json!({"input": [{"type": "reasoning", "id": "r", "summary": []}]})).unwrap();
    assert!(op.history[0].to_format(Format::ChatCompletions).is_empty());
}

#[test]
fn without_tool_calls_drops_the_note_call() {
    let p = parse_request(json!({"messages": [
        {"role": "assistant", "content": null, "tool_calls": [{"id": "a", "type": "function", "function": {"name": "note", "arguments": "{}"}}]},
        {"role": "assistant", "content": "x", "tool_calls": [
            {"id": "b", "type": "function", "function": {"name": "note", "arguments": "{}"}},
            {"id": "c", "type": "function", "function": {"name": "f", "arguments": "{}"}}]}
    ], "input": []}))
    .unwrap();
    assert_eq!(p.history[0].without_tool_calls("note"), None);
    let kept = p.history[1].without_tool_calls("note").unwrap();
    assert_eq!(kept.tool_calls.len(), 1);
    assert_eq!(kept.raw["tool_calls"][0]["id"], "c");
    assert_eq!(p.history[1].without_tool_calls("zzz").as_ref(), Some(&p.history[1]));
    let r =
        parse_request(json!({"input": [{"type": "function_call", "call_id": "a", "name": "note", "arguments": "{}"}]}))
            .unwrap();
    assert_eq!(r.history[0].without_tool_calls("note"), None);
}

/// Odd shapes in every position: nothing panics, and whatever parses renders back equal.
#[test]
fn odd_inputs_never_panic() {
    let odd = vec![
        Value::Null,
        json!(0),
        json!(-1.5),
        json!(true),
        json!(""),
        json!("x"),
        json!([]),
        json!([[]]),
        json!([null, 1, "a"]),
        json!({}),
        json!({"type": null}),
        json!({"role": 1}),
        json!({"role": "user"}),
        json!({"role": "assistant", "tool_calls": 3}),
        json!({"role": "assistant", "tool_calls": [1]}),
        json!({"role": "assistant", "tool_calls": [{"function": 1}]}),
        json!({"role": "assistant", "tool_calls": [{"id": 2, "function": {"name": "f"}}]}),
        json!({"role": "assistant", "function_call": "f"}),
        json!({"role": "tool", "tool_call_id": []}),
        json!({"role": "user", "content": [1, null, [], {"type": 3}]}),
        json!({"type": "message"}),
        json!({"type": "function_call"}),
        json!({"type": "function_call", "call_id": "c", "name": 1}),
        json!({"type": "function_call_output", "call_id": "c", "output": {}}),
        json!({"type": "reasoning", "call_id": 5, "role": "weird"}),
        json!({"type": "custom_tool_call", "call_id": "c", "input": "x"}),
        json!({"type": "custom_tool_call_output", "call_id": "c", "output": [[[]]]}),
        json!({"type": 7}),
    ];
    let mut checked = 0;
    for x in &odd {
        let mut shapes = vec![
            x.clone(),
            json!({"messages": x}),
            json!({"messages": [x]}),
            json!({"input": x}),
            json!({"input": [x]}),
            json!({"instructions": x}),
            json!({"instructions": "i", "input": [x, x]}),
            json!({"object": "chat.completion", "choices": x}),
            json!({"choices": [x]}),
            json!({"choices": [{"message": x}]}),
            json!({"object": "response", "output": x}),
            json!({"output": [x]}),
            json!({"choices": [{"message": {"role": "assistant", "tool_calls": [x]}}]}),
        ];
        // Nested deeply.
        let mut deep = x.clone();
        for _ in 0..200 {
            deep = json!([deep]);
        }
        shapes.push(json!({"messages": [{"role": "user", "content": [deep.clone()]}]}));
        shapes.push(json!({"input": [{"type": "reasoning", "summary": deep}]}));
        for s in &shapes {
            if let Ok(p) = parse_request(s.clone()) {
                let back = render_request(p.format, &p.instructions, &p.history, &p.rest, &[]);
                assert_eq!(&back, s);
                for m in p.instructions.iter().chain(&p.history) {
                    let _ = m.fingerprint();
                    let _ = m.content_text();
                    let _ = m.without_tool_calls("note");
                    for f in [Format::ChatCompletions, Format::Responses] {
                        let _ = m.to_format(f);
                    }
                }
                for f in [Format::ChatCompletions, Format::Responses] {
                    let _ = render_request(f, &p.instructions, &p.history, &p.rest, std::slice::from_ref(x));
                }
                checked += 1;
            }
            let _ = parse_response(s).map(|r| r.has_content());
            let _ = remove_tool_calls(s, "note");
            if let Value::String(a) = x {
                let _ = note_arguments(&call(a));
            }
            let _ = note_arguments(&call(&s.to_string()));
        }
    }
    assert!(checked > 20, "only {checked} odd shapes parsed");
}
