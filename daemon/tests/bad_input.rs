//! Bad input a new user tried, kept as tests: each is refused with `invalid_argument` on the
//! real socket and stores nothing.

use crate::util;

use serde::Serialize;
use serde_json::json;
use util::{code, Daemon};

/// A decorate's arguments written as MessagePack from typed fields (a JSON value cannot hold
/// a NaN).
#[derive(Serialize)]
struct Args<R = serde_json::Value> {
    memory: &'static str,
    request: R,
    now: f64,
}

#[derive(Serialize)]
struct Body<R = serde_json::Value> {
    id: u64,
    op: &'static str,
    args: Args<R>,
}

fn hello_request() -> serde_json::Value {
    json!({"model": "gpt-4o", "messages": [{"role": "user", "content": "hi"}]})
}

#[test]
fn a_nan_or_negative_now_is_an_invalid_argument_and_stores_nothing() {
    let d = Daemon::start();
    let mut c = d.client();
    // A raw MessagePack float64 NaN (and infinities): JSON cannot hold them, so before the fix
    // they read as "absent" and the daemon's clock was used instead.
    for (id, now) in [
        (11u64, f64::NAN),
        (12, f64::INFINITY),
        (13, f64::NEG_INFINITY),
        (14, -1.0),
    ] {
        let body = rmp_serde::to_vec_named(&Body {
            id,
            op: "decorate",
            args: Args {
                memory: "clock",
                request: hello_request(),
                now,
            },
        })
        .unwrap();
        c.send_raw_body(&body).unwrap();
        let reply = c.recv().unwrap();
        assert_eq!(reply.id, id, "the reply names the request");
        let err = reply.err.unwrap_or_else(|| panic!("now={now} was accepted"));
        assert_eq!(err.code.as_str(), "invalid_argument", "now={now}: {}", err.message);
        assert!(
            err.message.contains("now"),
            "the message names the field: {}",
            err.message
        );
    }
    assert_eq!(code(c.call("export", json!({"memory": "clock"}))), "not_found");
    // The connection goes on and a finite `now` works.
    c.call(
        "decorate",
        json!({"memory": "clock", "request": hello_request(), "now": 1000.0}),
    )
    .unwrap();
}

/// A non-finite number inside a request's tools (which the daemon otherwise passes through
/// unread) is refused like one anywhere else, naming where it is.
#[test]
fn a_nan_in_a_requests_tools_is_an_invalid_argument_naming_it() {
    // Written as MessagePack from typed fields: a JSON value cannot hold the NaN.
    #[derive(Serialize)]
    struct Tool {
        #[serde(rename = "type")]
        kind: &'static str,
        function: serde_json::Value,
        weight: f64,
    }
    #[derive(Serialize)]
    struct Request {
        model: &'static str,
        messages: serde_json::Value,
        tools: [Tool; 2],
    }
    let d = Daemon::start();
    let mut c = d.client();
    let tool = |weight: f64| Tool {
        kind: "function",
        function: json!({"name": "lookup", "description": "Finds a booking by its code, six letters.", "parameters": {"type": "object", "properties": {"code": {"type": "string", "description": "the booking's code"}}}}),
        weight,
    };
    let body = |id: u64, weight: f64| {
        rmp_serde::to_vec_named(&Body {
            id,
            op: "decorate",
            args: Args {
                memory: "tools",
                request: Request {
                    model: "gpt-4o",
                    messages: json!([{"role": "user", "content": "hi"}]),
                    tools: [tool(0.5), tool(weight)],
                },
                now: 1000.0,
            },
        })
        .unwrap()
    };
    c.send_raw_body(&body(21, f64::NAN)).unwrap();
    let err = c.recv().unwrap().err.expect("a NaN in the tools was accepted");
    assert_eq!(err.code.as_str(), "invalid_argument", "{}", err.message);
    assert!(
        err.message.contains("args.request.tools[1].weight"),
        "the message names where: {}",
        err.message
    );
    assert_eq!(code(c.call("export", json!({"memory": "tools"}))), "not_found");
    c.send_raw_body(&body(22, 0.25)).unwrap();
    let reply = c.recv().unwrap();
    assert!(reply.err.is_none(), "{:?}", reply.err);
    assert_eq!(reply.ok.unwrap()["request"]["tools"][1]["weight"], 0.25);
}

/// A decorate nested a million levels deep (walked by the server before it is decoded, to find
/// the parts it passes through as bytes) is refused, and the daemon goes on.
#[test]
fn a_request_nested_a_million_deep_is_refused_and_the_daemon_goes_on() {
    let d = Daemon::start();
    let mut c = d.client();
    let mut b = Vec::new();
    rmp::encode::write_map_len(&mut b, 3).unwrap();
    rmp::encode::write_str(&mut b, "id").unwrap();
    rmp::encode::write_uint(&mut b, 31).unwrap();
    rmp::encode::write_str(&mut b, "op").unwrap();
    rmp::encode::write_str(&mut b, "decorate").unwrap();
    rmp::encode::write_str(&mut b, "args").unwrap();
    rmp::encode::write_map_len(&mut b, 2).unwrap();
    rmp::encode::write_str(&mut b, "memory").unwrap();
    rmp::encode::write_str(&mut b, "deep").unwrap();
    rmp::encode::write_str(&mut b, "request").unwrap();
    rmp::encode::write_map_len(&mut b, 2).unwrap();
    rmp::encode::write_str(&mut b, "messages").unwrap();
    rmp::encode::write_array_len(&mut b, 1).unwrap();
    b.extend(std::iter::repeat_n(0x91u8, 1_000_000));
    b.push(0xc0);
    rmp::encode::write_str(&mut b, "tools").unwrap();
    b.extend(std::iter::repeat_n(0x91u8, 1_000_000));
    b.push(0xc0);
    c.send_raw_body(&b).unwrap();
    let reply = c.recv().unwrap();
    assert!(reply.err.is_some(), "a million levels were accepted");
    assert_eq!(c.call("ping", json!({"payload": 1})).unwrap()["payload"], 1);
}

#[test]
fn a_chat_tool_output_without_its_call_is_refused_naming_the_message() {
    let d = Daemon::start();
    let mut c = d.client();
    let orphan = json!({"model": "gpt-4o", "messages": [
        {"role": "system", "content": "Be brief."},
        {"role": "user", "content": "What is the weather?"},
        {"role": "tool", "tool_call_id": "call_9", "content": "sunny"},
        {"role": "user", "content": "So?"},
    ]});
    let err = c
        .call("decorate", json!({"memory": "t", "request": orphan, "now": 1000.0}))
        .unwrap_err();
    assert_eq!(err.code(), Some("invalid_argument"), "{err}");
    let text = err.to_string();
    assert!(text.contains("messages[2]") && text.contains("call_9"), "{text}");
    assert_eq!(
        code(c.call("export", json!({"memory": "t"}))),
        "not_found",
        "nothing stored"
    );

    // A call answered with another id is refused too, also when the memory exists.
    let first = json!({"model": "gpt-4o", "messages": [{"role": "user", "content": "Weather?"}]});
    c.call("decorate", json!({"memory": "t", "request": first, "now": 1001.0}))
        .unwrap();
    let mismatched = json!({"model": "gpt-4o", "messages": [
        {"role": "user", "content": "Weather?"},
        {"role": "assistant", "content": null, "tool_calls": [
            {"id": "call_1", "type": "function", "function": {"name": "weather", "arguments": "{}"}}]},
        {"role": "tool", "tool_call_id": "call_2", "content": "sunny"},
    ]});
    let err = c
        .call("decorate", json!({"memory": "t", "request": mismatched, "now": 1002.0}))
        .unwrap_err();
    assert_eq!(err.code(), Some("invalid_argument"), "{err}");
    assert!(err.to_string().contains("messages[2]"), "{err}");
    let export = c.call("export", json!({"memory": "t"})).unwrap();
    assert_eq!(
        export["messages"].as_array().unwrap().len(),
        1,
        "only the first request stored"
    );

    // A proper pair is stored, and a later delta may answer a call stored earlier.
    let paired = json!({"model": "gpt-4o", "messages": [
        {"role": "user", "content": "Weather?"},
        {"role": "assistant", "content": null, "tool_calls": [
            {"id": "call_1", "type": "function", "function": {"name": "weather", "arguments": "{}"}}]},
    ]});
    c.call("decorate", json!({"memory": "t", "request": paired, "now": 1003.0}))
        .unwrap();
    let delta = json!({"model": "gpt-4o", "messages": [
        {"role": "tool", "tool_call_id": "call_1", "content": "sunny"},
    ]});
    let r = c
        .call(
            "decorate",
            json!({"memory": "t", "request": delta, "now": 1004.0, "history": "delta"}),
        )
        .unwrap();
    assert_eq!(r["info"]["stored"], 1);
}
