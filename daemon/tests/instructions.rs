//! The client's instructions are kept version by version, out of the memory record that every op
//! rewrites: an agent whose system prompt changes at every call (a clock, a task list) must not
//! make each later op write all its earlier prompts again. Export lists every version, import
//! restores them, and a version is new only when it differs from the latest.

use std::sync::Arc;

use recalld::engine::{Engine, EngineConfig};
use recalld::store::{keys, Store, StoreOptions, Table};
use recalld_protocol::ops::{DecorateArgs, HistoryMode, ReportArgs};
use serde_json::{json, Value};

/// A long policy with a clock at its end, as agents' system prompts often are.
fn system(minute: u32) -> String {
    format!(
        "{}The time is 12:{minute:02}.",
        "Follow the airline's policy on changes, refunds and baggage. ".repeat(80)
    )
}

fn turn(engine: &Engine, memory: &str, prompt: &str, n: u32) {
    let now = 1_700_000_000.0 + f64::from(n) * 60.0;
    engine
        .decorate(DecorateArgs {
            now: Some(now),
            ceiling: Some(16_000),
            history: HistoryMode::Delta,
            ..DecorateArgs::new(
                memory,
                json!({"model": "gpt-4o", "messages": [
                {"role": "system", "content": prompt},
                {"role": "user", "content": format!("Question {n}: is flight {n} on time?")}]}),
            )
        })
        .unwrap();
    let reply = json!({"id": "r", "object": "chat.completion", "model": "gpt-4o",
        "choices": [{"index": 0, "finish_reason": "stop",
            "message": {"role": "assistant", "content": format!("Flight {n} is on time.")}}]});
    engine
        .report(ReportArgs {
            memory: memory.into(),
            response: reply,
            now: Some(now + 5.0),
        })
        .unwrap();
}

fn record_bytes(store: &Store, memory: &str) -> usize {
    let record: Value = store
        .read(|r| r.get(Table::Memories, &keys::memory(memory)))
        .unwrap()
        .unwrap();
    record.to_string().len()
}

fn versions(export: &Value) -> Vec<String> {
    export["record"]["instructions"]
        .as_array()
        .unwrap()
        .iter()
        .map(|v| v["raw"][0]["content"].as_str().unwrap().to_owned())
        .collect()
}

#[test]
fn instructions_are_kept_by_version_outside_the_record_and_survive_export_and_import() {
    let dir = tempfile::tempdir().unwrap();
    let store = Arc::new(Store::open(dir.path(), &StoreOptions::default()).unwrap());
    let engine = Engine::new(store.clone(), None, EngineConfig::default());
    // A new prompt every other call, the same one in between.
    for n in 0..30 {
        turn(&engine, "clock", &system(n / 2), n);
    }
    let prompt = system(0);
    assert!(prompt.len() > 4_000);
    // The record stays the size of its counters, not of 15 prompts of 4 KB.
    let bytes = record_bytes(&store, "clock");
    assert!(bytes < 2_000, "the memory record holds {bytes} bytes");

    let export = engine.export("clock").unwrap();
    let expected: Vec<String> = (0..15).map(system).collect();
    assert_eq!(versions(&export), expected);
    assert!(export["record"].get("instructions_stored").is_none());

    // Imported, the versions are the same, and the latest is not added again.
    engine.import("copy", &export).unwrap();
    assert_eq!(versions(&engine.export("copy").unwrap()), expected);
    turn(&engine, "copy", &system(14), 30);
    assert_eq!(versions(&engine.export("copy").unwrap()), expected);
    // An earlier prompt coming back is a new version.
    turn(&engine, "copy", &system(3), 31);
    let mut more = expected.clone();
    more.push(system(3));
    assert_eq!(versions(&engine.export("copy").unwrap()), more);
    assert!(record_bytes(&store, "copy") < 2_000);

    // A restart reads the latest version from the store: the same prompt is not new.
    drop(engine);
    let engine = Engine::new(store.clone(), None, EngineConfig::default());
    turn(&engine, "clock", &system(14), 30);
    assert_eq!(versions(&engine.export("clock").unwrap()), expected);

    // Forgetting a memory takes its versions too, and only its own.
    engine.forget("clock").unwrap();
    let left = |memory: &str| {
        store
            .read(|r| r.count(Table::Instructions, &keys::memory_prefix(memory)))
            .unwrap()
    };
    assert_eq!(left("clock"), 0);
    assert_eq!(left("copy"), 16);
}
