//! The three tiers of the cross-memory block (seed 003), timed (not a test).
//!
//!     cargo run --release -p recalld --example tiers_bench [-- --users 20 --facts 200 --queries 20]
//!
//! One agent, `--users` users. Each user has `--facts` facts, noted over conversations of 50
//! facts each and handed to the agent's scope through the real path (decorate, report with a
//! note call, `end`, the lane's handoff with the built-in models: embedding and consolidation),
//! plus a core block and the hot turns those conversations left. Then each user opens
//! `--queries` new conversations with a question; every decorate reads the hot, vector and
//! graph tiers concurrently, and `info.recall.across.ms` says how long each took. Prints p50/p99
//! per tier (targets from the seed: hot < 5 ms, vector < 50 ms, graph < 150 ms) and the bytes
//! each tier holds per user (its records as stored, vectors included).

use std::sync::Arc;
use std::time::Instant;

use recalld::engine::{Engine, EngineConfig};
use recalld::models::{Models, ModelsConfig};
use recalld::store::{keys, Store, StoreOptions, Table};
use recalld_protocol::ops::{DecorateArgs, ReportArgs};
use serde_json::{json, Value};

const NAMES: &[&str] = &[
    "Dana", "Priya", "Tomas", "Lena", "Omar", "Grace", "Ivan", "Mei", "Ravi", "Sofia",
];
const TOPICS: &[&str] = &[
    "flight to Seattle",
    "refund for the March invoice",
    "seat upgrade",
    "baggage allowance",
    "travel insurance",
    "hotel in Lisbon",
    "quarterly budget",
    "database migration",
    "team offsite",
    "dentist appointment",
    "piano lessons",
    "marathon training",
    "tax return",
    "car lease",
    "kitchen renovation",
];
const VERBS: &[&str] = &[
    "prefers",
    "decided on",
    "is waiting on",
    "resolved",
    "asked about",
    "worries about",
    "is learning about",
];

fn arg(name: &str, default: usize) -> usize {
    let args: Vec<String> = std::env::args().collect();
    args.iter()
        .position(|a| a == name)
        .and_then(|i| args.get(i + 1))
        .and_then(|v| v.parse().ok())
        .unwrap_or(default)
}

fn pct(v: &mut [f64], p: f64) -> f64 {
    v.sort_by(f64::total_cmp);
    v[((v.len() as f64 - 1.0) * p).round() as usize]
}

fn main() {
    let (users, facts, queries) = (arg("--users", 20), arg("--facts", 200), arg("--queries", 20));
    let dir = tempfile::tempdir().unwrap();
    let store = Arc::new(Store::open(dir.path(), &StoreOptions::default()).unwrap());
    let model_dir = std::env::var("RECALLD_MODEL_DIR")
        .unwrap_or_else(|_| concat!(env!("CARGO_MANIFEST_DIR"), "/../models/all-MiniLM-L6-v2").into());
    let cfg: ModelsConfig = toml::from_str(&format!("[embedder]\npath = {model_dir:?}\n")).unwrap();
    let models = Models::load(&cfg, dir.path()).unwrap();
    let engine = Engine::new(store.clone(), Some(models), EngineConfig::default());
    let t0 = 1_767_225_600.0;
    let started = Instant::now();
    let mut k = 0usize;
    for u in 0..users {
        let user = format!("user{u}");
        engine
            .set_core_block(
                "bench",
                Some(&user),
                "user",
                &format!("{user} works as an engineer and prefers short answers."),
                Some(t0),
            )
            .unwrap();
        for c in 0..facts.div_ceil(50) {
            let memory = format!("{user}-c{c}");
            let now = t0 + (u * 100 + c) as f64 * 60.0;
            decorate(
                &engine,
                &memory,
                &user,
                &format!("Let's go over my {} and a few other things.", TOPICS[c % TOPICS.len()]),
                now,
            );
            let notes: Vec<Value> = (0..50.min(facts - c * 50))
                .map(|_| {
                    k += 1;
                    let name = NAMES[k % NAMES.len()];
                    let topic = TOPICS[(k / 7) % TOPICS.len()];
                    json!({"note": format!("{name} {} the {topic} (item {k}).", VERBS[k % VERBS.len()]),
                        "subject": name, "object": topic, "milestone": false})
                })
                .collect();
            let call = json!({"id": format!("n-{memory}"), "type": "function", "function": {"name": "note", "arguments": json!({"notes": notes}).to_string()}});
            let reply = json!({"id": "r", "object": "chat.completion", "model": "gpt-4o", "choices": [{"index": 0,
                "finish_reason": "stop", "message": {"role": "assistant", "content": "All noted.", "tool_calls": [call]}}]});
            engine
                .report(ReportArgs {
                    memory: memory.clone(),
                    response: reply,
                    now: Some(now + 1.0),
                })
                .unwrap();
            engine.end(&memory, Some(now + 2.0)).unwrap();
            while engine.run_next_job(&memory).unwrap() {}
        }
        eprintln!(
            "user {}/{users} ready ({:.0} s)",
            u + 1,
            started.elapsed().as_secs_f64()
        );
    }
    let (mut hot, mut vector, mut graph, mut total) = (Vec::new(), Vec::new(), Vec::new(), Vec::new());
    let mut facts_read = Vec::new();
    for q in 0..queries {
        for u in 0..users {
            let user = format!("user{u}");
            let question = format!(
                "What did {} decide about the {}?",
                NAMES[(q + u) % NAMES.len()],
                TOPICS[(q * 3 + u) % TOPICS.len()]
            );
            let info = decorate(
                &engine,
                &format!("{user}-q{q}"),
                &user,
                &question,
                t0 + 30.0 * 86_400.0 + q as f64,
            );
            let ms = &info["recall"]["across"]["ms"];
            hot.push(ms["hot"].as_f64().unwrap());
            vector.push(ms["vector"].as_f64().unwrap());
            graph.push(ms["graph"].as_f64().unwrap());
            total.push(ms["total"].as_f64().unwrap());
            facts_read.push(ms["facts"].as_f64().unwrap());
        }
    }
    // Bytes per user and tier, as stored.
    let (hot_bytes, fact_bytes, vector_bytes) = store
        .read(|r| {
            let mut hot_bytes = 0usize;
            let mut fact_bytes = 0usize;
            let mut vector_bytes = 0usize;
            r.visit(
                Table::Hot,
                &keys::memory_prefix("bench"),
                &keys::memory_prefix("bench"),
                |_, v: Value| {
                    hot_bytes += rmp_serde::to_vec_named(&v).map(|b| b.len()).unwrap_or(0);
                    Ok(true)
                },
            )?;
            r.visit(
                Table::ScopeFacts,
                &keys::memory_prefix("bench"),
                &keys::memory_prefix("bench"),
                |_, v: Value| {
                    let all = rmp_serde::to_vec_named(&v).map(|b| b.len()).unwrap_or(0);
                    let vec = v["v"].as_array().map_or(0, |a| a.len() * 5 + 3);
                    fact_bytes += all - vec;
                    vector_bytes += vec;
                    Ok(true)
                },
            )?;
            Ok((hot_bytes, fact_bytes, vector_bytes))
        })
        .unwrap();
    let n = users.max(1) as f64;
    println!(
        "tiers_bench: {users} users × {facts} facts, {queries} queries each ({} decorates), built in {:.0} s",
        hot.len(),
        started.elapsed().as_secs_f64()
    );
    println!("| tier | p50 ms | p99 ms | target | bytes per user |");
    println!("|---|---|---|---|---|");
    println!(
        "| hot (core blocks, recent turns) | {:.3} | {:.3} | < 5 | {:.0} |",
        pct(&mut hot, 0.5),
        pct(&mut hot, 0.99),
        hot_bytes as f64 / n
    );
    println!(
        "| vector (facts by relevance) | {:.3} | {:.3} | < 50 | {:.0} (of which vectors {:.0}) |",
        pct(&mut vector, 0.5),
        pct(&mut vector, 0.99),
        (fact_bytes + vector_bytes) as f64 / n,
        vector_bytes as f64 / n
    );
    println!(
        "| graph (facts of named entities) | {:.3} | {:.3} | < 150 | {:.0} (facts without vectors) |",
        pct(&mut graph, 0.5),
        pct(&mut graph, 0.99),
        fact_bytes as f64 / n
    );
    println!(
        "| whole block (tiers in parallel, merged) | {:.3} | {:.3} | | |",
        pct(&mut total, 0.5),
        pct(&mut total, 0.99)
    );
    // The agent's facts are decoded again only when its scope changed (the first query here).
    let miss = facts_read.iter().copied().fold(0.0, f64::max);
    println!(
        "agent's facts read (in the block): p50 {:.3} ms, p99 {:.3} ms; decoded afresh after a change: {miss:.1} ms",
        pct(&mut facts_read, 0.5),
        pct(&mut facts_read, 0.99)
    );
}

fn decorate(engine: &Engine, memory: &str, user: &str, text: &str, now: f64) -> Value {
    engine
        .decorate(DecorateArgs {
            now: Some(now),
            ceiling: Some(16_000),
            agent: Some("bench".into()),
            user: Some(user.into()),
            ..DecorateArgs::new(
                memory,
                json!({"model": "gpt-4o", "messages": [{"role": "user", "content": text}]}),
            )
        })
        .unwrap()
        .info
}
