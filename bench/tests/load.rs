//! The load mode on a tiny setting through the debug daemon (`$RECALLD_BIN`, else
//! `target/debug/recalld`): two hand-made agent traces with tool calls, 2 clients, 2 memories,
//! a few dozen messages, a ceiling small enough that episodes fade and note asks are answered.

use crate::common;

use std::time::Duration;

use recalld_bench::load::{self, LoadOptions};
use serde_json::{json, Value};

/// A trace in the file's shape: a user asks about a booking, the agent looks it up with a tool.
fn trace(id: &str, who: &str, turns: usize) -> Value {
    let mut messages = vec![json!({"role": "system", "content": "You are an airline agent. Be brief."})];
    for t in 0..turns {
        let call = format!("call_{t}");
        messages.push(json!({"role": "user", "content": format!("I am {who}; what is the status of reservation R{t}X{}? Thanks.", t * 7)}));
        messages.push(
            json!({"role": "assistant", "content": null, "tool_calls": [{"id": call, "type": "function",
            "function": {"name": "get_reservation", "arguments": format!("{{\"id\":\"R{t}X\"}}")}}]}),
        );
        messages.push(json!({"role": "tool", "tool_call_id": call, "content": format!("{{\"id\":\"R{t}X\",\"status\":\"confirmed\",\"flight\":\"HAT{}\",\"seat\":\"{}A\"}}", 100 + t, t + 1)}));
        messages.push(json!({"role": "assistant", "content": format!("Reservation R{t}X is confirmed on flight HAT{}, seat {}A.", 100 + t, t + 1)}));
    }
    json!({"id": id, "source": "test", "messages": messages, "tools": [{"type": "function", "function": {
        "name": "get_reservation", "description": "Look up a reservation.",
        "parameters": {"type": "object", "properties": {"id": {"type": "string"}}, "required": ["id"]}}}]})
}

fn options(dir: &std::path::Path) -> LoadOptions {
    let traces = dir.join("traces.jsonl");
    let lines = [trace("a", "Ann Lee", 4), trace("b", "Bo Chen", 3)]
        .map(|t| t.to_string())
        .join("\n");
    std::fs::write(&traces, lines).unwrap();
    LoadOptions {
        recalld: common::recalld_bin(),
        traces,
        clients: 2,
        memories: 2,
        messages: 30,
        ceiling: 600,
        engine: Vec::new(),
        poll: Duration::from_millis(100),
        floor_samples: 20,
        // The debug daemon judges slowly: what is left after 2 s is reported, not waited for.
        drain_timeout: Duration::from_secs(2),
        cost: false,
        // The model's time is slept between decorate and report.
        think: Duration::from_millis(5),
        paced: 6,
    }
}

#[test]
fn the_cost_run_counts_every_model_call_at_the_endpoint_and_the_built_in_run_makes_none() {
    let dir = tempfile::tempdir().unwrap();
    let o = LoadOptions {
        cost: true,
        drain_timeout: Duration::from_secs(30),
        ..options(dir.path())
    };
    let r = load::run(&o, &mut |line| eprintln!("{line}")).unwrap();
    eprintln!("{}", r.markdown("(test)"));
    assert_eq!(r.errors, 0, "{:?}", r.error_examples);
    let c = &r.cost;
    assert!(c.daemon.embed_calls > 0 && c.daemon.judge_calls > 0, "{c:?}");
    assert_eq!(c.daemon.errors, 0, "{c:?}");
    // Every call the daemon counted reached the endpoint, once (no retries against a healthy
    // endpoint), and the endpoint's tokens are what the daemon read from the replies.
    let calls = |prefix: &str| {
        c.endpoint
            .iter()
            .filter(|(k, _)| k.starts_with(prefix))
            .map(|(_, v)| v.calls)
            .sum::<u64>()
    };
    assert_eq!(calls("embeddings"), c.daemon.embed_calls, "{c:?}");
    assert_eq!(calls("chat/completions"), c.daemon.judge_calls, "{c:?}");
    assert_eq!(c.external_calls, c.daemon.embed_calls + c.daemon.judge_calls);
    assert!(c.calls_per_turn > 0.0 && c.tokens_per_turn > 0.0);
    // A unit's text is judged again (as context of the next units, against facts): the cache
    // answers it, and those texts never reached the endpoint.
    assert!(
        c.embed_cache.hits > 0 && c.embed_cache.misses > 0,
        "{:?}",
        c.embed_cache
    );
    assert!(r
        .markdown("x")
        .contains("The counting endpoint, per path and judge task"));
    // Drained, so the paced phase ran: each turn waited for its memory's lane, then decorated
    // and reported.
    assert_eq!(r.lanes.jobs_left, 0, "{:?}", r.lanes);
    let p = r.paced.as_ref().expect("the paced phase runs once the lanes drained");
    assert_eq!(p.turns, 6);
    assert_eq!(p.decorate_without_recall.n + p.decorate_with_recall.n, 6, "{p:?}");
    assert_eq!((p.report.n, p.lane_wait.n), (6, 6), "{p:?}");
    assert!(p.errors.is_empty(), "{:?}", p.errors);
    assert!(r.markdown("x").contains("| paced: report | "));
}

#[test]
fn a_tiny_load_run_reports_sane_figures() {
    let dir = tempfile::tempdir().unwrap();
    let o = options(dir.path());
    let r = load::run(&o, &mut |line| eprintln!("{line}")).unwrap();
    eprintln!("{}", r.markdown("(test)"));
    assert_eq!(r.errors, 0, "{:?}", r.error_examples);
    assert_eq!((r.clients, r.memories), (2, 2));
    assert!(r.pairs > 0 && r.pairs_per_s > 0.0);
    assert_eq!(r.decorate.n as u64, r.pairs);
    assert_eq!(r.report.n as u64, r.pairs);
    for l in [&r.decorate, &r.report, &r.ping] {
        assert!(
            l.n > 0 && l.p50_ms > 0.0 && l.p99_ms >= l.p50_ms && l.max_ms >= l.p99_ms,
            "{l:?}"
        );
    }
    assert!(r.ratio_p50 > 0.0 && r.ratio_p99 > 0.0, "decorate ÷ ping present");
    // Two memories of at least 30 messages each, as the agents count them and as stored.
    assert!(r.storage.messages_sent >= 60, "{:?}", r.storage);
    assert!(r.storage.messages_stored >= r.storage.messages_sent);
    assert!(r.storage.data_dir_bytes > 0 && r.storage.bytes_per_message > 0.0);
    assert!(r.storage.raw_bytes_per_message > 0.0);
    assert!(r.note_asks > 0, "a 600-token ceiling makes episodes leave");
    assert!(!r.lanes.samples.is_empty());
    assert!(r.rss_max_kb.is_some_and(|kb| kb > 0));
    assert!(r.cold_start.hello_ms > 0.0 && r.cold_start.first_decorate_ms > 0.0);
    // The built-in models: no call leaves the machine.
    assert_eq!(r.cost.external_calls, 0);
    assert_eq!(r.cost.provider, "built-in");
    let md = r.markdown("recalld-bench load --clients 2");
    assert!(md.contains("recalld-bench load --clients 2") && md.contains("decorate ÷ ping"));
    // The paced phase ran when the lanes drained in time, and says why not otherwise.
    match (&r.paced, &r.paced_skipped) {
        (Some(p), None) => assert_eq!((r.lanes.jobs_left, p.report.n), (0, 6), "{p:?}"),
        (None, Some(why)) => {
            assert!(r.lanes.jobs_left > 0 && why.contains("did not drain"), "{why}");
            assert!(md.contains(why.as_str()));
        }
        other => panic!("{other:?}"),
    }
}
