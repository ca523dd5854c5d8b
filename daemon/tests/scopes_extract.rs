//! At a handoff, a model reads the turns nobody noted once for facts (schema-checked by the
//! provider); they join the scope like noted facts. A conversation with nothing worth keeping
//! stores nothing; when extraction fails the handoff is tried again later and stores nothing
//! meanwhile: never a raw chunk of conversation in place of a fact.

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};

use recalld::engine::scopes::ops::ListFilter;
use recalld::engine::{Engine, EngineConfig};
use recalld::models::{
    BoundaryScore, CallCtx, Embedder, Extracted, Judge, ModelError, ModelId, Models, Relation, Usage, WalkLevel,
};
use recalld::store::{Store, StoreOptions};
use recalld_protocol::ops::{DecorateArgs, HistoryMode, ReportArgs};
use serde_json::json;

const T0: f64 = 1_767_225_600.0;

/// Vectors from the letters of the text: alike texts are alike, and no model is needed.
struct LetterEmbedder;

impl Embedder for LetterEmbedder {
    fn id(&self) -> ModelId {
        ModelId { name: "test-letters".into(), dim: 26 }
    }
    fn embed(&self, _: &CallCtx, texts: &[&str]) -> Result<Vec<Vec<f32>>, ModelError> {
        Ok(texts
            .iter()
            .map(|t| {
                let mut v = vec![0f32; 26];
                for c in t.to_lowercase().bytes().filter(u8::is_ascii_lowercase) {
                    v[(c - b'a') as usize] += 1.0;
                }
                v
            })
            .collect())
    }
}

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
            Err(e) => Err(ModelError::Transport { url: "http://judge.test".into(), message: e }),
        }
    }
}

fn setup(answers: Vec<Result<Vec<Extracted>, String>>) -> (Engine, Arc<ScriptedJudge>, tempfile::TempDir) {
    let dir = tempfile::tempdir().unwrap();
    let store = Arc::new(Store::open(dir.path(), &StoreOptions::default()).unwrap());
    let embedder: Arc<dyn Embedder> = Arc::new(LetterEmbedder);
    let judge = Arc::new(ScriptedJudge { answers: Mutex::new(answers), read: Mutex::default(), calls: AtomicUsize::new(0) });
    let models = Models {
        embedder: embedder.clone(),
        judge: judge.clone(),
        usage: Arc::new(Usage::default()),
        request_embedder: embedder,
        priority: Arc::default(),
    };
    let config = EngineConfig { recall: false, ..EngineConfig::default() };
    (Engine::new(store, Some(models), config), judge, dir)
}

/// The user of agent "ops" says `said`.
fn say(e: &Engine, memory: &str, said: &str) {
    e.decorate(DecorateArgs {
        memory: memory.into(),
        request: json!({"model": "gpt-4o", "messages": [{"role": "user", "content": said}]}),
        now: Some(T0),
        dry_run: false,
        ceiling: None,
        agent: Some("ops".into()),
        user: Some("alex".into()),
        history: HistoryMode::Full,
    })
    .unwrap();
}

/// A short conversation nobody noted (nothing left the view), then its end.
fn talk_and_end(e: &Engine, memory: &str, said: &str) {
    say(e, memory, said);
    let reply = json!({"id": "r", "object": "chat.completion", "model": "gpt-4o", "choices": [{"index": 0,
        "finish_reason": "stop", "message": {"role": "assistant", "content": "Understood."}}]});
    e.report(ReportArgs { memory: memory.into(), response: reply, now: Some(T0 + 5.0) }).unwrap();
    e.end(memory, Some(T0 + 60.0)).unwrap();
}

fn facts(e: &Engine) -> Vec<serde_json::Value> {
    e.list_scope("ops", Some("alex"), ListFilter { status: Some("all".into()), ..Default::default() }, Some(T0))
        .unwrap()["memories"]
        .as_array()
        .unwrap()
        .clone()
}

fn extracted(note: &str, kind: &str) -> Extracted {
    Extracted { note: note.into(), subject: "Alex".into(), object: "staging".into(), kind: kind.into() }
}

#[test]
fn the_unnoted_tail_is_read_once_and_its_facts_join_the_scope() {
    let (e, judge, _dir) = setup(vec![Ok(vec![extracted("Alex's staging database is hosted in Sydney.", "environment")])]);
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
    e.report(ReportArgs { memory: "w".into(), response: reply, now: Some(T0 + 5.0) }).unwrap();
    e.end("w", Some(T0 + 60.0)).unwrap();
    while e.run_next_job("w").unwrap() {}
    let read = judge.read.lock().unwrap()[0].clone();
    assert!(read.contains("user: Remind me about the renewal."), "{read}");
    assert!(read.contains("assistant (working note): The domain renewal is due on March 3."), "{read}");
}
