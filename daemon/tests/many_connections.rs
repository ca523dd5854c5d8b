//! Many clients at once against the real daemon binary: 200 connections open together, each
//! holding a short conversation (decorate, then report) with 5 of 1,000 memories, all at the
//! same moment. Every call is answered ok, each memory holds exactly its turn, and afterwards
//! `stats` counts 1,000 memories.
//!
//! The daemon has no connection limit (every accepted connection gets its own task; only the
//! requests in flight per connection are bounded, `max_in_flight`), so the defaults serve 200.
//! Recall is off (`[engine] recall = false`): this measures the request path, not the model.

use crate::util;

use std::sync::{Arc, Barrier};
use std::time::{Duration, Instant};

use recalld::client::Client;
use serde_json::json;
use util::Daemon;

const CONNECTIONS: usize = 200;
const MEMORIES: usize = 1_000;
const PER_CONNECTION: usize = MEMORIES / CONNECTIONS;

fn memory(m: usize) -> String {
    format!("agent-{m:04}")
}

fn user_text(m: usize) -> String {
    format!(
        "Hello from agent {m}: please keep in mind that ticket {} is assigned to me.",
        10_000 + m
    )
}

fn reply_text(m: usize) -> String {
    format!("Noted: ticket {} is yours, agent {m}.", 10_000 + m)
}

/// One turn with memory `m`: decorate a small Chat Completions request, report the reply.
/// Returns the ops answered (each call's error, if any, is the test's failure message).
fn turn(c: &mut Client, m: usize) -> Result<usize, String> {
    let memory = memory(m);
    let request = json!({"model": "gpt-4o", "messages": [
        {"role": "system", "content": "You are a helpful assistant."},
        {"role": "user", "content": user_text(m)},
    ]});
    let decorated = c
        .call("decorate", json!({"memory": memory, "request": request}))
        .map_err(|e| format!("decorate {memory}: {e}"))?;
    let messages = decorated["request"]["messages"]
        .as_array()
        .ok_or(format!("decorate {memory}: {decorated}"))?;
    if messages.last().map(|m| &m["content"]) != Some(&json!(user_text(m))) {
        return Err(format!("decorate {memory}: the user message is not last: {decorated}"));
    }
    let response = json!({
        "id": format!("chatcmpl-{m}"), "object": "chat.completion", "model": "gpt-4o",
        "choices": [{"index": 0, "finish_reason": "stop",
                     "message": {"role": "assistant", "content": reply_text(m)}}],
        "usage": {"prompt_tokens": 40, "completion_tokens": 12, "total_tokens": 52},
    });
    let reported = c
        .call("report", json!({"memory": memory, "response": response}))
        .map_err(|e| format!("report {memory}: {e}"))?;
    if reported["response"]["choices"][0]["message"]["content"] != json!(reply_text(m)) {
        return Err(format!("report {memory}: {reported}"));
    }
    Ok(2)
}

#[test]
fn two_hundred_connections_over_a_thousand_memories_all_answered() {
    let d = Daemon::start_with_config("[engine]\nrecall = false\n");
    let socket = d.socket.clone();
    // Every connection is open and has been answered once (so the daemon accepted it) before
    // any starts its conversations; then all go at once.
    let connected = Arc::new(Barrier::new(CONNECTIONS + 1));
    let go = Arc::new(Barrier::new(CONNECTIONS + 1));
    let mut threads = Vec::new();
    for k in 0..CONNECTIONS {
        let (socket, connected, go) = (socket.clone(), connected.clone(), go.clone());
        threads.push(std::thread::spawn(move || -> Result<usize, String> {
            let opened = Client::connect(&socket).map_err(|e| format!("connection {k}: connect: {e}"));
            let hello = opened.and_then(|mut c| {
                c.call("hello", json!({"client": format!("many-{k}")}))
                    .map(|_| c)
                    .map_err(|e| format!("connection {k}: hello: {e}"))
            });
            connected.wait();
            go.wait();
            let mut c = hello?;
            let mut answered = 1;
            for j in 0..PER_CONNECTION {
                answered += turn(&mut c, k * PER_CONNECTION + j)?;
            }
            Ok(answered)
        }));
    }
    connected.wait();
    let mut admin = d.client();
    let open = admin.call("stats", json!({})).unwrap()["server"]["connections_open"]
        .as_u64()
        .unwrap();
    let started = Instant::now();
    go.wait();

    let mut answered = 0;
    let mut failures = Vec::new();
    for t in threads {
        match t.join().expect("a client thread panicked") {
            Ok(n) => answered += n,
            Err(e) => failures.push(e),
        }
    }
    let elapsed = started.elapsed();
    eprintln!(
        "{CONNECTIONS} connections, {MEMORIES} memories: {answered} calls answered in {:.2} s ({:.0} calls/s)",
        elapsed.as_secs_f64(),
        answered as f64 / elapsed.as_secs_f64()
    );
    // Checked only now: a client thread never waits on a barrier the test has left.
    assert_eq!(
        open,
        CONNECTIONS as u64 + 1,
        "all {CONNECTIONS} connections open at once (and this one)"
    );
    assert!(
        failures.is_empty(),
        "{} connections failed, first: {}",
        failures.len(),
        failures[0]
    );
    assert_eq!(answered, CONNECTIONS * (1 + 2 * PER_CONNECTION));
    assert!(elapsed < Duration::from_secs(30), "took {elapsed:?}");

    let stats = admin.call("stats", json!({})).unwrap();
    assert_eq!(stats["memories"], MEMORIES as u64, "{stats}");
    assert_eq!(
        stats["messages"],
        2 * MEMORIES as u64,
        "a user message and its reply per memory (the system message is kept as instructions): {stats}"
    );
    let server = &stats["server"];
    assert_eq!(server["errors_total"], 0, "{server}");
    assert_eq!(server["bad_frames_total"], 0, "{server}");
    assert!(
        server["connections_total"].as_u64().unwrap() > CONNECTIONS as u64,
        "{server}"
    );
    // A few memories read back: each holds its own turn and nothing of another's.
    for m in [0, 1, MEMORIES / 2, MEMORIES - 1] {
        let export = admin.call("export", json!({"memory": memory(m)})).unwrap();
        let instructions = &export["record"]["instructions"];
        assert!(
            instructions.to_string().contains("You are a helpful assistant."),
            "{instructions}"
        );
        let texts: Vec<&str> = export["messages"]
            .as_array()
            .unwrap()
            .iter()
            .filter_map(|x| x["message"]["content"].as_str())
            .collect();
        assert_eq!(texts, [user_text(m), reply_text(m)], "{}", memory(m));
    }
}
