//! `quiet`: waits until one memory's background jobs are done, scoped to that memory, bounded
//! by its timeout; over the socket it answers `{"jobs": n}`.

use crate::util;

use std::sync::Arc;
use std::time::{Duration, Instant};

use recalld::engine::{Engine, EngineConfig};
use recalld::lanes::Lanes;
use recalld::store::{Store, StoreOptions};
use recalld_protocol::ops::{DecorateArgs, HistoryMode, ReportArgs};
use serde_json::{json, Value};
use util::{code, Daemon};

fn reply(text: &str) -> Value {
    json!({"id": "r", "object": "chat.completion", "model": "gpt-4o",
        "choices": [{"index": 0, "finish_reason": "stop", "message": {"role": "assistant", "content": text}}]})
}

/// Enough history for report to queue background cuts (small episodes).
fn queue_jobs(engine: &Engine, memory: &str) {
    let long = "the deploy pipeline needs the staging database credentials rotated before friday ".repeat(4);
    for turn in 0..4 {
        let user = json!({"role": "user", "content": format!("turn {turn}: {long}")});
        engine
            .decorate(DecorateArgs {
                now: Some(1000.0 + turn as f64 * 10.0),
                history: HistoryMode::Delta,
                ..DecorateArgs::new(memory, json!({"model": "gpt-4o", "messages": [user]}))
            })
            .unwrap();
        engine
            .report(ReportArgs {
                memory: memory.into(),
                response: reply(&format!("done with turn {turn}: {long}")),
                now: Some(1005.0 + turn as f64 * 10.0),
            })
            .unwrap();
    }
}

fn jobs(v: Value) -> u64 {
    v["jobs"].as_u64().unwrap()
}

#[test]
fn quiet_times_out_with_jobs_left_then_returns_zero_once_the_lane_ran() {
    let dir = tempfile::tempdir().unwrap();
    let store = Arc::new(Store::open(dir.path(), &StoreOptions::default()).unwrap());
    let config = EngineConfig {
        max_episode_tokens: 64,
        ..EngineConfig::default()
    };
    let engine = Arc::new(Engine::new(store, None, config));
    queue_jobs(&engine, "lane");
    // No lane runs yet: the jobs stay, and quiet gives up at its timeout.
    let t = Instant::now();
    let left = jobs(engine.quiet("lane", 150).unwrap());
    assert!(left >= 1, "report queued background work");
    assert!(
        t.elapsed() >= Duration::from_millis(150),
        "quiet returned before its timeout"
    );
    assert!(t.elapsed() < Duration::from_secs(5));
    // Scoped to the memory: another memory (even a prefix of the name) is quiet at once.
    for other in ["lan", "lane2", "never-seen"] {
        assert_eq!(jobs(engine.quiet(other, 10_000).unwrap()), 0, "{other}");
    }
    let lanes = Lanes::start(engine.clone(), 1, 0);
    assert_eq!(jobs(engine.quiet("lane", 30_000).unwrap()), 0);
    assert_eq!(engine.pending_jobs().unwrap().1, 0, "quiet said 0 while jobs were left");
    lanes.stop();
    assert!(
        engine.quiet("lane", 10_000_000).is_err(),
        "an absurd timeout is refused"
    );
}

#[test]
fn quiet_over_the_socket() {
    let d = Daemon::start();
    let mut c = d.client();
    let hello = c.call("hello", json!({})).unwrap();
    assert!(hello["capabilities"].as_array().unwrap().iter().any(|v| v == "quiet"));
    assert_eq!(c.quiet("nothing-here", 1_000).unwrap(), 0);
    let ok = c.call("quiet", json!({"memory": "m"})).unwrap();
    assert_eq!(ok, json!({"jobs": 0, "parked": 0}));
    assert_eq!(code(c.call("quiet", json!({"memory": ""}))), "invalid_argument");
    assert_eq!(
        code(c.call("quiet", json!({"memory": "m", "timeout_ms": -1}))),
        "invalid_argument"
    );
    assert_eq!(
        code(c.call("quiet", json!({"memory": "m", "timeout_ms": 700_000}))),
        "invalid_argument"
    );
}
