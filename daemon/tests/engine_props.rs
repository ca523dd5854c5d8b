//! Property tests of the engine, in-process (temp store, no models: cuts by size, facts
//! unscored): random conversations of user messages, assistant tool calls with their outputs
//! and text replies, random sizes, ceilings and time gaps (some over 24 h). The simulated model
//! answers a note ask (the `note` tool in the returned request) with a note call, sometimes
//! alone, sometimes beside a text or another tool call.
//!
//! Invariants, at every decorate: the turn in progress is in the request whole and in no
//! episode; no tool call is separated from its output; the request's estimate is within the
//! ceiling whenever the current turn alone fits; across every op, traces only grow (old ones
//! unchanged) and no stored message is lost or changed (only `superseded_at` may be set once).

use std::collections::BTreeSet;
use std::sync::Arc;

use proptest::prelude::*;
use recalld::engine::{Engine, EngineConfig};
use recalld::store::{Store, StoreOptions};
use recalld_protocol::ops::{DecorateArgs, ReportArgs};
use serde_json::{json, Value};

const WORDS: &[&str] = &[
    "alpha", "beta", "gamma", "delta", "socket", "frame", "index", "queue", "parser", "kernel", "vector", "token",
];

fn words(seed: u64, n: usize) -> String {
    let mut x = seed.wrapping_add(0x9e3779b97f4a7c15);
    (0..n)
        .map(|_| {
            x = x.wrapping_mul(6364136223846793005).wrapping_add(1442695040888963407);
            WORDS[((x >> 33) % WORDS.len() as u64) as usize]
        })
        .collect::<Vec<_>>()
        .join(" ")
}

#[derive(Debug, Clone)]
enum Step {
    /// The model calls `calls` tools; each output has `out` words.
    Tools { calls: usize, out: usize },
    /// The model answers in text of `n` words.
    Text(usize),
}

#[derive(Debug, Clone)]
struct Turn {
    user: usize,
    steps: Vec<Step>,
    /// Seconds before this turn's user message.
    gap: f64,
    /// How the model answers a note ask in this turn: 0 alone, 1 beside its move.
    note_alone: bool,
}

fn step() -> impl Strategy<Value = Step> {
    prop_oneof![
        (1usize..=2, 5usize..400).prop_map(|(calls, out)| Step::Tools { calls, out }),
        (1usize..150).prop_map(Step::Text),
    ]
}

fn turn() -> impl Strategy<Value = Turn> {
    (
        1usize..200,
        prop::collection::vec(step(), 0..3),
        1usize..150,
        prop_oneof![8 => 1.0f64..600.0, 1 => 86_400.0f64..200_000.0],
        any::<bool>(),
    )
        .prop_map(|(user, mut steps, last, gap, note_alone)| {
            steps.push(Step::Text(last));
            Turn {
                user,
                steps,
                gap,
                note_alone,
            }
        })
}

struct Sim {
    engine: Engine,
    _dir: tempfile::TempDir,
    ceiling: u64,
    history: Vec<Value>,
    now: f64,
    ids: u64,
    last_export: Option<Value>,
    /// Episode states, sleeps and asks seen in any decorate.
    seen: BTreeSet<String>,
}

fn note_call(id: &str, turn: usize) -> Value {
    json!({"id": id, "type": "function", "function": {"name": "note", "arguments": json!({"notes": [
        {"note": format!("Fact from turn {turn}."), "subject": format!("thing {turn}"), "object": "user", "milestone": turn.is_multiple_of(2)}
    ]}).to_string()}})
}

fn has_note_tool(req: &Value) -> bool {
    req["tools"]
        .as_array()
        .is_some_and(|ts| ts.iter().any(|t| t["function"]["name"] == "note"))
}

impl Sim {
    fn new(ceiling: u64) -> Sim {
        let dir = tempfile::tempdir().unwrap();
        let store = Arc::new(
            Store::open(
                dir.path(),
                &StoreOptions {
                    map_size: 64 << 20,
                    ..Default::default()
                },
            )
            .unwrap(),
        );
        Sim {
            engine: Engine::new(store, None, EngineConfig::default()),
            _dir: dir,
            ceiling,
            history: vec![],
            now: 1_767_225_600.0,
            ids: 0,
            last_export: None,
            seen: BTreeSet::new(),
        }
    }

    fn request(&self) -> Value {
        let mut messages = vec![json!({"role": "system", "content": "You are a careful assistant."})];
        messages.extend(self.history.iter().cloned());
        json!({"model": "gpt-4o", "messages": messages, "tools": [{"type": "function", "function": {"name": "shell",
            "parameters": {"type": "object", "properties": {"cmd": {"type": "string"}}}}}]})
    }

    fn id(&mut self, prefix: &str) -> String {
        self.ids += 1;
        format!("{prefix}_{}", self.ids)
    }

    /// Export now and check nothing stored was lost or changed, and traces only grew.
    fn check_store(&mut self) -> Result<(), TestCaseError> {
        let after = self.engine.export("m").unwrap();
        if let Some(before) = &self.last_export {
            let (bm, am) = (
                before["messages"].as_array().unwrap(),
                after["messages"].as_array().unwrap(),
            );
            prop_assert!(bm.len() <= am.len(), "messages lost: {} → {}", bm.len(), am.len());
            for (b, a) in bm.iter().zip(am) {
                let mut b2 = b.clone();
                let mut a2 = a.clone();
                if b["superseded_at"].is_null() {
                    b2["superseded_at"] = Value::Null;
                    a2["superseded_at"] = Value::Null;
                } else {
                    prop_assert_eq!(&b["superseded_at"], &a["superseded_at"], "superseded_at set once");
                }
                prop_assert_eq!(b2, a2, "a stored message changed");
            }
            let (bt, at) = (
                before["traces"].as_array().unwrap(),
                after["traces"].as_array().unwrap(),
            );
            prop_assert!(bt.len() <= at.len(), "traces lost");
            for t in bt {
                prop_assert!(at.contains(t), "trace changed or lost: {}", t);
            }
            // Per episode, old traces are a prefix of the new list.
            let eps: BTreeSet<u64> = bt.iter().map(|t| t["episode"].as_u64().unwrap()).collect();
            for e in eps {
                let b: Vec<&Value> = bt.iter().filter(|t| t["episode"] == e).collect();
                let a: Vec<&Value> = at.iter().filter(|t| t["episode"] == e).collect();
                prop_assert_eq!(&b[..], &a[..b.len()]);
            }
            let (bf, af) = (before["facts"].as_array().unwrap(), after["facts"].as_array().unwrap());
            prop_assert!(bf.len() <= af.len(), "facts lost");
            for (b, a) in bf.iter().zip(af) {
                prop_assert_eq!(b, a, "a fact changed");
            }
        }
        self.last_export = Some(after);
        Ok(())
    }

    fn decorate(&mut self) -> Result<Value, TestCaseError> {
        self.now += 1.0;
        let args = DecorateArgs {
            now: Some(self.now),
            ceiling: Some(self.ceiling),
            ..DecorateArgs::new("m", self.request())
        };
        let r = self
            .engine
            .decorate(args)
            .map_err(|e| TestCaseError::fail(format!("decorate: {e}")))?;
        let out = json!({"request": r.request, "info": r.info});
        for e in out["info"]["episodes"].as_array().unwrap() {
            self.seen.insert(e["state"].as_str().unwrap().to_string());
        }
        if out["info"]["sleep"] == true {
            self.seen.insert("sleep".into());
        }
        if out["info"]["note_ask"] == true {
            self.seen.insert("ask".into());
        }
        self.check_store()?;
        self.check_request(&out)?;
        Ok(out)
    }

    fn report(&mut self, message: Value) -> Result<Value, TestCaseError> {
        self.now += 1.0;
        let finish = if message["tool_calls"].is_array() {
            "tool_calls"
        } else {
            "stop"
        };
        let reply = json!({"id": "x", "object": "chat.completion", "model": "gpt-4o",
            "choices": [{"index": 0, "finish_reason": finish, "message": message}]});
        let r = self
            .engine
            .report(ReportArgs {
                memory: "m".into(),
                response: reply,
                now: Some(self.now),
            })
            .map_err(|e| TestCaseError::fail(format!("report: {e}")))?;
        // The background lane, run to the end here (no lane threads in-process).
        while self
            .engine
            .run_next_job("m")
            .map_err(|e| TestCaseError::fail(format!("job: {e}")))?
        {}
        let m = r.response["choices"][0]["message"].clone();
        let calls = m["tool_calls"].as_array().cloned().unwrap_or_default();
        prop_assert!(
            calls.iter().all(|c| c["function"]["name"] != "note"),
            "note call reached the client"
        );
        if m["content"].is_string() || !calls.is_empty() {
            self.history.push(m);
        }
        self.check_store()?;
        Ok(json!({"again": r.again}))
    }

    /// Invariants of one assembled request.
    fn check_request(&self, out: &Value) -> Result<(), TestCaseError> {
        let info = &out["info"];
        let messages = out["request"]["messages"].as_array().unwrap();
        // The turn in progress: the client's messages from its last user message on.
        let start = self.history.iter().rposition(|m| m["role"] == "user").unwrap_or(0);
        let current = &self.history[start..];
        // It is in the request, whole and in order, right before the ask (if any).
        let mut pos = 0;
        for m in current {
            let found = messages[pos..].iter().position(|x| x == m);
            prop_assert!(
                found.is_some(),
                "current-turn message missing from the request: {}\ninfo {}",
                m,
                info
            );
            pos += found.unwrap() + 1;
        }
        // And in no episode.
        let turn = info["turn"].as_u64().unwrap();
        for e in info["episodes"].as_array().unwrap() {
            prop_assert!(
                e["turns"][1].as_u64().unwrap() < turn,
                "the turn in progress was cut: {}",
                e
            );
        }
        // A leaving episode (whose facts are asked for) is held back for the ceiling only when
        // every live one already is (for the ceiling, or for the recall block before it).
        let ids = |k: &str| -> BTreeSet<u64> {
            info[k]
                .as_array()
                .unwrap()
                .iter()
                .map(|v| v.as_u64().unwrap())
                .collect()
        };
        let hidden = ids("hidden_for_ceiling");
        let held: BTreeSet<u64> = hidden.union(&ids("hidden_for_recall")).copied().collect();
        let eps = info["episodes"].as_array().unwrap();
        let state_of = |n: u64| {
            eps.iter()
                .find(|e| e["n"] == n)
                .map(|e| e["state"].as_str().unwrap().to_string())
        };
        if hidden.iter().any(|n| state_of(*n).as_deref() == Some("leaving")) {
            for e in eps.iter().filter(|e| e["state"] == "live") {
                prop_assert!(
                    held.contains(&e["n"].as_u64().unwrap()),
                    "a leaving episode hidden before a live one: {}",
                    info
                );
            }
        }
        // Every tool call has its output, every output its call.
        let mut calls = BTreeSet::new();
        let mut outputs = BTreeSet::new();
        for m in messages {
            for c in m["tool_calls"].as_array().into_iter().flatten() {
                calls.insert(c["id"].as_str().unwrap().to_string());
            }
            if m["role"] == "tool" {
                outputs.insert(m["tool_call_id"].as_str().unwrap().to_string());
            }
        }
        prop_assert_eq!(&calls, &outputs, "a tool call separated from its output");
        // Tool outputs follow their call.
        for (i, m) in messages.iter().enumerate() {
            if m["role"] == "tool" {
                let id = &m["tool_call_id"];
                let before = messages[..i].iter().any(|x| {
                    x["tool_calls"]
                        .as_array()
                        .is_some_and(|cs| cs.iter().any(|c| &c["id"] == id))
                });
                prop_assert!(before, "tool output before (or without) its call");
            }
        }
        // Within the ceiling whenever the current turn alone fits.
        let ceiling = info["ceiling"].as_u64().unwrap();
        let fixed = info["fixed"].as_u64().unwrap();
        let export = self.last_export.as_ref().unwrap();
        let current_tokens: u64 = export["messages"]
            .as_array()
            .unwrap()
            .iter()
            .filter(|m| m["turn"] == turn && m["superseded_at"].is_null() && m["note"] == false)
            .map(|m| m["tokens"].as_u64().unwrap())
            .sum();
        let request_tokens = info["request_tokens"].as_u64().unwrap();
        if fixed + current_tokens <= ceiling {
            prop_assert!(
                request_tokens <= ceiling,
                "request {} > ceiling {} though fixed {} + current turn {} fits\ninfo {}",
                request_tokens,
                ceiling,
                fixed,
                current_tokens,
                info
            );
        }
        Ok(())
    }

    /// One model call: decorate, then the model's move (with a note when asked).
    fn call(&mut self, t: &Turn, n: usize, mv: &Step, seed: u64) -> Result<(), TestCaseError> {
        let out = self.decorate()?;
        let asked = has_note_tool(&out["request"]);
        prop_assert_eq!(asked, out["info"]["note_ask"].as_bool().unwrap());
        if asked && t.note_alone {
            let id = self.id("note");
            let r = self.report(json!({"role": "assistant", "content": null, "tool_calls": [note_call(&id, n)]}))?;
            prop_assert_eq!(&r["again"], &json!(true));
            let out = self.decorate()?;
            prop_assert!(
                !out["info"]["note_ask"].as_bool().unwrap()
                    || out["info"]["episodes"]
                        .as_array()
                        .unwrap()
                        .iter()
                        .any(|e| e["state"] == "leaving")
            );
        }
        let note = (asked && !t.note_alone).then(|| {
            let id = self.id("note");
            note_call(&id, n)
        });
        match mv {
            Step::Tools { calls, out } => {
                let mut cs: Vec<Value> = note.into_iter().collect();
                let ids: Vec<String> = (0..*calls).map(|_| self.id("call")).collect();
                for id in &ids {
                    cs.push(json!({"id": id, "type": "function", "function": {"name": "shell", "arguments": "{\"cmd\":\"ls\"}"}}));
                }
                let r = self.report(json!({"role": "assistant", "content": null, "tool_calls": cs}))?;
                prop_assert_eq!(&r["again"], &json!(false));
                for (k, id) in ids.iter().enumerate() {
                    self.history
                        .push(json!({"role": "tool", "tool_call_id": id, "content": words(seed + k as u64, *out)}));
                }
            }
            Step::Text(w) => {
                let mut m = json!({"role": "assistant", "content": words(seed, *w)});
                if let Some(nc) = note {
                    m["tool_calls"] = json!([nc]);
                }
                let r = self.report(m)?;
                prop_assert_eq!(&r["again"], &json!(false));
            }
        }
        Ok(())
    }
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 48, max_shrink_iters: 200, ..ProptestConfig::default() })]

    #[test]
    fn random_conversations_keep_the_invariants(ceiling in 800u64..6000, turns in prop::collection::vec(turn(), 1..14)) {
        let mut sim = Sim::new(ceiling);
        for (n, t) in turns.iter().enumerate() {
            sim.now += t.gap;
            sim.history.push(json!({"role": "user", "content": format!("Question {n}: {}", words(n as u64 * 7919, t.user))}));
            for (k, mv) in t.steps.iter().enumerate() {
                sim.call(t, n, mv, (n * 100 + k) as u64 * 31)?;
            }
        }
    }
}

/// The properties above mean something only if fading happens: a fixed conversation at a small
/// ceiling goes through every state, the note ask and a sleep.
#[test]
fn the_simulation_reaches_every_state() {
    let mut sim = Sim::new(1500);
    for n in 0..30usize {
        sim.now += if n == 25 { 90_000.0 } else { 60.0 };
        sim.history
            .push(json!({"role": "user", "content": format!("Question {n}: {}", words(n as u64, 60))}));
        let t = Turn {
            user: 60,
            steps: vec![Step::Tools { calls: 1, out: 150 }, Step::Text(40)],
            gap: 0.0,
            note_alone: n % 2 == 0,
        };
        for (k, mv) in t.steps.iter().enumerate() {
            sim.call(&t, n, mv, (n * 10 + k) as u64).unwrap();
        }
    }
    let seen = &sim.seen;
    for s in ["live", "leaving", "sealed", "forgotten", "sleep", "ask"] {
        assert!(seen.contains(s), "never reached {s}: {seen:?}");
    }
}
