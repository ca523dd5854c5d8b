//! End-to-end tests of the server: the real binary, a real socket, real LMDB.

use crate::util;

use std::io::Write;
use std::os::unix::fs::PermissionsExt;

use serde_json::{json, Value};
use util::{code, Daemon};

#[test]
fn hello_negotiates_a_version_and_lists_limits() {
    let d = Daemon::start();
    let mut c = d.client();
    let hello = c
        .call("hello", json!({"min_version": 1, "max_version": 3, "client": "test"}))
        .unwrap();
    assert_eq!(hello["protocol_version"], 1);
    assert_eq!(hello["server"], "recalld");
    assert_eq!(hello["limits"]["max_frame_bytes"], 64 * 1024 * 1024);
    assert_eq!(hello["limits"]["max_memory_id_bytes"], 256);
    let caps: Vec<String> = serde_json::from_value(hello["capabilities"].clone()).unwrap();
    assert!(caps.contains(&"decorate".to_string()));
    assert_eq!(
        code(c.call("hello", json!({"min_version": 2, "max_version": 3}))),
        "version_unsupported"
    );
}

#[test]
fn ping_echoes_its_payload() {
    let d = Daemon::start();
    let mut c = d.client();
    let payload = json!({"s": "héllo ✓", "n": -5, "f": 0.5, "l": [null, true, {"x": []}]});
    assert_eq!(
        c.call("ping", json!({"payload": payload.clone()})).unwrap(),
        json!({"payload": payload})
    );
}

/// A decorate's tools are passed through as their bytes (not decoded and encoded again): they
/// come back as sent, key order and all, in every format, and the format is still told by them.
#[test]
fn a_decorates_tools_come_back_as_sent() {
    let d = Daemon::start();
    let mut c = d.client();
    // Keys in an order of their own, more than the few hundred bytes worth passing through.
    let schema = json!({"required": ["id"], "type": "object", "properties": {"id": {"description": "the booking's code, six letters ✓", "type": "string"}}});
    let chat_tools: Vec<Value> = (0..3)
        .map(|i| json!({"function": {"parameters": schema, "name": format!("lookup_{i}"), "description": "Finds a booking."}, "type": "function"}))
        .collect();
    let anthropic_tools: Vec<Value> = (0..3)
        .map(|i| json!({"name": format!("lookup_{i}"), "input_schema": schema, "description": "Finds a booking."}))
        .collect();
    let requests = [
        (
            "chat",
            json!({"model": "gpt-4o", "tools": chat_tools, "messages": [{"role": "system", "content": "S"}, {"role": "user", "content": "Where is my booking?"}], "temperature": 0.0}),
        ),
        (
            "anthropic",
            json!({"model": "claude", "max_tokens": 100, "tools": anthropic_tools, "messages": [{"role": "user", "content": "Where is my booking?"}]}),
        ),
    ];
    for (memory, request) in requests {
        let sent = request["tools"].clone();
        let out = c
            .call("decorate", json!({"memory": memory, "request": request, "now": 1000.0}))
            .unwrap();
        let back = &out["request"];
        assert_eq!(
            serde_json::to_string(&back["tools"]).unwrap(),
            serde_json::to_string(&sent).unwrap(),
            "{memory}"
        );
        assert_eq!(back["model"], request["model"]);
        // Anthropic's (told by the tools alone here) keeps its user message as it was; Chat its system prompt.
        assert_eq!(
            back["messages"].as_array().unwrap().last().unwrap()["content"],
            "Where is my booking?"
        );
        assert_eq!(back.get("temperature").is_some(), memory == "chat");
    }
}

/// The typed calls the load benchmark makes: arguments encoded from borrowed data, a reply read
/// field by field (what it does not name skipped), refusals as errors, the connection in step.
#[test]
fn typed_calls_encode_and_read_what_value_calls_do() {
    #[derive(serde::Serialize)]
    struct Echo<'a> {
        payload: &'a [Value],
    }
    #[derive(serde::Deserialize, Debug, PartialEq)]
    struct Echoed {
        payload: Vec<Value>,
    }
    #[derive(serde::Deserialize)]
    struct Nothing {}
    let d = Daemon::start();
    let mut c = d.client();
    let items = vec![json!("héllo ✓"), json!({"n": -5, "l": [null, 0.5]})];
    let echoed: Echoed = c.call_as("ping", &Echo { payload: &items }).unwrap();
    assert_eq!(echoed.payload, items);
    let skipped: Nothing = c.call_as("ping", &Echo { payload: &items }).unwrap();
    let _ = skipped;
    let refused = c.call_as::<_, Nothing>("decorate", &json!({"memory": ""}));
    assert!(matches!(refused, Err(recalld::client::ClientError::Server(_))));
    assert_eq!(c.call("ping", json!({"payload": 1})).unwrap()["payload"], 1);
}

#[test]
fn bad_input_gets_stable_codes_and_the_connection_goes_on() {
    let d = Daemon::start_with_config("max_frame_bytes = 4096\n");
    let mut c = d.client();
    // Oversize frame: reported, skipped, connection still usable.
    c.send_raw_body(&vec![0x90; 10_000]).unwrap();
    let r = c.recv().unwrap();
    assert_eq!(r.err.unwrap().code.as_str(), "frame_too_large");
    // Garbage body.
    c.send_raw_body(&[0xc1, 0xff, 0x00]).unwrap();
    assert_eq!(c.recv().unwrap().err.unwrap().code.as_str(), "malformed_frame");
    // Not a map.
    c.send_raw_body(&rmp_serde::to_vec(&json!([1, 2, 3])).unwrap()).unwrap();
    assert_eq!(c.recv().unwrap().err.unwrap().code.as_str(), "malformed_frame");
    assert_eq!(code(c.call("no_such_op", json!({}))), "unknown_op");
    assert_eq!(
        code(c.call("decorate", json!({"memory": 5, "request": {}}))),
        "invalid_argument"
    );
    assert_eq!(code(c.call("decorate", json!({"memory": "m"}))), "invalid_argument");
    assert_eq!(
        code(c.call("decorate", json!({"memory": "", "request": {"messages": []}}))),
        "invalid_argument"
    );
    let long = "x".repeat(300);
    assert_eq!(
        code(c.call("decorate", json!({"memory": long, "request": {"messages": []}}))),
        "invalid_argument"
    );
    assert_eq!(
        code(c.call("decorate", json!({"memory": "m", "request": {"messages": "nope"}}))),
        "invalid_argument"
    );
    assert_eq!(
        code(c.call("report", json!({"memory": "m", "response": 3}))),
        "invalid_argument"
    );
    assert_eq!(code(c.call("export", json!({"memory": "never-seen"}))), "not_found");
    // After all that, the same connection still works.
    assert_eq!(c.call("ping", json!({"payload": 1})).unwrap()["payload"], 1);
}

#[test]
fn a_truncated_frame_harms_no_other_connection() {
    let d = Daemon::start();
    let mut other = d.client();
    {
        let mut s = std::os::unix::net::UnixStream::connect(&d.socket).unwrap();
        s.write_all(&[0, 0, 1, 0, 0x81, 0xa2]).unwrap(); // header says 256 bytes, 2 arrive
    }
    {
        let mut s = std::os::unix::net::UnixStream::connect(&d.socket).unwrap();
        s.write_all(&[0x12, 0x34]).unwrap(); // half a header
    }
    assert_eq!(
        other.call("ping", json!({"payload": "still here"})).unwrap()["payload"],
        "still here"
    );
    assert_eq!(d.client().call("health", json!({})).unwrap()["status"], "ok");
}

#[test]
fn many_requests_in_flight_are_matched_by_id() {
    let d = Daemon::start();
    let mut c = d.client();
    let mut ids = std::collections::HashMap::new();
    for i in 0..300u64 {
        let id = c.send("ping", json!({"payload": i})).unwrap();
        ids.insert(id, i);
    }
    for _ in 0..300 {
        let r = c.recv().unwrap();
        let want = ids.remove(&r.id).expect("reply to a request we sent, once");
        assert_eq!(r.ok.unwrap()["payload"], want);
    }
    assert!(ids.is_empty());
}

fn chat(messages: Value) -> Value {
    json!({"model": "gpt-4o", "temperature": 0.2, "messages": messages})
}

#[test]
fn decorate_stores_only_the_new_tail_and_export_returns_everything() {
    let d = Daemon::start();
    let mut c = d.client();
    let sys = json!({"role": "system", "content": "Be brief."});
    let u1 = json!({"role": "user", "content": "What is the capital of France?"});
    let r1 = c
        .call(
            "decorate",
            json!({"memory": "m1", "request": chat(json!([sys, u1])), "now": 1000.0}),
        )
        .unwrap();
    assert_eq!(
        r1["request"],
        chat(json!([sys, u1])),
        "request passes through unchanged for now"
    );
    assert_eq!(r1["info"]["stored"], 1);
    let reply = json!({"id": "c1", "object": "chat.completion", "model": "gpt-4o",
        "choices": [{"index": 0, "finish_reason": "stop", "message": {"role": "assistant", "content": "Paris."}}],
        "usage": {"prompt_tokens": 20, "completion_tokens": 2, "total_tokens": 22}});
    let rep = c
        .call(
            "report",
            json!({"memory": "m1", "response": reply.clone(), "now": 1001.0}),
        )
        .unwrap();
    assert_eq!(rep["response"], reply);
    assert_eq!(rep["again"], false);
    // The client resends its whole history plus one new message.
    let a1 = json!({"role": "assistant", "content": "Paris."});
    let u2 = json!({"role": "user", "content": "And of Spain?"});
    let r2 = c
        .call(
            "decorate",
            json!({"memory": "m1", "request": chat(json!([sys, u1, a1, u2])), "now": 1002.0}),
        )
        .unwrap();
    assert_eq!(r2["info"]["stored"], 1, "{}", r2["info"]);
    // dry_run stores nothing.
    let u3 = json!({"role": "user", "content": "And of Italy?"});
    let r3 = c
        .call(
            "decorate",
            json!({"memory": "m1", "dry_run": true, "request": chat(json!([sys, u1, a1, u2, u3]))}),
        )
        .unwrap();
    assert_eq!(r3["info"]["stored"], 1);
    let export = c.call("export", json!({"memory": "m1"})).unwrap();
    let messages = export["messages"].as_array().unwrap();
    let texts: Vec<&Value> = messages.iter().map(|m| &m["message"]["content"]).collect();
    assert_eq!(
        texts,
        vec![
            &json!("What is the capital of France?"),
            &json!("Paris."),
            &json!("And of Spain?")
        ]
    );
    assert_eq!(messages[0]["turn"], 1);
    assert_eq!(messages[2]["turn"], 2);
    assert_eq!(messages[1]["source"], "reply");
}

#[test]
fn an_edited_history_supersedes_but_never_deletes() {
    let d = Daemon::start();
    let mut c = d.client();
    let u1 = json!({"role": "user", "content": "one"});
    let a1 = json!({"role": "assistant", "content": "two"});
    let u2 = json!({"role": "user", "content": "three"});
    c.call("decorate", json!({"memory": "e", "request": chat(json!([u1, a1, u2]))}))
        .unwrap();
    let u2b = json!({"role": "user", "content": "three, edited"});
    let r = c
        .call(
            "decorate",
            json!({"memory": "e", "request": chat(json!([u1, a1, u2b]))}),
        )
        .unwrap();
    assert_eq!(r["info"]["aligned"], "edit");
    let export = c.call("export", json!({"memory": "e"})).unwrap();
    let messages = export["messages"].as_array().unwrap();
    assert_eq!(messages.len(), 4, "the edited message is kept");
    assert!(messages[2]["superseded_at"].is_number());
    assert_eq!(messages[3]["message"]["content"], "three, edited");
}

#[test]
fn responses_requests_are_accepted() {
    let d = Daemon::start();
    let mut c = d.client();
    let req = json!({"model": "gpt-4.1", "instructions": "Be brief.", "input": [
        {"role": "user", "content": "look it up"},
        {"type": "function_call", "call_id": "fc1", "name": "lookup", "arguments": "{}"},
        {"type": "function_call_output", "call_id": "fc1", "output": "42"}]});
    let r = c
        .call("decorate", json!({"memory": "r", "request": req.clone()}))
        .unwrap();
    assert_eq!(r["request"], req);
    assert_eq!(r["info"]["stored"], 3);
}

#[test]
fn socket_is_private_and_a_live_daemon_is_not_stolen() {
    let d = Daemon::start();
    let mode = std::fs::metadata(&d.socket).unwrap().permissions().mode() & 0o777;
    assert_eq!(mode, 0o600);
    let out = d.command(&[]).output().unwrap();
    assert!(!out.status.success());
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(stderr.contains("already listening"), "{stderr}");
    // The first daemon still answers.
    assert_eq!(d.client().call("health", json!({})).unwrap()["status"], "ok");
}

#[test]
fn a_stale_socket_is_replaced() {
    let dir = tempfile::tempdir().unwrap();
    let socket = dir.path().join("recalld.sock");
    drop(std::os::unix::net::UnixListener::bind(&socket).unwrap()); // leaves the file, nobody listening
    assert!(socket.exists());
    let mut child = std::process::Command::new(util::bin())
        .args([
            "serve",
            "--socket",
            socket.to_str().unwrap(),
            "--data",
            dir.path().join("d").to_str().unwrap(),
        ])
        // A signal received says so: one suspect of the reset below is a stray SIGTERM.
        .env("RECALLD_LOG", "warn,recalld::server::shutdown=info")
        .env("RECALLD_MODEL_DIR", util::model_dir())
        .stdout(std::process::Stdio::null())
        .spawn()
        .unwrap();
    util::wait_for_socket(&socket, &mut child);
    let mut c = recalld::client::Client::connect(&socket).unwrap();
    // Seen twice, only with both cores busy for minutes: the first connection reset while the
    // daemon lived on (`try_wait` gave None). The cause is not known (see the notes of
    // 2026-12-02). A second connection must answer, and the first failure is printed.
    let health = c.call("health", json!({})).or_else(|e| {
        // What the daemon holds open then (the listener among them or not; a descriptor closed
        // twice elsewhere once took a socket's number), and whether the socket file is there.
        let fds: Vec<String> = std::fs::read_dir(format!("/proc/{}/fd", child.id()))
            .into_iter()
            .flatten()
            .flatten()
            .map(|f| format!("{}→{:?}", f.file_name().to_string_lossy(), std::fs::read_link(f.path()).ok()))
            .collect();
        eprintln!(
            "first health call failed: {e}; the daemon: {:?}; socket file there: {}; its descriptors: {fds:?}; trying a new connection",
            child.try_wait(),
            socket.exists()
        );
        recalld::client::Client::connect(&socket)
            .unwrap()
            .call("health", json!({}))
    });
    let health = health.unwrap_or_else(|e| {
        std::thread::sleep(std::time::Duration::from_millis(200));
        panic!("health: {e}; the daemon: {:?}", child.try_wait())
    });
    assert_eq!(health["status"], "ok");
    child.kill().unwrap();
    child.wait().unwrap();
}

#[test]
fn sigterm_exits_cleanly_and_data_survives_a_restart() {
    let mut d = Daemon::start();
    let mut c = d.client();
    c.call(
        "decorate",
        json!({"memory": "keep", "request": chat(json!([{"role": "user", "content": "remember me"}]))}),
    )
    .unwrap();
    drop(c);
    assert_eq!(d.stop(), Some(0));
    assert!(!d.socket.exists(), "socket file removed on exit");
    d.spawn(&[]);
    let export = d.client().call("export", json!({"memory": "keep"})).unwrap();
    assert_eq!(export["messages"][0]["message"]["content"], "remember me");
}

#[test]
fn unknown_config_keys_are_refused_at_start() {
    let dir = tempfile::tempdir().unwrap();
    let cfg = dir.path().join("bad.toml");
    std::fs::write(&cfg, "max_frame_byte = 10\n").unwrap();
    let out = std::process::Command::new(util::bin())
        .args([
            "serve",
            "--config",
            cfg.to_str().unwrap(),
            "--socket",
            dir.path().join("s").to_str().unwrap(),
        ])
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(2));
    assert!(String::from_utf8_lossy(&out.stderr).contains("max_frame_byte"));
}

#[test]
fn stats_count_requests_and_stored_messages() {
    let d = Daemon::start();
    let mut c = d.client();
    c.call(
        "decorate",
        json!({"memory": "s", "request": chat(json!([{"role": "user", "content": "hi"}]))}),
    )
    .unwrap();
    let stats = c.call("stats", json!({})).unwrap();
    assert_eq!(stats["memories"], 1);
    assert_eq!(stats["messages"], 1);
    assert!(stats["server"]["requests_total"].as_u64().unwrap() >= 2);
}

#[test]
fn provider_side_history_is_detected_and_left_as_sent() {
    let d = Daemon::start();
    let mut c = d.client();
    let req = json!({"model": "gpt-4.1", "previous_response_id": "resp_1",
        "input": [{"role": "user", "content": "and then?"}]});
    let r = c
        .call("decorate", json!({"memory": "p", "request": req.clone()}))
        .unwrap();
    assert_eq!(r["info"]["provider_history"], "previous_response_id");
    assert_eq!(r["request"], req);
    let req2 = json!({"model": "gpt-4.1", "previous_response_id": "resp_2",
        "input": [{"role": "user", "content": "next"}]});
    let r2 = c
        .call("decorate", json!({"memory": "p", "request": req2.clone()}))
        .unwrap();
    assert_eq!(
        r2["request"], req2,
        "earlier stored turns are not re-sent: the provider has them"
    );
}

#[test]
fn instructions_are_kept_with_every_version_in_export() {
    let d = Daemon::start();
    let mut c = d.client();
    let u = json!({"role": "user", "content": "hi"});
    c.call(
        "decorate",
        json!({"memory": "i", "request": chat(json!([{"role": "system", "content": "v1"}, u]))}),
    )
    .unwrap();
    c.call(
        "decorate",
        json!({"memory": "i", "request": chat(json!([{"role": "system", "content": "v1"}, u]))}),
    )
    .unwrap();
    c.call(
        "decorate",
        json!({"memory": "i", "request": chat(json!([{"role": "system", "content": "v2"}, u]))}),
    )
    .unwrap();
    let export = c.call("export", json!({"memory": "i"})).unwrap();
    let versions = export["record"]["instructions"].as_array().unwrap();
    assert_eq!(versions.len(), 2);
    assert_eq!(versions[0]["raw"][0]["content"], "v1");
    assert_eq!(versions[1]["raw"][0]["content"], "v2");
}

#[test]
fn the_providers_token_count_corrects_our_estimate_and_implausible_ones_are_ignored() {
    let d = Daemon::start();
    let mut c = d.client();
    let mut history =
        vec![json!({"role": "user", "content": "Summarise the quarterly numbers for the board, please."})];
    let reply_with = |prompt_tokens: u64, text: &str| {
        json!({"id": "r", "object": "chat.completion", "model": "gpt-4o",
            "choices": [{"index": 0, "finish_reason": "stop", "message": {"role": "assistant", "content": text}}],
            "usage": {"prompt_tokens": prompt_tokens, "completion_tokens": 5, "total_tokens": prompt_tokens + 5}})
    };
    let out = c
        .call("decorate", json!({"memory": "ratio", "request": chat(json!(history))}))
        .unwrap();
    assert!(out["info"]["ratio"].is_null(), "no ratio before any reply");
    let estimate = out["info"]["request_tokens"].as_u64().unwrap();
    let ours = (estimate as f64 * 1.25).round() as u64;
    c.call(
        "report",
        json!({"memory": "ratio", "response": reply_with(ours, "Revenue grew 4%.")}),
    )
    .unwrap();
    history.push(json!({"role": "assistant", "content": "Revenue grew 4%."}));
    history.push(json!({"role": "user", "content": "And costs?"}));
    let out = c
        .call("decorate", json!({"memory": "ratio", "request": chat(json!(history))}))
        .unwrap();
    let ratio = out["info"]["ratio"].as_f64().unwrap();
    assert!((ratio - ours as f64 / estimate as f64).abs() < 1e-9, "ratio {ratio}");
    // A reply whose count is far off (e.g. reported out of order) is not learned from.
    c.call("report", json!({"memory": "ratio", "response": reply_with(out["info"]["request_tokens"].as_u64().unwrap() * 10, "Flat.")})).unwrap();
    history.push(json!({"role": "assistant", "content": "Flat."}));
    history.push(json!({"role": "user", "content": "Thanks."}));
    let out = c
        .call("decorate", json!({"memory": "ratio", "request": chat(json!(history))}))
        .unwrap();
    assert_eq!(out["info"]["ratio"].as_f64().unwrap(), ratio);
}
