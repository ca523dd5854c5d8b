//! The graph lane's cost as the graph grows (not a test): a memory's graph is grown by notes of
//! new facts between new names, and the `Graph` jobs' mean time is read from `stats` at each
//! size. Resolving a name searches the memory's entity index, so the time should not grow with
//! the number of entities (before the index, each job read every entity vector from the store).
//!
//!     cargo run --release -p recalld --example graph_bench [-- --sizes 1000,5000,10000 --facts 50]
//!     cargo run --release -p recalld --example graph_bench -- --scan
//!
//! `--scan` runs without search indexes (`[engine] recall = false`): each name is then compared
//! with every stored entity vector, as every name was before the entity index.
//! Each note holds `--facts` facts, each between two names never seen before (a first name and
//! a word from two lists, so no two merge). The figures are in the closing note of the session
//! that wrote this.

use std::path::PathBuf;
use std::sync::Arc;
use std::time::{Duration, Instant};

use recalld::engine::{Engine, EngineConfig};
use recalld::lanes::Lanes;
use recalld::models::{Models, ModelsConfig};
use recalld::store::{Store, StoreOptions};
use recalld_protocol::ops::ReportArgs;
use serde_json::{json, Value};

const FIRST: [&str; 40] = [
    "Amara", "Bruno", "Chiara", "Dmitri", "Elif", "Farid", "Greta", "Hiroshi", "Ines", "Jonas", "Kofi", "Lena",
    "Mateo", "Nadia", "Oskar", "Priya", "Quentin", "Rosa", "Sven", "Tamsin", "Ulla", "Viktor", "Wren", "Ximena",
    "Yusuf", "Zara", "Anton", "Bea", "Cyrus", "Dalia", "Emil", "Fatou", "Goran", "Hana", "Idris", "Jude", "Kaia",
    "Luca", "Mina", "Nils",
];
const THINGS: [&str; 30] = [
    "garden",
    "kayak",
    "violin",
    "bakery",
    "novel",
    "bicycle",
    "telescope",
    "podcast",
    "orchard",
    "studio",
    "trailer",
    "workshop",
    "canoe",
    "piano",
    "vineyard",
    "gallery",
    "cabin",
    "festival",
    "quilt",
    "mural",
    "greenhouse",
    "drone",
    "aquarium",
    "library",
    "sculpture",
    "tent",
    "lantern",
    "pottery",
    "chess club",
    "choir",
];

fn arg(name: &str, default: &str) -> String {
    let args: Vec<String> = std::env::args().collect();
    args.iter()
        .position(|a| a == name)
        .and_then(|i| args.get(i + 1).cloned())
        .unwrap_or_else(|| default.to_string())
}

/// The `i`th name never used before: "Amara's garden 12" style names would be ids to the
/// guard; these are "<first> <thing> <round>" in words.
fn name(i: usize) -> String {
    let round = [
        "north", "south", "east", "west", "upper", "lower", "old", "new", "little", "grand",
    ];
    let f = FIRST[i % FIRST.len()];
    let t = THINGS[(i / FIRST.len()) % THINGS.len()];
    let r = i / (FIRST.len() * THINGS.len());
    let mut words = vec![format!("{f}'s"), t.to_string()];
    let mut r = r;
    while r > 0 {
        words.push(round[r % round.len()].to_string());
        r /= round.len();
    }
    words.join(" ")
}

fn note(engine: &Engine, facts: Vec<Value>, now: f64) {
    let call = json!({"id": format!("call-{now}"), "type": "function",
        "function": {"name": "note", "arguments": json!({"notes": facts}).to_string()}});
    let reply = json!({"id": "r", "object": "chat.completion", "model": "gpt-4o", "choices": [{"index": 0,
        "finish_reason": "tool_calls", "message": {"role": "assistant", "content": format!("Noted at {now}."), "tool_calls": [call]}}]});
    engine
        .report(ReportArgs {
            memory: "g".into(),
            response: reply,
            now: Some(now),
        })
        .unwrap();
}

/// One note of `per_note` facts, each between two names never used before; the lane drains.
fn note_new_names(engine: &Engine, next: &mut usize, per_note: usize, now: &mut f64) {
    let facts = (0..per_note)
        .map(|k| {
            let (s, o) = (name(*next + 2 * k), name(*next + 2 * k + 1));
            json!({"note": format!("{s} is next to {o}."), "subject": s, "object": o, "milestone": false})
        })
        .collect();
    note(engine, facts, *now);
    *next += 2 * per_note;
    *now += 60.0;
    drain(engine);
}

fn drain(engine: &Engine) {
    while engine.pending_jobs().unwrap().1 > 0 {
        std::thread::sleep(Duration::from_millis(20));
    }
}

fn graph_time(engine: &Engine) -> (u64, f64) {
    let stats = engine.stats().unwrap();
    let g = &stats["lanes"]["by_kind"]["graph"];
    (g["runs"].as_u64().unwrap_or(0), g["seconds"].as_f64().unwrap_or(0.0))
}

fn main() {
    let sizes: Vec<usize> = arg("--sizes", "1000,5000,10000")
        .split(',')
        .map(|s| s.parse().unwrap())
        .collect();
    let per_note: usize = arg("--facts", "50").parse().unwrap();
    let model_dir = std::env::var_os("RECALLD_MODEL_DIR")
        .map(PathBuf::from)
        .unwrap_or_else(|| PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../models/all-MiniLM-L6-v2"));
    let dir = tempfile::tempdir().unwrap();
    let store = Arc::new(Store::open(dir.path(), &StoreOptions::default()).unwrap());
    let cfg: ModelsConfig = toml::from_str(&format!("[embedder]\npath = {:?}\n", model_dir)).unwrap();
    let models = Models::load(&cfg, dir.path()).unwrap();
    let config = EngineConfig {
        recall: !std::env::args().any(|a| a == "--scan"),
        ..EngineConfig::default()
    };
    let engine = Arc::new(Engine::new(store, Some(models), config));
    let lanes = Lanes::start(engine.clone(), 1, 0);
    println!("| entities | graph jobs | mean graph job (ms) | per fact (ms) |");
    println!("|---|---|---|---|");
    let (mut next, mut now) = (0usize, 1000.0);
    for &size in &sizes {
        // Grow to the size (two new names per fact), then measure the next five notes alone.
        let started = Instant::now();
        while next < size {
            note_new_names(&engine, &mut next, per_note, &mut now);
        }
        eprintln!("grown to {next} names in {:.0} s", started.elapsed().as_secs_f64());
        let (runs0, secs0) = graph_time(&engine);
        for _ in 0..5 {
            note_new_names(&engine, &mut next, per_note, &mut now);
        }
        let (runs, secs) = graph_time(&engine);
        let (runs, secs) = (runs - runs0, secs - secs0);
        let entities = engine.export("g").unwrap()["entities"].as_array().unwrap().len();
        eprintln!(
            "entity index: {:?}",
            engine.entity_index("g").unwrap().map(|(ids, mark)| (ids.len(), mark))
        );
        println!(
            "| {entities} | {runs} | {:.1} | {:.2} |",
            secs * 1000.0 / runs as f64,
            secs * 1000.0 / (runs as usize * per_note) as f64
        );
    }
    lanes.stop();
}
