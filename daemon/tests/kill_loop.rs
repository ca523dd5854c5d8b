//! Proof against crashes: clients decorate and report across several memories while the real
//! daemon is SIGKILLed at random moments and restarted. Afterwards every acknowledged report
//! is in export, nothing is stored twice (messages, note calls, facts, traces), and the lanes
//! drain. RECALLD_KILLS sets the number of kills (default 50; the benchmark run uses 1000),
//! RECALLD_KILL_SEED replays a run.

use crate::convo;
use crate::util;

use std::collections::{BTreeMap, HashSet};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use convo::Convo;
use recalld::client::{Client, ClientError};
use serde_json::{json, Value};
use util::{indexed_ids, Daemon};

const CLIENTS: usize = 3;
const MEMORIES_PER_CLIENT: usize = 2;

struct Rng(u64);

impl Rng {
    fn below(&mut self, n: u64) -> u64 {
        // xorshift64*: enough to spread the kill points; the seed is printed for replays.
        self.0 ^= self.0 >> 12;
        self.0 ^= self.0 << 25;
        self.0 ^= self.0 >> 27;
        self.0.wrapping_mul(0x2545_f491_4f6c_dd1d) % n
    }
}

/// Runs `step` until it gets an answer, reconnecting while the daemon is down. A server error
/// is a failure of the test: a crash must never turn into a refused request.
fn until_answered(
    socket: &std::path::Path,
    c: &mut Option<Client>,
    mut step: impl FnMut(&mut Client) -> Result<Value, ClientError>,
) -> Value {
    loop {
        if c.is_none() {
            match Client::connect(socket) {
                Ok(client) => *c = Some(client),
                Err(_) => {
                    std::thread::sleep(Duration::from_millis(5));
                    continue;
                }
            }
        }
        match step(c.as_mut().unwrap()) {
            Ok(v) => return v,
            Err(ClientError::Server(e)) => panic!("server error during the kill loop: {} {}", e.code, e.message),
            Err(_) => *c = None,
        }
    }
}

#[test]
fn sigkill_at_random_points_loses_no_acknowledged_report_and_duplicates_nothing() {
    let kills: u64 = std::env::var("RECALLD_KILLS")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(50);
    let seed: u64 = std::env::var("RECALLD_KILL_SEED")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or_else(|| {
            std::time::SystemTime::now()
                .duration_since(std::time::UNIX_EPOCH)
                .unwrap()
                .as_nanos() as u64
                | 1
        });
    eprintln!("kill loop: {kills} kills, RECALLD_KILL_SEED={seed}");
    let mut rng = Rng(seed);
    // Fact scoring judges each new fact against the most recent episodes only, so the lanes
    // keep pace with the clients and drain quickly after the last restart.
    // Recall is on, with a short embedding deadline: a daemon lives 5–65 ms between kills, less
    // than embedding a message takes in a debug build, so recall mostly searches by words here
    // (what is tested is that its tables and indexes survive the kills).
    let mut d = Daemon::start_with_config("[engine]\nmax_episodes_judged = 4\nrecall_deadline_ms = 20\n");
    let config = d.dir.path().join("recalld.toml");
    let config = config.to_str().unwrap().to_string();
    let socket = d.socket.clone();
    let stop = Arc::new(AtomicBool::new(false));
    let acknowledged = Arc::new(AtomicU64::new(0));
    // Memory → the turns whose report was acknowledged.
    let acked: Arc<Mutex<BTreeMap<String, Vec<u64>>>> = Arc::default();
    let started = Instant::now();

    let mut clients = Vec::new();
    for k in 0..CLIENTS {
        let (socket, stop, acknowledged, acked) = (socket.clone(), stop.clone(), acknowledged.clone(), acked.clone());
        clients.push(std::thread::spawn(move || {
            let mut convos: Vec<Convo> = (0..MEMORIES_PER_CLIENT)
                .map(|m| {
                    let mut convo = Convo::new(&format!("c{k}m{m}"));
                    convo.note_every = 2;
                    convo
                })
                .collect();
            let mut conn: Option<Client> = None;
            let mut i = 0;
            while !stop.load(Ordering::Relaxed) {
                let convo = &mut convos[i % MEMORIES_PER_CLIENT];
                i += 1;
                until_answered(&socket, &mut conn, |c| convo.decorate_again(c));
                until_answered(&socket, &mut conn, |c| convo.report_once(c));
                convo.acknowledge_report();
                acked
                    .lock()
                    .unwrap()
                    .entry(convo.memory.clone())
                    .or_default()
                    .push(convo.turn);
                acknowledged.fetch_add(1, Ordering::Relaxed);
            }
            convos
        }));
    }

    let mut restarts = Duration::ZERO;
    for _ in 0..kills {
        std::thread::sleep(Duration::from_millis(5 + rng.below(60)));
        let mut child = d.child.take().unwrap();
        child.kill().unwrap(); // SIGKILL
        child.wait().unwrap();
        let t = Instant::now();
        d.spawn(&["--config", &config]);
        restarts += t.elapsed();
    }
    // Let the clients finish their step on the last daemon, then stop them.
    std::thread::sleep(Duration::from_millis(200));
    stop.store(true, Ordering::Relaxed);
    let convos: Vec<Convo> = clients.into_iter().flat_map(|h| h.join().unwrap()).collect();
    let elapsed = started.elapsed();
    let total = acknowledged.load(Ordering::Relaxed);
    eprintln!(
        "kill loop: {kills} kills in {:.1} s (restart to listening: mean {:.0} ms), {total} acknowledged reports",
        elapsed.as_secs_f64(),
        restarts.as_secs_f64() * 1000.0 / kills.max(1) as f64
    );
    assert!(
        total >= kills / 2,
        "the clients made progress between kills ({total} reports)"
    );

    let mut c = d.client();
    let t = Instant::now();
    convo::drain(&mut c);
    eprintln!(
        "kill loop: lanes drained {:.1} s after the last restart",
        t.elapsed().as_secs_f64()
    );
    let acked = acked.lock().unwrap();
    let mut exports = BTreeMap::new();
    for convo in &convos {
        let export = c.call("export", json!({"memory": convo.memory})).unwrap();
        check(
            convo,
            &export,
            acked.get(&convo.memory).map(Vec::as_slice).unwrap_or_default(),
        );
        exports.insert(convo.memory.clone(), export);
    }
    d.stop();
    check_indexes(&d.data.join("index"), &exports);
}

/// After the kills and the drain, each memory's word and vector indexes hold exactly the facts
/// and passages its export has (recall's documents: fact n is 2n, passage n is 2n + 1), and its
/// entity index every entity.
fn check_indexes(root: &std::path::Path, exports: &BTreeMap<String, Value>) {
    let words = recalld::index::words::Words::open(root, 8).unwrap();
    let vectors = recalld::index::vectors::Vectors::open(root, 384, "vectors", 8).unwrap();
    let entities = recalld::index::vectors::Vectors::open(root, 384, "entities", 8).unwrap();
    let mut checked = 0;
    for dir in std::fs::read_dir(root).unwrap() {
        let Ok(id) = std::fs::read_to_string(dir.unwrap().path().join("memory.id")) else {
            continue;
        };
        // The daemon's id is qualified by the caller's namespace ("u<uid>/").
        let name = id.split_once('/').map_or(id.as_str(), |(_, n)| n);
        let export = exports.get(name).unwrap_or_else(|| {
            panic!(
                "an index directory for {id:?}, not one of the memories written ({:?})",
                exports.keys().collect::<Vec<_>>()
            )
        });
        let want = indexed_ids(export);
        let mut held = words.ids(&id).unwrap();
        held.sort_unstable();
        assert_eq!(held, want, "{name}: the word index holds what the store does");
        let mut held = vectors.ids(&id).unwrap();
        held.sort_unstable();
        assert_eq!(held, want, "{name}: the vector index holds what the store does");
        let want: Vec<u64> = (0..export["entities"].as_array().unwrap().len() as u64).collect();
        assert_eq!(
            entities.ids(&id).unwrap(),
            want,
            "{name}: the entity index holds every entity"
        );
        checked += 1;
    }
    assert!(checked > 0, "no memory had indexes: nothing was checked");
}

fn check(convo: &Convo, export: &Value, acked: &[u64]) {
    let memory = &convo.memory;
    let messages = export["messages"].as_array().unwrap();
    // Every acknowledged report is there, once, after its user message.
    let active: Vec<&Value> = messages
        .iter()
        .filter(|m| m["superseded_at"].is_null() && m["note"] == false)
        .collect();
    let texts: Vec<String> = active
        .iter()
        .map(|m| m["message"]["content"].as_str().unwrap_or_default().to_string())
        .collect();
    let mut expected = Vec::new();
    for t in 1..=convo.turn {
        expected.push(convo.user_text(t));
        if acked.contains(&t) {
            expected.push(format!("Noted turn {t} for {memory}."));
        }
    }
    assert_eq!(
        texts, expected,
        "{memory}: the stored history is exactly the acknowledged conversation"
    );
    assert!(
        messages.iter().all(|m| m["superseded_at"].is_null()),
        "{memory}: a retry was taken for an edit"
    );
    // Note calls: one stored per call id.
    let mut calls = HashSet::new();
    for m in messages.iter().filter(|m| m["note"] == true) {
        for call in m["message"]["tool_calls"].as_array().into_iter().flatten() {
            assert!(
                calls.insert(call["id"].as_str().unwrap().to_string()),
                "{memory}: note call {} twice",
                call["id"]
            );
        }
    }
    // Facts: one per acknowledged turn's note, never two.
    let mut notes = HashSet::new();
    for f in export["facts"].as_array().unwrap() {
        assert!(
            notes.insert(f["note"].as_str().unwrap().to_string()),
            "{memory}: fact {} twice",
            f["note"]
        );
    }
    for t in acked.iter().filter(|t| convo.notes_on(**t)) {
        assert!(
            notes.iter().any(|n| n.starts_with(&format!("{memory} fact {t}:"))),
            "{memory}: the fact of acknowledged turn {t} is missing"
        );
    }
    // Traces: one per (episode, kind, fact).
    let mut traces = HashSet::new();
    for t in export["traces"].as_array().unwrap() {
        let key = (t["episode"].as_u64(), t["kind"].to_string(), t["fact"].as_u64());
        assert!(traces.insert(key.clone()), "{memory}: trace {key:?} twice");
    }
}
