//! A lane job that keeps failing is parked after `PARK_AFTER` runs: kept with its error, shown
//! in `stats`, never run again, and the memory's other work goes on around it. A job the
//! daemon's stop cuts short is no failure: it stays queued as it was.

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;

use recalld::engine::{Engine, EngineConfig};
use recalld::models::{BoundaryScore, CallCtx, Embedder, Judge, ModelError, ModelId, Models, Relation, WalkLevel};
use recalld::store::{Store, StoreOptions};
use recalld_protocol::ops::{DecorateArgs, ReportArgs};
use serde_json::{json, Value};

const MEMORY: &str = "park";
const DOWN: &str = "embedder is down";

/// An embedder whose provider is always down; counts the calls it refused.
#[derive(Default)]
struct DownEmbedder {
    calls: AtomicUsize,
}

impl Embedder for DownEmbedder {
    fn id(&self) -> ModelId {
        ModelId {
            name: "test-down".into(),
            dim: 8,
        }
    }
    fn embed(&self, _: &CallCtx, _: &[&str]) -> Result<Vec<Vec<f32>>, ModelError> {
        self.calls.fetch_add(1, Ordering::SeqCst);
        Err(ModelError::Http {
            status: 503,
            url: "http://embedder.test/v1/embeddings".into(),
            message: DOWN.into(),
        })
    }
}

/// A judge that works: every unit starts a concept, every fact is about every episode.
#[derive(Default)]
struct PlainJudge {
    boundary_calls: AtomicUsize,
}

impl Judge for PlainJudge {
    fn name(&self) -> String {
        "test-plain".into()
    }
    fn boundaries(&self, _: &CallCtx, units: &[&str]) -> Result<Vec<BoundaryScore>, ModelError> {
        self.boundary_calls.fetch_add(1, Ordering::SeqCst);
        Ok(units.iter().map(|_| BoundaryScore { first: 1.0, last: 0.0 }).collect())
    }
    fn about(&self, _: &CallCtx, _: &str, _: &[&str]) -> Result<(f32, bool), ModelError> {
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

fn decorate(engine: &Engine, history: &[Value], now: f64) -> Value {
    engine
        .decorate(DecorateArgs {
            now: Some(now),
            ..DecorateArgs::new(MEMORY, json!({"model": "gpt-4o", "messages": history}))
        })
        .unwrap()
        .info
}

/// Reports a plain reply, or one with a note call holding `fact`.
fn report(engine: &Engine, text: &str, fact: Option<&str>, now: f64) {
    let mut message = json!({"role": "assistant", "content": text});
    if let Some(fact) = fact {
        message["tool_calls"] = json!([{"id": "call-note", "type": "function",
            "function": {"name": "note", "arguments": json!({"notes": [
                {"note": fact, "subject": "Acme", "object": "invoice INV-7", "milestone": false}]}).to_string()}}]);
    }
    engine
        .report(ReportArgs {
            memory: MEMORY.into(),
            response: json!({"id": "r", "object": "chat.completion", "model": "gpt-4o",
                "choices": [{"index": 0, "finish_reason": "stop", "message": message}]}),
            now: Some(now),
        })
        .unwrap();
}

/// The memory's queued jobs, as export shows them.
fn jobs(engine: &Engine) -> Vec<Value> {
    engine.export(MEMORY).unwrap()["jobs"].as_array().unwrap().clone()
}

fn graph_job(engine: &Engine) -> Value {
    let jobs = jobs(engine);
    let graph: Vec<&Value> = jobs.iter().filter(|j| j["job"]["kind"] == "graph").collect();
    assert_eq!(graph.len(), 1, "one graph job, kept: {jobs:?}");
    graph[0].clone()
}

#[test]
fn a_job_that_fails_three_times_is_parked_and_the_memory_goes_on() {
    let dir = tempfile::tempdir().unwrap();
    let store = Arc::new(Store::open(dir.path(), &StoreOptions::default()).unwrap());
    let embedder = Arc::new(DownEmbedder::default());
    let judge = Arc::new(PlainJudge::default());
    let models = Models::with(embedder.clone(), judge.clone());
    // Recall off: no index jobs and no query embedding, so the graph job is the one that embeds.
    let config = EngineConfig {
        recall: false,
        ..EngineConfig::default()
    };
    let engine = Engine::new(store, Some(models), config);
    assert_eq!(recalld::engine::records::PARK_AFTER, 3);

    // Turn 0: the reply carries a note; its fact queues a graph job (embeds, so it fails) and a
    // fact-scoring job (judge only).
    let t0 = 1_767_225_600.0;
    let user0 = "Acme disputed invoice INV-7 over the unit price of widget W7.";
    let reply0 = "Noted the dispute on INV-7.";
    let fact = "Acme disputed invoice INV-7 over the widget W7 unit price.";
    let mut history = vec![json!({"role": "user", "content": user0})];
    decorate(&engine, &history, t0);
    report(&engine, reply0, Some(fact), t0 + 5.0);
    history.push(json!({"role": "assistant", "content": reply0}));
    let kinds: Vec<Value> = jobs(&engine).iter().map(|j| j["job"]["kind"].clone()).collect();
    assert_eq!(
        kinds,
        vec![json!("graph"), json!("score_facts")],
        "the note's jobs, graph first"
    );
    let graph_n = graph_job(&engine)["n"].clone();

    // Failures 1 and 2: counted against the job with the error, which stays queued and runnable
    // (and, oldest first, is the job run again).
    for attempt in 1..=2u64 {
        assert!(!engine.run_next_job(MEMORY).unwrap(), "a failed run reports no job ran");
        assert_eq!(embedder.calls.load(Ordering::SeqCst), attempt as usize);
        let job = graph_job(&engine);
        assert_eq!(job["n"], graph_n);
        assert_eq!(job["attempts"], attempt);
        assert!(job["error"].as_str().unwrap().contains(DOWN), "error kept: {job}");
        assert!(
            engine.has_waiting_job(MEMORY).unwrap(),
            "not parked after {attempt} failures"
        );
        let stats = engine.stats().unwrap();
        assert_eq!(stats["lanes"]["parked"], 0, "not parked after {attempt} failures");
        assert_eq!(stats["lanes"]["failures"], attempt);
        assert_eq!(stats["lanes"]["jobs_run"], 0, "nothing ran behind the failing job");
        assert_eq!(stats["jobs_pending"], 2);
    }

    // Failure 3: parked, kept with its error, and shown in stats.
    assert!(!engine.run_next_job(MEMORY).unwrap());
    assert_eq!(embedder.calls.load(Ordering::SeqCst), 3);
    let job = graph_job(&engine);
    assert_eq!(job["attempts"], 3);
    let stats = engine.stats().unwrap();
    let lanes = &stats["lanes"];
    assert_eq!(lanes["parked"], 1, "{stats}");
    assert_eq!(lanes["failures"], 3);
    assert_eq!(lanes["depth"], 1, "only the fact-scoring job waits");
    assert_eq!(stats["jobs_pending"], 1, "a parked job is not pending");
    let lane = &lanes["memories"][0];
    assert_eq!(lane["memory"], MEMORY);
    let parked = &lane["parked"];
    assert_eq!(parked.as_array().unwrap().len(), 1, "{lane}");
    assert_eq!(parked[0]["n"], graph_n);
    assert_eq!(parked[0]["kind"], "graph");
    assert_eq!(parked[0]["attempts"], 3);
    let error = parked[0]["error"].as_str().unwrap();
    assert!(
        error.contains(DOWN) && error.contains("503"),
        "stats shows the error: {error}"
    );

    // The memory goes on: decorate and report answer (decorate shows the parked job), and the
    // new user message closes turn 0, queuing the judgment of its units behind the parked job.
    history.push(json!({"role": "user", "content": "Can you draft the reply to Acme?"}));
    let info = decorate(&engine, &history, t0 + 60.0);
    assert_eq!(info["lane"]["parked"][0]["kind"], "graph", "decorate's info: {info}");
    report(&engine, "Here is a draft reply to Acme.", None, t0 + 65.0);
    history.push(json!({"role": "assistant", "content": "Here is a draft reply to Acme."}));
    let kinds: Vec<Value> = jobs(&engine).iter().map(|j| j["job"]["kind"].clone()).collect();
    assert_eq!(kinds, vec![json!("graph"), json!("score_facts"), json!("score_units")]);

    // The jobs of other kinds behind the parked one run; the parked one never runs again.
    assert!(engine.run_next_job(MEMORY).unwrap(), "score_facts ran");
    assert!(engine.run_next_job(MEMORY).unwrap(), "score_units ran");
    assert!(judge.boundary_calls.load(Ordering::SeqCst) >= 1);
    for _ in 0..3 {
        assert!(!engine.run_next_job(MEMORY).unwrap(), "nothing left to run");
    }
    assert_eq!(
        embedder.calls.load(Ordering::SeqCst),
        3,
        "the parked job was not run again"
    );
    assert!(!engine.has_waiting_job(MEMORY).unwrap());
    assert_eq!(engine.pending_jobs().unwrap(), (Vec::<String>::new(), 0));
    // `quiet` does not wait for a job that will never run again.
    let started = std::time::Instant::now();
    assert_eq!(engine.quiet(MEMORY, 5_000).unwrap(), json!({"jobs": 0, "parked": 1}));
    assert!(
        started.elapsed() < std::time::Duration::from_secs(2),
        "quiet waited for a parked job"
    );
    let stats = engine.stats().unwrap();
    assert_eq!(stats["lanes"]["jobs_run"], 2);
    assert_eq!(stats["lanes"]["failures"], 3);
    assert_eq!(stats["lanes"]["parked"], 1, "still shown until dealt with");
    assert_eq!(stats["lanes"]["depth"], 0);
    // Per kind, every run is counted and timed, failed ones too.
    let by_kind = &stats["lanes"]["by_kind"];
    assert_eq!(by_kind["graph"]["runs"], 3, "{by_kind}");
    assert_eq!(by_kind["score_facts"]["runs"], 1, "{by_kind}");
    assert_eq!(by_kind["score_units"]["runs"], 1, "{by_kind}");
    assert!(by_kind["graph"]["seconds"].as_f64().unwrap() > 0.0, "{by_kind}");

    // Nothing was dropped: every message, the fact (unplaced: its graph job is parked), the
    // units' scores, and the parked job with its error are all in the export.
    let export = engine.export(MEMORY).unwrap();
    let texts: Vec<String> = export["messages"]
        .as_array()
        .unwrap()
        .iter()
        .filter_map(|m| m["message"]["content"].as_str().map(str::to_owned))
        .collect();
    for m in &history {
        let text = m["content"].as_str().unwrap();
        assert!(texts.iter().any(|t| t == text), "message kept: {text}");
    }
    let facts = export["facts"].as_array().unwrap();
    assert_eq!(facts.len(), 1);
    assert_eq!(facts[0]["note"], fact);
    assert!(facts[0]["subject_entity"].is_null(), "the graph never placed it");
    assert!(
        !export["units"].as_array().unwrap().is_empty(),
        "score_units stored scores"
    );
    let left = export["jobs"].as_array().unwrap();
    assert_eq!(left.len(), 1, "only the parked job is left: {left:?}");
    assert_eq!(left[0]["n"], graph_n);
    assert_eq!(left[0]["attempts"], 3);
    assert!(left[0]["error"].as_str().unwrap().contains(DOWN));
}

/// An embedder that works: one unit vector for every text.
struct PlainEmbedder;

impl Embedder for PlainEmbedder {
    fn id(&self) -> ModelId {
        ModelId {
            name: "test-plain".into(),
            dim: 8,
        }
    }
    fn embed(&self, _: &CallCtx, texts: &[&str]) -> Result<Vec<Vec<f32>>, ModelError> {
        Ok(texts
            .iter()
            .map(|_| vec![1.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0])
            .collect())
    }
}

/// The daemon's stop (`Engine::stop_background`, which `Lanes::stop` calls) cuts a job's model
/// calls short: what the job judged is not applied, even what a judge the stop left alone
/// answered, and the job is not counted as failed. It stays queued as it was and runs whole at
/// the next start.
#[test]
fn a_job_the_stop_cuts_short_stays_queued_as_it_was_and_runs_at_the_next_start() {
    let dir = tempfile::tempdir().unwrap();
    let config = EngineConfig {
        recall: false,
        ..EngineConfig::default()
    };
    let open = || {
        let store = Arc::new(Store::open(dir.path(), &StoreOptions::default()).unwrap());
        let models = Models::with(Arc::new(PlainEmbedder), Arc::new(PlainJudge::default()));
        Engine::new(store, Some(models), config.clone())
    };
    let units = |engine: &Engine| engine.export(MEMORY).unwrap()["units"].as_array().unwrap().len();
    let t0 = 1_767_225_600.0;
    {
        let engine = open();
        let mut history = vec![json!({"role": "user", "content": "Acme disputed invoice INV-7."})];
        decorate(&engine, &history, t0);
        report(
            &engine,
            "Noted the dispute on INV-7.",
            Some("Acme disputed invoice INV-7."),
            t0 + 5.0,
        );
        history.push(json!({"role": "assistant", "content": "Noted the dispute on INV-7."}));
        history.push(json!({"role": "user", "content": "Can you draft the reply to Acme?"}));
        decorate(&engine, &history, t0 + 60.0);
        // The note's jobs run; then the daemon stops with the units' judgment queued.
        assert!(engine.run_next_job(MEMORY).unwrap(), "graph ran");
        assert!(engine.run_next_job(MEMORY).unwrap(), "score_facts ran");
        let queued = jobs(&engine);
        assert_eq!(queued.len(), 1);
        assert_eq!(queued[0]["job"]["kind"], "score_units");
        engine.stop_background();
        // Its judge answers (the stop ends background embeddings, not this judge), but nothing
        // is applied: the stop may have cut other calls of the same job short.
        assert!(!engine.run_next_job(MEMORY).unwrap(), "no job ran");
        assert_eq!(jobs(&engine), queued, "queued as it was: no attempt, no error");
        assert_eq!(units(&engine), 0, "nothing applied");
        let stats = engine.stats().unwrap();
        assert_eq!(stats["lanes"]["failures"], 0, "{stats}");
        assert_eq!(stats["lanes"]["parked"], 0);
    }
    // The next start runs it whole.
    let engine = open();
    assert!(engine.run_next_job(MEMORY).unwrap(), "score_units ran");
    assert!(jobs(&engine).is_empty());
    assert!(units(&engine) > 0, "the units' scores stored");
}
