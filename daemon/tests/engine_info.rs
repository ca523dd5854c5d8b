//! decorate's `info` stays the size of what is in view: every episode in view is listed, and of
//! those out of view only the latest `INFO_PAST_EPISODES` (the rest are counted); `export`
//! still lists every one.

use std::sync::Arc;

use recalld::engine::{Engine, EngineConfig, INFO_PAST_EPISODES};
use recalld::store::{Store, StoreOptions};
use recalld_protocol::ops::{DecorateArgs, HistoryMode, ReportArgs};
use serde_json::{json, Value};

#[test]
fn info_lists_the_episodes_in_view_and_only_the_latest_out_of_it() {
    let dir = tempfile::tempdir().unwrap();
    let store = Arc::new(Store::open(dir.path(), &StoreOptions::default()).unwrap());
    // Small episodes, a small ceiling: nearly every turn becomes an episode that leaves the view.
    let config = EngineConfig {
        max_episode_tokens: 60,
        ..EngineConfig::default()
    };
    let engine = Engine::new(store, None, config);
    let decorate = |turn: usize, now: f64| -> Value {
        let user = json!({"role": "user", "content": format!("Turn {turn}: what is the status of parcel {turn} and where is it now?")});
        engine
            .decorate(DecorateArgs {
                now: Some(now),
                ceiling: Some(700),
                history: HistoryMode::Delta,
                ..DecorateArgs::new("i", json!({"model": "gpt-4o", "messages": [user]}))
            })
            .unwrap()
            .info
    };
    let mut now = 1_700_000_000.0;
    for turn in 0..160 {
        let info = decorate(turn, now);
        let mut calls = Vec::new();
        if info["note_ask"] == true {
            calls.push(json!({"id": format!("n{turn}"), "type": "function", "function": {"name": "note",
                "arguments": json!({"notes": [{"note": format!("Parcel {turn} was asked about."), "subject": "user", "object": format!("parcel {turn}"), "milestone": false}]}).to_string()}}));
        }
        let message = if calls.is_empty() {
            json!({"role": "assistant", "content": format!("Parcel {turn} is in the depot.")})
        } else {
            json!({"role": "assistant", "content": format!("Parcel {turn} is in the depot."), "tool_calls": calls})
        };
        let reply = json!({"id": "r", "object": "chat.completion", "model": "gpt-4o",
            "choices": [{"index": 0, "finish_reason": "stop", "message": message}]});
        engine
            .report(ReportArgs {
                memory: "i".into(),
                response: reply,
                now: Some(now + 5.0),
            })
            .unwrap();
        while engine.run_next_job("i").unwrap() {}
        now += 60.0;
    }
    let info = decorate(160, now);
    let all = engine.export("i").unwrap()["episodes"].as_array().unwrap().clone();
    let in_view = |state: &Value| state == "live" || state == "leaving";
    let out_of_view = |episodes: &[Value]| -> Vec<u64> {
        episodes
            .iter()
            .filter(|e| !in_view(&e["state"]))
            .map(|e| e["n"].as_u64().unwrap())
            .collect()
    };
    let past = out_of_view(&all);
    assert!(
        past.len() > INFO_PAST_EPISODES + 10,
        "the conversation left {} episodes out of view",
        past.len()
    );

    let listed = info["episodes"].as_array().unwrap();
    let listed_ns: Vec<u64> = listed.iter().map(|e| e["n"].as_u64().unwrap()).collect();
    let listed_past = out_of_view(listed);
    assert_eq!(
        listed_past,
        past[past.len() - INFO_PAST_EPISODES..],
        "the latest out of view, in order"
    );
    assert_eq!(info["episodes_omitted"], (past.len() - INFO_PAST_EPISODES) as u64);
    // Every episode in view is listed, and the list is in order.
    for e in all.iter().filter(|e| in_view(&e["state"])) {
        assert!(listed_ns.contains(&e["n"].as_u64().unwrap()), "episode {e} is in view");
    }
    assert!(listed_ns.windows(2).all(|w| w[0] < w[1]), "{listed_ns:?}");
}
