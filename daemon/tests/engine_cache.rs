//! The engine keeps recently used memories' states between ops. That cache must be invisible:
//! the same conversation run through one long-lived engine and through a new engine for every
//! op (always loading from the store) stores exactly the same thing and returns the same
//! requests, whether the client resends its whole history or what the last request held (a
//! state loads only what can be in view and the recent turns, and reads older history when an
//! op needs it).

use std::sync::Arc;

use recalld::engine::records::MemoryRecord;
use recalld::engine::{Engine, EngineConfig};
use recalld::store::{keys, Read, Store, StoreOptions, Table};
use recalld_protocol::ops::{DecorateArgs, DecorateReply, ReportArgs};
use serde_json::{json, Value};

/// The requests, the export, and what each decorate's alignment read (`info.aligned_on`).
fn run(fresh_engine_per_op: bool, turns: usize, resend_view: bool) -> (Vec<Value>, Value, Vec<String>) {
    let (requests, export, aligned_on, _) = run_in(fresh_engine_per_op, turns, resend_view);
    (requests, export, aligned_on)
}

fn config() -> EngineConfig {
    EngineConfig {
        max_episode_tokens: 200,
        ..EngineConfig::default()
    }
}

/// [`run`], also returning the data directory (the store closed).
fn run_in(
    fresh_engine_per_op: bool,
    turns: usize,
    resend_view: bool,
) -> (Vec<Value>, Value, Vec<String>, tempfile::TempDir) {
    let dir = tempfile::tempdir().unwrap();
    let store = Arc::new(Store::open(dir.path(), &StoreOptions::default()).unwrap());
    let config = config();
    let shared = Engine::new(store.clone(), None, config.clone());
    let fresh = || Engine::new(store.clone(), None, config.clone());
    let mut requests = Vec::new();
    let mut aligned_on = Vec::new();
    let mut history = vec![json!({"role": "system", "content": "You are terse."})];
    let mut now = 1_700_000_000.0;
    for turn in 0..turns {
        history.push(json!({"role": "user", "content": format!("Turn {turn}: check order #{turn}00 and tell me its shipping status, carrier and tracking number please.")}));
        let e_decorate = if fresh_engine_per_op {
            fresh()
        } else {
            Engine::new(store.clone(), None, config.clone())
        };
        let engine = if fresh_engine_per_op { &e_decorate } else { &shared };
        let out = decorate_full(engine, json!(history), now);
        let asked = out.info["note_ask"] == true;
        aligned_on.push(out.info["aligned_on"].as_str().unwrap().to_owned());
        if resend_view {
            // The next call starts from what this request held (our blocks are recognised
            // and left out when it comes back).
            history = out.request["messages"].as_array().unwrap().clone();
        }
        requests.push(out.request);
        now += 20.0;
        let mut calls = vec![
            json!({"id": format!("t{turn}"), "type": "function", "function": {"name": "lookup", "arguments": format!("{{\"order\":{turn}00}}")}}),
        ];
        if asked {
            calls.push(json!({"id": format!("n{turn}"), "type": "function", "function": {"name": "note",
                "arguments": json!({"notes": [{"note": format!("Order #{turn}00 was looked up."), "subject": "user", "object": format!("order #{turn}00"), "milestone": false}]}).to_string()}}));
        }
        let reply = json!({"id": "r", "object": "chat.completion", "model": "gpt-4o",
            "choices": [{"index": 0, "finish_reason": "tool_calls", "message": {"role": "assistant", "content": null, "tool_calls": calls}}],
            "usage": {"prompt_tokens": 800, "completion_tokens": 20, "total_tokens": 820}});
        let e_report = fresh();
        let engine = if fresh_engine_per_op { &e_report } else { &shared };
        let r = engine
            .report(ReportArgs {
                memory: "c".into(),
                response: reply,
                now: Some(now),
            })
            .unwrap();
        while engine.run_next_job("c").unwrap() {}
        history.push(r.response["choices"][0]["message"].clone());
        history.push(json!({"role": "tool", "tool_call_id": format!("t{turn}"), "content": format!("order #{turn}00: shipped with DHL, tracking JD0146{turn:04}")}));
        now += 20.0;
    }
    let export = fresh().export("c").unwrap();
    drop(shared);
    (requests, export, aligned_on, dir)
}

/// One decorate of `messages` (the whole history, as the client has it) in memory "c".
fn decorate_full(engine: &Engine, messages: Value, now: f64) -> DecorateReply {
    decorate_in(engine, "c", messages, now)
}

/// One decorate of `messages` (the whole history) in `memory`.
fn decorate_in(engine: &Engine, memory: &str, messages: Value, now: f64) -> DecorateReply {
    engine
        .decorate(DecorateArgs {
            now: Some(now),
            ceiling: Some(900),
            ..DecorateArgs::new(memory, json!({"model": "gpt-4o", "messages": messages}))
        })
        .unwrap()
}

/// A new session in a long memory shares nothing with it: the index of the history's
/// fingerprints says so and nothing older is read. A request that starts at an old message (an
/// edit of old history) still reads the whole history, and supersedes what followed. A memory
/// stored before the index reads the whole history once, and its prints are written then.
#[test]
fn a_new_session_is_lined_up_by_the_prints_and_an_edit_of_old_history_by_the_whole() {
    let (_, _, _, dir) = run_in(false, 40, false);
    let store = Arc::new(Store::open(dir.path(), &StoreOptions::default()).unwrap());
    let engine = Engine::new(store.clone(), None, config());
    let prints = || {
        store
            .read(|r| r.count(Table::Prints, &keys::memory_prefix("c")))
            .unwrap()
    };
    let now = 1_800_000_000.0;
    let session =
        |text: &str| json!([{"role": "system", "content": "You are terse."}, {"role": "user", "content": text}]);

    let info = decorate_full(&engine, session("A new session: which carriers ship to Oslo?"), now).info;
    assert_eq!(
        (info["aligned"].as_str(), info["aligned_on"].as_str()),
        (Some("unrelated"), Some("prints")),
        "{info:#}"
    );

    let edit = json!([
        {"role": "system", "content": "You are terse."},
        {"role": "user", "content": "Turn 0: check order #000 and tell me its shipping status, carrier and tracking number please."},
        {"role": "user", "content": "Actually, forget that order."}
    ]);
    let info = decorate_full(&engine, edit, now + 60.0).info;
    assert_eq!(
        (info["aligned"].as_str(), info["aligned_on"].as_str()),
        (Some("edit"), Some("whole")),
        "{info:#}"
    );
    let export = engine.export("c").unwrap();
    let messages = export["messages"].as_array().unwrap();
    let superseded = messages.iter().filter(|m| !m["superseded_at"].is_null()).count();
    assert!(
        superseded > 100,
        "everything after the first user message: {superseded}"
    );
    assert_eq!(
        messages
            .iter()
            .filter(|m| m["superseded_at"].is_null() && m["role"] == "user")
            .count(),
        2,
        "turn 0 and the edit"
    );
    assert_eq!(prints(), 2, "a superseded message's print is gone");

    // A memory as stored before the prints: no prints, and the record does not claim them.
    drop(engine);
    store
        .write(|w| {
            let key = keys::memory("c");
            let mut record: MemoryRecord = Read::get(w, Table::Memories, &key)?.unwrap();
            record.prints_whole = false;
            w.put(Table::Memories, &key, &record)?;
            w.delete_prefix(Table::Prints, &keys::memory_prefix("c"))
        })
        .unwrap();
    assert_eq!(prints(), 0);
    let engine = Engine::new(store.clone(), None, config());
    let info = decorate_full(&engine, session("Another session: and to Bergen?"), now + 120.0).info;
    assert_eq!(info["aligned_on"], "whole", "no prints yet: {info:#}");
    // Turn 0, the edit and this session's message: the active history (superseded messages
    // have no print).
    assert_eq!(prints(), 3, "every history message's print written at the whole read");
    drop(engine);
    let engine = Engine::new(store.clone(), None, config());
    let info = decorate_full(&engine, session("A third session: and to Tromsø?"), now + 180.0).info;
    assert_eq!(info["aligned_on"], "prints", "written at the whole read: {info:#}");
}

#[test]
fn cached_states_behave_exactly_like_states_loaded_from_the_store() {
    same_either_way(14, false);
}

/// Past the recent turns the budget measures, sealed history is no longer loaded with the state.
#[test]
fn a_client_resending_what_it_was_sent_aligns_on_the_loaded_history_alone() {
    let read = same_either_way(40, true);
    assert!(read.iter().all(|r| r == "loaded"), "{read:?}");
}

/// A full resend is lined up by the chain of the first loaded message, without reading the
/// older messages; the result is what aligning on the whole history gives.
#[test]
fn a_client_resending_everything_from_the_start_is_lined_up_by_the_chain() {
    let read = same_either_way(40, false);
    assert!(read.iter().all(|r| r != "whole"), "{read:?}");
    // Once the recent turns the state loads no longer reach back to the first message.
    assert!(read[30..].iter().all(|r| r == "chain"), "{read:?}");
}

/// What each decorate's alignment read, with a new engine for every op.
fn same_either_way(turns: usize, resend_view: bool) -> Vec<String> {
    let (cached_requests, mut cached_export, _) = run(false, turns, resend_view);
    let (fresh_requests, mut fresh_export, read) = run(true, turns, resend_view);
    // Decisions keep how long recall's steps took: measurements, not state.
    for export in [&mut cached_export, &mut fresh_export] {
        for d in export["decisions"].as_array_mut().unwrap() {
            if let Some(recall) = d["recall"].as_object_mut() {
                recall.remove("ms");
            }
        }
    }
    // Every request lined up with what was stored: nothing superseded, nothing stored twice.
    let messages = cached_export["messages"].as_array().unwrap();
    assert!(messages.iter().all(|m| m["superseded_at"].is_null()));
    let users = messages.iter().filter(|m| m["role"] == "user").count();
    assert_eq!(users, turns);
    assert_eq!(cached_requests, fresh_requests);
    assert_eq!(cached_export, fresh_export);
    let states: Vec<&str> = cached_export["episodes"]
        .as_array()
        .unwrap()
        .iter()
        .map(|e| e["state"].as_str().unwrap())
        .collect();
    assert!(
        states.contains(&"sealed") || states.contains(&"forgotten"),
        "the script reaches sealing: {states:?}"
    );
    read
}

/// The cache keeps the most recently used states within both of its bounds, the number of
/// memories and their estimated heap (`stats.state_cache`); the least recently used leaves
/// first, and what it leaves is loaded again from the store, the same.
#[test]
fn the_state_cache_keeps_the_latest_states_within_its_memories_and_its_bytes() {
    let dir = tempfile::tempdir().unwrap();
    let store = Arc::new(Store::open(dir.path(), &StoreOptions::default()).unwrap());
    let decorate = |engine: &Engine, memory: &str, now: f64| {
        let messages = json!([{"role": "user",
            "content": "Where is order #4410? It was due on Monday and the tracking page says nothing."}]);
        decorate_in(engine, memory, messages, now).request
    };
    let cache = |engine: &Engine| {
        let s = engine.stats().unwrap()["state_cache"].clone();
        (s["memories"].as_u64().unwrap(), s["bytes"].as_u64().unwrap())
    };
    let memories = ["a", "b", "c"];
    let roomy = Engine::new(store.clone(), None, EngineConfig::default());
    let first: Vec<Value> = memories.iter().map(|m| decorate(&roomy, m, 1_700_000_000.0)).collect();
    let (kept, bytes) = cache(&roomy);
    assert_eq!(kept, 3, "a default cache keeps all three");
    assert!(bytes > 1_000, "each state is counted ({bytes} bytes for three)");

    // Room for two states by bytes: the third memory used sends the first away.
    let by_bytes = Engine::new(
        store.clone(),
        None,
        EngineConfig {
            cached_state_bytes: (bytes * 2 / 3 + bytes / 10) as usize,
            ..EngineConfig::default()
        },
    );
    let again: Vec<Value> = memories
        .iter()
        .map(|m| decorate(&by_bytes, m, 1_700_000_030.0))
        .collect();
    assert_eq!(cache(&by_bytes).0, 2, "two states fit in the bytes");
    assert_eq!(
        again, first,
        "a state loaded from the store decorates as the cached one did"
    );
    // The first memory left; used again, it is loaded again, the same, and the second leaves.
    assert_eq!(decorate(&by_bytes, "a", 1_700_000_045.0), first[0]);
    assert_eq!(cache(&by_bytes).0, 2);

    // Room for one memory: however large, the one just used stays.
    let by_count = Engine::new(
        store.clone(),
        None,
        EngineConfig {
            cached_memories: 1,
            cached_state_bytes: 1,
            ..EngineConfig::default()
        },
    );
    for m in memories {
        decorate(&by_count, m, 1_700_000_060.0);
    }
    assert_eq!(cache(&by_count).0, 1);
}
