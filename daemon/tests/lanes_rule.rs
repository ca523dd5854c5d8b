//! The lanes' rule: no model runs while a memory's lock is held, so decorate and report answer
//! while a background job is mid-judgment; one worker per memory, so a job runs once even with
//! several workers and many notices; cuts are arithmetic over boundary scores judged in the lane.

use std::collections::HashSet;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{mpsc, Arc, Condvar, Mutex};
use std::time::{Duration, Instant};

use recalld::engine::{Engine, EngineConfig};
use recalld::lanes::Lanes;
use recalld::models::{BoundaryScore, CallCtx, Embedder, Judge, ModelError, ModelId, Models, Relation, WalkLevel};
use recalld::store::{Store, StoreOptions};
use recalld_protocol::ops::{DecorateArgs, ReportArgs};
use serde_json::{json, Value};

/// A gate the test opens; judge calls wait at it.
#[derive(Default)]
struct Gate {
    open: Mutex<bool>,
    cv: Condvar,
    waiting: AtomicUsize,
}

impl Gate {
    fn pass(&self) {
        self.waiting.fetch_add(1, Ordering::SeqCst);
        let mut open = self.open.lock().unwrap();
        while !*open {
            open = self.cv.wait(open).unwrap();
        }
    }
    fn open(&self) {
        *self.open.lock().unwrap() = true;
        self.cv.notify_all();
    }
}

/// A judge that waits at a gate (when given one), counts its calls and answers plainly:
/// every fact is about every episode; a unit starts a concept when it mentions "topic".
struct TestJudge {
    gate: Option<Arc<Gate>>,
    about_calls: AtomicUsize,
    boundary_calls: AtomicUsize,
    delay: Duration,
}

impl TestJudge {
    fn new(gate: Option<Arc<Gate>>, delay: Duration) -> TestJudge {
        TestJudge {
            gate,
            about_calls: AtomicUsize::new(0),
            boundary_calls: AtomicUsize::new(0),
            delay,
        }
    }
    fn wait(&self) {
        if let Some(g) = &self.gate {
            g.pass();
        }
        std::thread::sleep(self.delay);
    }
}

impl Judge for TestJudge {
    fn name(&self) -> String {
        "test".into()
    }
    fn boundaries(&self, _: &CallCtx, units: &[&str]) -> Result<Vec<BoundaryScore>, ModelError> {
        self.wait();
        self.boundary_calls.fetch_add(1, Ordering::SeqCst);
        Ok(units
            .iter()
            .map(|u| BoundaryScore {
                first: if u.contains("topic") { 1.0 } else { 0.0 },
                last: 0.0,
            })
            .collect())
    }
    fn about(&self, _: &CallCtx, _: &str, _: &[&str]) -> Result<(f32, bool), ModelError> {
        self.wait();
        self.about_calls.fetch_add(1, Ordering::SeqCst);
        Ok((0.9, true))
    }
    fn walk_levels(&self, _: &CallCtx, _: &str, facts: &[&str]) -> Result<Vec<WalkLevel>, ModelError> {
        Ok(vec![WalkLevel::Related; facts.len()])
    }
    fn distill(&self, _: &CallCtx, _: &[&str], _: &str) -> Result<Vec<usize>, ModelError> {
        Ok(Vec::new())
    }
    fn relation(&self, _: &CallCtx, _: &str, _: &str) -> Result<Relation, ModelError> {
        Ok(Relation::Unrelated)
    }
}

/// Vectors from word hashes: enough for anything that embeds; the test judge does not.
struct WordsEmbedder;

impl Embedder for WordsEmbedder {
    fn id(&self) -> ModelId {
        ModelId {
            name: "test-words".into(),
            dim: 16,
        }
    }
    fn embed(&self, _: &CallCtx, texts: &[&str]) -> Result<Vec<Vec<f32>>, ModelError> {
        Ok(texts
            .iter()
            .map(|t| {
                let mut v = [0f32; 16];
                for w in t.split_whitespace() {
                    v[w.bytes().map(|b| b as usize).sum::<usize>() % 16] += 1.0;
                }
                let n = v.iter().map(|x| x * x).sum::<f32>().sqrt().max(1e-6);
                v.iter().map(|x| x / n).collect()
            })
            .collect())
    }
}

fn engine_with(dir: &std::path::Path, judge: Arc<TestJudge>) -> Arc<Engine> {
    let store = Arc::new(Store::open(dir, &StoreOptions::default()).unwrap());
    let models = Models::with(Arc::new(WordsEmbedder), judge);
    let config = EngineConfig {
        max_episode_tokens: 64,
        ..EngineConfig::default()
    };
    Arc::new(Engine::new(store, Some(models), config))
}

fn decorate(engine: &Engine, memory: &str, history: &[Value], now: f64) -> Value {
    decorate_at(engine, memory, history, now, 900)
}

fn decorate_at(engine: &Engine, memory: &str, history: &[Value], now: f64, ceiling: u64) -> Value {
    engine
        .decorate(DecorateArgs {
            now: Some(now),
            ceiling: Some(ceiling),
            ..DecorateArgs::new(memory, json!({"model": "gpt-4o", "messages": history}))
        })
        .unwrap()
        .info
}

/// A reply with text and, when `note` is given, a note call holding one fact.
fn reply(text: &str, note: Option<&str>) -> Value {
    let mut message = json!({"role": "assistant", "content": text});
    if let Some(fact) = note {
        message["tool_calls"] = json!([{"id": format!("call-{}", fact.replace(' ', "-")), "type": "function",
            "function": {"name": "note", "arguments": json!({"notes": [
                {"note": fact, "subject": "Acme", "object": "invoice", "milestone": false}]}).to_string()}}]);
    }
    json!({"id": "r", "object": "chat.completion", "model": "gpt-4o",
        "choices": [{"index": 0, "finish_reason": "stop", "message": message}]})
}

fn report(engine: &Engine, memory: &str, text: &str, note: Option<&str>, now: f64) {
    engine
        .report(ReportArgs {
            memory: memory.into(),
            response: reply(text, note),
            now: Some(now),
        })
        .unwrap();
}

/// Runs `f` on another thread; None when it did not answer within `limit`.
fn within<T: Send + 'static>(limit: Duration, f: impl FnOnce() -> T + Send + 'static) -> Option<T> {
    let (tx, rx) = mpsc::channel();
    std::thread::spawn(move || {
        let _ = tx.send(f());
    });
    rx.recv_timeout(limit).ok()
}

fn turn_text(turn: usize) -> String {
    let topic = if turn.is_multiple_of(3) { "new topic: " } else { "" };
    format!("{topic}turn {turn}: invoice INV-{turn} for Acme was disputed over the unit price of widget W{turn}")
}

fn drain(engine: &Engine) {
    let deadline = Instant::now() + Duration::from_secs(60);
    while engine.pending_jobs().unwrap().1 > 0 {
        assert!(Instant::now() < deadline, "the lanes did not drain");
        std::thread::sleep(Duration::from_millis(10));
    }
}

#[test]
fn decorate_and_report_answer_while_a_lane_job_is_mid_judgment() {
    let dir = tempfile::tempdir().unwrap();
    let gate = Arc::new(Gate::default());
    let judge = Arc::new(TestJudge::new(Some(gate.clone()), Duration::ZERO));
    let engine = engine_with(dir.path(), judge.clone());
    let lanes = Lanes::start(engine.clone(), 1, 0);
    let mut history = Vec::new();
    let mut now = 1_767_225_600.0;
    // Two turns: the second user message closes the first turn, queuing its units' judgment.
    for turn in 0..2 {
        history.push(json!({"role": "user", "content": turn_text(turn)}));
        decorate(&engine, "m", &history, now);
        report(&engine, "m", &format!("noted {turn}"), None, now + 1.0);
        history.push(json!({"role": "assistant", "content": format!("noted {turn}")}));
        now += 60.0;
    }
    let deadline = Instant::now() + Duration::from_secs(10);
    while gate.waiting.load(Ordering::SeqCst) == 0 {
        assert!(Instant::now() < deadline, "the lane never started judging");
        std::thread::sleep(Duration::from_millis(5));
    }
    // The lane is now inside the judge. The same memory must still answer.
    for turn in 2..6 {
        history.push(json!({"role": "user", "content": turn_text(turn)}));
        let (e, h) = (engine.clone(), history.clone());
        let answered = within(Duration::from_secs(5), move || decorate(&e, "m", &h, now));
        assert!(answered.is_some(), "decorate waited on the lane's judge");
        let e = engine.clone();
        let text = format!("noted {turn}");
        let fact = format!("Acme disputed invoice INV-{turn}.");
        let answered = within(Duration::from_secs(5), move || {
            report(&e, "m", &text, Some(&fact), now + 1.0)
        });
        assert!(answered.is_some(), "report waited on the lane's judge");
        history.push(json!({"role": "assistant", "content": format!("noted {turn}")}));
        now += 60.0;
    }
    assert_eq!(
        judge.boundary_calls.load(Ordering::SeqCst),
        0,
        "the gate held the judge"
    );
    gate.open();
    drain(&engine);
    lanes.stop();
    let export = engine.export("m").unwrap();
    assert!(judge.boundary_calls.load(Ordering::SeqCst) >= 1);
    let facts = export["facts"].as_array().unwrap();
    assert_eq!(facts.len(), 4);
    assert!(
        facts.iter().all(|f| f["subject_entity"].is_u64()),
        "graph jobs queued during the wait ran after it"
    );
}

#[test]
fn with_four_workers_and_many_notices_every_job_runs_once() {
    let dir = tempfile::tempdir().unwrap();
    let judge = Arc::new(TestJudge::new(None, Duration::from_millis(2)));
    let memories: Vec<String> = (0..6).map(|i| format!("mem-{i}")).collect();
    {
        // Queue work with no lane running: notes (fact scoring), closed turns (unit scoring), cuts.
        let engine = engine_with(dir.path(), judge.clone());
        for m in &memories {
            let mut history = Vec::new();
            let mut now = 1_767_225_600.0;
            for turn in 0..12 {
                history.push(json!({"role": "user", "content": turn_text(turn)}));
                decorate(&engine, m, &history, now);
                let fact = format!("Acme disputed invoice INV-{turn} in {m}.");
                report(&engine, m, &format!("noted {turn}"), Some(&fact), now + 1.0);
                history.push(json!({"role": "assistant", "content": format!("noted {turn}")}));
                now += 60.0;
            }
        }
        assert!(engine.pending_jobs().unwrap().1 >= 12 * memories.len() as u64);
    }
    let engine = engine_with(dir.path(), judge.clone());
    let lanes = Lanes::start(engine.clone(), 4, 0);
    for _ in 0..50 {
        for m in &memories {
            lanes.notify(m);
        }
    }
    drain(&engine);
    lanes.stop();
    let mut fact_traces = 0;
    for m in &memories {
        let export = engine.export(m).unwrap();
        let mut seen = HashSet::new();
        for t in export["traces"]
            .as_array()
            .unwrap()
            .iter()
            .filter(|t| t["kind"] == "fact")
        {
            fact_traces += 1;
            let key = (t["episode"].as_u64().unwrap(), t["fact"].as_u64().unwrap());
            assert!(
                seen.insert(key),
                "{m}: fact {} judged twice against episode {}",
                key.1,
                key.0
            );
        }
        assert!(!seen.is_empty(), "{m}: its facts were judged");
    }
    // Every judge call became exactly one trace: no job ran twice, even where its second
    // application would have been caught.
    assert_eq!(judge.about_calls.load(Ordering::SeqCst), fact_traces);
}

#[test]
fn cuts_use_the_boundary_scores_the_lane_stored() {
    let dir = tempfile::tempdir().unwrap();
    let judge = Arc::new(TestJudge::new(None, Duration::ZERO));
    let engine = engine_with(dir.path(), judge.clone());
    let lanes = Lanes::start(engine.clone(), 1, 0);
    let mut history = Vec::new();
    let mut now = 1_767_225_600.0;
    let mut inline_cuts = Vec::new();
    for turn in 0..60 {
        // Short turns, a new topic every third: episodes of 64 tokens hold several turns, so
        // every cut has a choice of boundaries.
        let topic = if turn % 3 == 0 { "topic " } else { "" };
        history.push(json!({"role": "user", "content": format!("{topic}t{turn} widgets")}));
        let info = decorate_at(&engine, "m", &history, now, 3000);
        if info["cut"].is_object() {
            inline_cuts.push(info["cut"].clone());
        }
        report(&engine, "m", "ok", None, now + 1.0);
        history.push(json!({"role": "assistant", "content": "ok"}));
        drain(&engine); // the time between turns lets the lane finish
        now += 60.0;
    }
    lanes.stop();
    // An inline cut found every closed unit scored but the turn that had just closed (its
    // judgment was queued by the same decorate): nothing on the request path judged.
    for cut in &inline_cuts {
        let (units, scored) = (cut["units"].as_u64().unwrap(), cut["scored"].as_u64().unwrap());
        assert!(scored + 2 >= units, "inline cut with {scored} of {units} units scored");
    }
    let export = engine.export("m").unwrap();
    let episodes = export["episodes"].as_array().unwrap();
    assert!(episodes.len() >= 3, "history was cut into episodes");
    // The test judge marks every third turn's user message as a concept start: cuts that had a
    // choice landed on one.
    let messages = export["messages"].as_array().unwrap();
    let starts_on_topic = episodes
        .iter()
        .skip(1)
        .filter(|e| {
            let seq = e["first_seq"].as_u64().unwrap();
            messages
                .iter()
                .any(|m| m["seq"] == seq && m["message"]["content"].as_str().is_some_and(|c| c.contains("topic")))
        })
        .count();
    assert!(
        starts_on_topic * 3 >= (episodes.len() - 1) * 2,
        "cuts follow the stored scores: {starts_on_topic} of {} episodes start on a topic",
        episodes.len() - 1
    );
    assert!(judge.boundary_calls.load(Ordering::SeqCst) > 0);
}
