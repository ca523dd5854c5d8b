//! The background lane: jobs queued by report are persisted, run in order off the request
//! path, and resumed by a new engine (a restart) when they were left queued.

use crate::util;

use std::sync::Arc;
use std::time::{Duration, Instant};

use recalld::engine::{Engine, EngineConfig};
use recalld::lanes::Lanes;
use recalld::store::{Store, StoreOptions};
use recalld_protocol::ops::{DecorateArgs, ReportArgs};
use serde_json::{json, Value};

fn chat(messages: &[Value]) -> Value {
    json!({"model": "gpt-4o", "messages": messages})
}

fn reply(text: &str) -> Value {
    json!({"id": "r", "object": "chat.completion", "model": "gpt-4o",
        "choices": [{"index": 0, "finish_reason": "stop", "message": {"role": "assistant", "content": text}}]})
}

fn decorate(engine: &Engine, history: &[Value], now: f64) {
    engine
        .decorate(DecorateArgs {
            now: Some(now),
            ..DecorateArgs::new("lane", chat(history))
        })
        .unwrap();
}

#[test]
fn queued_jobs_survive_a_restart_and_run_in_order() {
    let dir = tempfile::tempdir().unwrap();
    let config = EngineConfig {
        max_episode_tokens: 64,
        ..EngineConfig::default()
    };
    {
        let store = Arc::new(Store::open(dir.path(), &StoreOptions::default()).unwrap());
        let engine = Engine::new(store, None, config.clone());
        let mut history = Vec::new();
        let long = "the deploy pipeline needs the staging database credentials rotated before friday ".repeat(4);
        for turn in 0..4 {
            history.push(json!({"role": "user", "content": format!("turn {turn}: {long}")}));
            decorate(&engine, &history, 1000.0 + turn as f64 * 10.0);
            let text = format!("done with turn {turn}: {long}");
            engine
                .report(ReportArgs {
                    memory: "lane".into(),
                    response: reply(&text),
                    now: Some(1005.0 + turn as f64 * 10.0),
                })
                .unwrap();
            history.push(json!({"role": "assistant", "content": text}));
        }
        let (memories, jobs) = engine.pending_jobs().unwrap();
        assert_eq!(memories, vec!["lane".to_string()]);
        assert!(jobs >= 1, "report queued a cut");
        assert!(
            engine.export("lane").unwrap()["episodes"]
                .as_array()
                .unwrap()
                .is_empty(),
            "nothing ran without a lane"
        );
    } // "crash": the engine goes away with its jobs still queued
    let store = Arc::new(Store::open(dir.path(), &StoreOptions::default()).unwrap());
    let engine = Arc::new(Engine::new(store, None, config));
    let lanes = Lanes::start(engine.clone(), 1, 0);
    let deadline = Instant::now() + Duration::from_secs(30);
    while engine.pending_jobs().unwrap().1 > 0 {
        assert!(Instant::now() < deadline, "queued jobs were not resumed");
        std::thread::sleep(Duration::from_millis(10));
    }
    lanes.stop();
    let export = engine.export("lane").unwrap();
    let episodes = export["episodes"].as_array().unwrap();
    assert!(!episodes.is_empty(), "the resumed cut made episodes");
    // Episodes are contiguous, in order, and never reach the turn in progress.
    let turn = export["record"]["turn"].as_u64().unwrap();
    let mut next = episodes[0]["first_seq"].as_u64().unwrap();
    for e in episodes {
        assert_eq!(e["first_seq"].as_u64().unwrap(), next);
        next = e["last_seq"].as_u64().unwrap() + 1;
        assert!(e["last_turn"].as_u64().unwrap() < turn);
    }
}

#[test]
fn fact_traces_are_written_by_the_lane_through_the_socket() {
    let d = util::Daemon::start();
    let mut c = d.client();
    let mut history: Vec<Value> = vec![json!({"role": "system", "content": "Be brief."})];
    let mut now = 1_767_225_600.0;
    let mut asked = false;
    for turn in 0..30 {
        history.push(json!({"role": "user", "content": format!("Turn {turn}: the invoice INV-{turn} for customer Acme was disputed because the unit price of widget W{turn} changed from 4.50 to 5.25 euros.")}));
        let out = c
            .call(
                "decorate",
                json!({"memory": "t", "request": chat(&history), "now": now, "ceiling": 900}),
            )
            .unwrap();
        now += 30.0;
        if out["info"]["note_ask"] == true {
            let note = json!({"id": "c", "object": "chat.completion", "model": "gpt-4o", "choices": [{"index": 0, "finish_reason": "tool_calls",
                "message": {"role": "assistant", "content": null, "tool_calls": [{"id": format!("n{turn}"), "type": "function",
                "function": {"name": "note", "arguments": json!({"notes": [{"note": "Acme disputed invoice INV-0 over the widget W0 unit price.", "subject": "Acme", "object": "invoice INV-0", "milestone": false}]}).to_string()}}]}}]});
            let r = c
                .call("report", json!({"memory": "t", "response": note, "now": now}))
                .unwrap();
            assert_eq!(r["again"], true);
            asked = true;
            break;
        }
        let text = format!("Noted the dispute on INV-{turn}.");
        c.call("report", json!({"memory": "t", "response": reply(&text), "now": now}))
            .unwrap();
        history.push(json!({"role": "assistant", "content": text}));
        now += 30.0;
    }
    assert!(asked, "a 900-token ceiling asks for a note within 30 turns");
    let deadline = Instant::now() + Duration::from_secs(60);
    while c.call("stats", json!({})).unwrap()["jobs_pending"] != 0 {
        assert!(Instant::now() < deadline, "the lane did not finish");
        std::thread::sleep(Duration::from_millis(10));
    }
    let export = c.call("export", json!({"memory": "t"})).unwrap();
    let fact_traces: Vec<&Value> = export["traces"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|t| t["kind"] == "fact")
        .collect();
    assert!(
        !fact_traces.is_empty(),
        "the new fact was judged against the remembered episodes"
    );
    assert!(
        fact_traces.iter().all(|t| t["at"] == json!(now)),
        "traces carry the note's time"
    );
    assert!(
        fact_traces.iter().any(|t| t["counted"] == true),
        "the fact is about the episodes it was written for"
    );
}
