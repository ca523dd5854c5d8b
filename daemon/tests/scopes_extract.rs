//! At a handoff, a model reads the turns nobody noted once for facts (schema-checked by the
//! provider); they join the scope like noted facts. A conversation with nothing worth keeping
//! stores nothing; when extraction fails the handoff is tried again later and stores nothing
//! meanwhile: never a raw chunk of conversation in place of a fact.

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};

use recalld::engine::scopes::ops::ListFilter;
use recalld::engine::{Engine, EngineConfig};
use recalld::models::{BoundaryScore, CallCtx, Embedder, Extracted, Judge, ModelError, Models, Relation, WalkLevel};
use recalld::store::{Store, StoreOptions};
use recalld_protocol::ops::{DecorateArgs, ReportArgs};
use serde_json::json;

use crate::util::LetterEmbedder;

const T0: f64 = 1_767_225_600.0;

/// A judge whose extraction answers from a script: a list of facts, or an error.
struct ScriptedJudge {
    answers: Mutex<Vec<Result<Vec<Extracted>, String>>>,
    read: Mutex<Vec<String>>,
    calls: AtomicUsize,
}

impl Judge for ScriptedJudge {
    fn name(&self) -> String {
        "test-scripted".into()
    }
    fn boundaries(&self, _: &CallCtx, units: &[&str]) -> Result<Vec<BoundaryScore>, ModelError> {
        Ok(units.iter().map(|_| BoundaryScore { first: 0.5, last: 0.5 }).collect())
    }
    fn about(&self, _: &CallCtx, _: &str, _: &[&str]) -> Result<(f32, bool), ModelError> {
        Ok((0.5, false))
    }
    fn walk_levels(&self, _: &CallCtx, _: &str, facts: &[&str]) -> Result<Vec<WalkLevel>, ModelError> {
        Ok(vec![WalkLevel::Unrelated; facts.len()])
    }
    fn distill(&self, _: &CallCtx, _: &[&str], _: &str) -> Result<Vec<usize>, ModelError> {
        Ok(Vec::new())
    }
    fn relation(&self, _: &CallCtx, _: &str, _: &str) -> Result<Relation, ModelError> {
        Ok(Relation::Unrelated)
    }
    fn extract(&self, _: &CallCtx, transcript: &str) -> Result<Vec<Extracted>, ModelError> {
        self.calls.fetch_add(1, Ordering::SeqCst);
        self.read.lock().unwrap().push(transcript.to_owned());
        match self.answers.lock().unwrap().remove(0) {
            Ok(facts) => Ok(facts),
            Err(e) => Err(ModelError::Transport {
                url: "http://judge.test".into(),
                message: e,
            }),
        }
    }
}

fn setup(answers: Vec<Result<Vec<Extracted>, String>>) -> (Engine, Arc<ScriptedJudge>, tempfile::TempDir) {
    let dir = tempfile::tempdir().unwrap();
    let store = Arc::new(Store::open(dir.path(), &StoreOptions::default()).unwrap());
    let embedder: Arc<dyn Embedder> = Arc::new(LetterEmbedder);
    let judge = Arc::new(ScriptedJudge {
        answers: Mutex::new(answers),
        read: Mutex::default(),
        calls: AtomicUsize::new(0),
    });
    let models = Models::with(embedder, judge.clone());
    let config = EngineConfig {
        recall: false,
        ..EngineConfig::default()
    };
    (Engine::new(store, Some(models), config), judge, dir)
}

/// A request of a conversation of agent "ops" with "alex".
fn decorate(
    e: &Engine,
    memory: &str,
    messages: &[serde_json::Value],
    now: f64,
    dry_run: bool,
) -> recalld_protocol::ops::DecorateReply {
    e.decorate(DecorateArgs {
        now: Some(now),
        dry_run,
        agent: Some("ops".into()),
        user: Some("alex".into()),
        ..DecorateArgs::new(memory, json!({"model": "gpt-4o", "messages": messages}))
    })
    .unwrap()
}

/// The user of agent "ops" says `said`.
fn say(e: &Engine, memory: &str, said: &str) {
    decorate(e, memory, &[json!({"role": "user", "content": said})], T0, false);
}

/// A short conversation nobody noted (nothing left the view), then its end.
fn talk_and_end(e: &Engine, memory: &str, said: &str) {
    say(e, memory, said);
    let reply = json!({"id": "r", "object": "chat.completion", "model": "gpt-4o", "choices": [{"index": 0,
        "finish_reason": "stop", "message": {"role": "assistant", "content": "Understood."}}]});
    e.report(ReportArgs {
        memory: memory.into(),
        response: reply,
        now: Some(T0 + 5.0),
    })
    .unwrap();
    e.end(memory, Some(T0 + 60.0)).unwrap();
}

fn facts(e: &Engine) -> Vec<serde_json::Value> {
    e.list_scope(
        "ops",
        Some("alex"),
        ListFilter {
            status: Some("all".into()),
            ..Default::default()
        },
        Some(T0),
    )
    .unwrap()["memories"]
        .as_array()
        .unwrap()
        .clone()
}

fn extracted(note: &str, kind: &str) -> Extracted {
    Extracted {
        note: note.into(),
        subject: "Alex".into(),
        object: "staging".into(),
        kind: kind.into(),
    }
}

#[test]
fn the_unnoted_tail_is_read_once_and_its_facts_join_the_scope() {
    let (e, judge, _dir) = setup(vec![Ok(vec![extracted(
        "Alex's staging database is hosted in Sydney.",
        "environment",
    )])]);
    talk_and_end(&e, "m1", "Our staging database moved to Sydney last week.");
    while e.run_next_job("m1").unwrap() {}
    let got = facts(&e);
    assert_eq!(got.len(), 1, "{got:#?}");
    assert_eq!(got[0]["text"], "Alex's staging database is hosted in Sydney.");
    assert_eq!(got[0]["kind"], "environment");
    assert_eq!(got[0]["origin"], json!({"memory": "m1", "fact": null}));
    assert_eq!(got[0]["searchable_by_meaning"], true);
    assert!(judge.read.lock().unwrap()[0].contains("user: Our staging database moved to Sydney"));
    // Ended again with nothing new said: the same turns are not read twice.
    e.end("m1", Some(T0 + 120.0)).unwrap();
    while e.run_next_job("m1").unwrap() {}
    assert_eq!(judge.calls.load(Ordering::SeqCst), 1);
    assert_eq!(facts(&e).len(), 1);
}

#[test]
fn nothing_worth_keeping_stores_nothing_and_a_failure_is_retried() {
    let (e, judge, _dir) = setup(vec![
        Ok(vec![]),
        Err("judge unreachable".into()),
        Ok(vec![extracted("Alex chose the annual plan.", "decision")]),
    ]);
    talk_and_end(&e, "small-talk", "Thanks, that's all!");
    while e.run_next_job("small-talk").unwrap() {}
    assert!(facts(&e).is_empty());

    talk_and_end(&e, "m2", "We went with the annual plan in the end.");
    // The first try fails (the lane stops at it): the job stays queued, nothing is stored.
    while e.run_next_job("m2").unwrap() {}
    assert!(facts(&e).is_empty());
    assert!(e.has_waiting_job("m2").unwrap());
    // Tried again later, it stores the fact once.
    while e.run_next_job("m2").unwrap() {}
    let got = facts(&e);
    assert_eq!(got.len(), 1, "{got:#?}");
    assert_eq!(got[0]["kind"], "decision");
    assert_eq!(judge.calls.load(Ordering::SeqCst), 3);
}

#[test]
fn working_notes_are_read_with_the_unnoted_turns() {
    let (e, judge, _dir) = setup(vec![Ok(vec![])]);
    say(&e, "w", "Remind me about the renewal.");
    let call = json!({"id": "rem", "type": "function", "function": {"name": "remember", "arguments": "{\"note\": \"The domain renewal is due on March 3.\"}"}});
    let reply = json!({"id": "r", "object": "chat.completion", "model": "gpt-4o", "choices": [{"index": 0,
        "finish_reason": "tool_calls", "message": {"role": "assistant", "content": "I will.", "tool_calls": [call]}}]});
    e.report(ReportArgs {
        memory: "w".into(),
        response: reply,
        now: Some(T0 + 5.0),
    })
    .unwrap();
    e.end("w", Some(T0 + 60.0)).unwrap();
    while e.run_next_job("w").unwrap() {}
    let read = judge.read.lock().unwrap()[0].clone();
    assert!(read.contains("user: Remind me about the renewal."), "{read}");
    assert!(
        read.contains("assistant (working note): The domain renewal is due on March 3."),
        "{read}"
    );
}

/// The first `n` airline conversations of the real agent traces (tau-bench).
fn airline_traces(n: usize) -> Vec<Vec<serde_json::Value>> {
    use std::io::BufRead;
    let dir = match std::env::var_os("RECALLD_BENCH_DIR") {
        Some(d) if !d.is_empty() => std::path::PathBuf::from(d),
        _ => std::path::PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../../shared/bench"),
    };
    let file = std::fs::File::open(dir.join("agent-traces-dev.jsonl"))
        .expect("agent-traces-dev.jsonl (set RECALLD_BENCH_DIR)");
    std::io::BufReader::new(file)
        .lines()
        .map(|l| serde_json::from_str::<serde_json::Value>(&l.unwrap()).unwrap())
        .filter(|t| t["id"].as_str().is_some_and(|id| id.starts_with("tau-bench/airline/")))
        .take(n)
        .map(|t| t["messages"].as_array().unwrap().clone())
        .collect()
}

/// One whole conversation of agent "ops" with "alex" at `now`: every message up to the last
/// assistant message is the request, that message the reply; then it ends and hands over.
fn converse(e: &Engine, memory: &str, messages: &[serde_json::Value], now: f64) {
    let last = messages.iter().rposition(|m| m["role"] == "assistant").unwrap();
    decorate(e, memory, &messages[..last], now, false);
    let reply = json!({"id": "r", "object": "chat.completion", "model": "gpt-4o", "choices": [{"index": 0,
        "finish_reason": "stop", "message": messages[last]}]});
    e.report(ReportArgs {
        memory: memory.into(),
        response: reply,
        now: Some(now + 1.0),
    })
    .unwrap();
    e.end(memory, Some(now + 60.0)).unwrap();
    while e.run_next_job(memory).unwrap() {}
}

/// Per user message, the tools called until the next one (repeats in a row once), where two
/// or more different tools were: written here independently of the daemon.
fn expected_sequences(messages: &[serde_json::Value]) -> Vec<String> {
    let mut out = Vec::new();
    let mut current: Option<Vec<String>> = None;
    let flush = |c: Option<Vec<String>>, out: &mut Vec<String>| {
        if let Some(tools) = c {
            if tools.iter().collect::<std::collections::BTreeSet<_>>().len() >= 2 {
                out.push(tools.join(" → "));
            }
        }
    };
    for m in messages {
        match m["role"].as_str() {
            Some("user") => flush(current.replace(Vec::new()), &mut out),
            Some("assistant") => {
                for c in m["tool_calls"].as_array().into_iter().flatten() {
                    let name = c["function"]["name"].as_str().unwrap().to_owned();
                    if let Some(tools) = current.as_mut().filter(|t| t.last() != Some(&name)) {
                        tools.push(name);
                    }
                }
            }
            _ => {}
        }
    }
    flush(current, &mut out);
    out
}

fn procedures(e: &Engine) -> Vec<serde_json::Value> {
    facts(e).into_iter().filter(|f| f["tier"] == "procedural").collect()
}

#[test]
fn the_agents_repeated_ways_become_procedures_and_a_newer_way_replaces_the_older() {
    let (e, _, _dir) = setup((0..40).map(|_| Ok(vec![])).collect());
    let traces = airline_traces(10);
    let mut seen: std::collections::BTreeMap<String, std::collections::BTreeSet<usize>> = Default::default();
    for (i, t) in traces.iter().enumerate() {
        converse(&e, &format!("air-{i}"), t, T0 + 3_600.0 * i as f64);
        for s in expected_sequences(t) {
            seen.entry(s).or_default().insert(i);
        }
    }
    // Every sequence followed in two or more conversations, and nothing else, is a procedure.
    let repeated: Vec<&String> = seen.iter().filter(|(_, c)| c.len() >= 2).map(|(s, _)| s).collect();
    assert!(!repeated.is_empty(), "the traces repeat a way of working: {seen:?}");
    let got = procedures(&e);
    let mut subjects: Vec<&str> = got.iter().map(|f| f["subject"].as_str().unwrap()).collect();
    subjects.sort();
    assert_eq!(
        subjects,
        repeated.iter().map(|s| s.as_str()).collect::<Vec<_>>(),
        "{got:#?}"
    );
    let usual = got
        .iter()
        .find(|f| f["subject"] == "get_user_details → get_reservation_details")
        .expect("the usual lookup");
    let times = seen["get_user_details → get_reservation_details"].len();
    assert!(
        usual["text"]
            .as_str()
            .unwrap()
            .contains(&format!("in {times} conversations")),
        "{usual}"
    );
    assert!(usual["text"].as_str().unwrap().contains("For example: \""), "{usual}");
    assert_eq!(usual["status"]["state"], "active");

    // Later the agent looks reservations up another way, in two conversations, and never the
    // old way again: the new way replaces the old, which stays (replaced, not deleted).
    let later = T0 + 10.0 * 86_400.0;
    for i in 0..2 {
        let call =
            |id: &str, name: &str| json!({"id": id, "type": "function", "function": {"name": name, "arguments": "{}"}});
        let messages = vec![
            json!({"role": "user", "content": format!("Hi, I need to change the flight on reservation number {i}ZFA04, my user id is mia_li_3668.")}),
            json!({"role": "assistant", "content": null, "tool_calls": [call("a", "get_user_details")]}),
            json!({"role": "tool", "tool_call_id": "a", "content": "{\"user_id\": \"mia_li_3668\"}"}),
            json!({"role": "assistant", "content": null, "tool_calls": [call("b", "find_reservations")]}),
            json!({"role": "tool", "tool_call_id": "b", "content": "[\"ZFA04\"]"}),
            json!({"role": "assistant", "content": "Found it. Which flight would you like instead?"}),
        ];
        converse(&e, &format!("new-{i}"), &messages, later + 3_600.0 * i as f64);
    }
    let got = procedures(&e);
    let new = got
        .iter()
        .find(|f| f["subject"] == "get_user_details → find_reservations")
        .expect("the new way");
    let old = got
        .iter()
        .find(|f| f["subject"] == "get_user_details → get_reservation_details")
        .unwrap();
    assert_eq!(old["status"]["state"], "replaced", "{old}");
    assert_eq!(old["status"]["by"], new["id"]);
    assert_eq!(new["status"]["state"], "active");
    // Ways that start elsewhere are another matter: they stay.
    for f in got
        .iter()
        .filter(|f| !f["subject"].as_str().unwrap().starts_with("get_user_details"))
    {
        assert_eq!(f["status"]["state"], "active", "{f}");
    }
    // A new conversation asking the like is shown the current way, not the replaced one.
    let ask = json!({"role": "user", "content": "Hi, I need to change the flight on my reservation."});
    let decorated = decorate(&e, "next", &[ask], later + 86_400.0, true);
    let block = decorated.request["messages"].to_string();
    assert!(block.contains("get_user_details, then find_reservations"), "{block}");
    assert!(
        !block.contains("get_user_details, then get_reservation_details"),
        "{block}"
    );

    // Forgetting a conversation the new way was seen in removes it with its routines, and
    // the old way it replaced is active again; the next consolidation does not find the new
    // way again (one conversation is no pattern).
    e.forget("new-1").unwrap();
    e.consolidate("ops", Some("alex"), Some(later + 86_400.0)).unwrap();
    let got = procedures(&e);
    assert!(
        got.iter()
            .all(|f| f["subject"] != "get_user_details → find_reservations"),
        "{got:#?}"
    );
    let old = got
        .iter()
        .find(|f| f["subject"] == "get_user_details → get_reservation_details")
        .unwrap();
    assert_eq!(old["status"]["state"], "active", "{old}");
}
