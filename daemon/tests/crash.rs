//! kill -9 while the lanes are busy: the real daemon is driven through decorate/report on
//! several memories at a small ceiling (cuts, note asks, facts, graph and trace jobs), killed
//! with SIGKILL at random points and restarted, twenty times. Then the lanes drain and every
//! memory is checked: every acknowledged message is in export, no note's facts were written
//! twice, no trace is duplicated, every fact was placed in the graph, nothing is parked.

use crate::util;

use std::collections::{HashMap, HashSet};
use std::time::{Duration, Instant};

use recalld::client::Client;
use serde_json::{json, Value};

const MEMORIES: usize = 3;
const KILLS: usize = 20;

/// One memory's conversation as its agent holds it.
struct Agent {
    memory: String,
    history: Vec<Value>,
    turn: usize,
    now: f64,
    /// Message texts the daemon acknowledged storing.
    acknowledged: Vec<String>,
}

fn reply(message: Value) -> Value {
    json!({"id": "r", "object": "chat.completion", "model": "gpt-4o",
        "choices": [{"index": 0, "finish_reason": "stop", "message": message}]})
}

impl Agent {
    /// One step: a user message, a note call when asked, the reply. Returns false when the
    /// daemon went away mid-step (the agent just carries on with its history next time).
    fn step(&mut self, c: &mut Client) -> bool {
        if self.history.last().is_none_or(|m| m["role"] != "user") {
            let text = format!(
                "{} turn {}: the order ORD-{} for customer {} ships from warehouse W{} on day {}.",
                self.memory,
                self.turn,
                self.turn * 7,
                ["Acme", "Globex", "Initech"][self.turn % 3],
                self.turn % 5,
                self.turn
            );
            self.history.push(json!({"role": "user", "content": text}));
        }
        self.now += 30.0;
        let out = c.call(
            "decorate",
            json!({"memory": self.memory, "ceiling": 900, "now": self.now,
                "request": {"model": "gpt-4o", "messages": self.history}}),
        );
        let Ok(out) = out else { return false };
        let user = self.history.last().unwrap()["content"].as_str().unwrap().to_owned();
        if !self.acknowledged.contains(&user) {
            self.acknowledged.push(user);
        }
        if out["info"]["note_ask"] == true {
            let leaving: Vec<Value> = out["info"]["episodes"]
                .as_array()
                .unwrap()
                .iter()
                .filter(|e| e["state"] == "leaving")
                .map(|e| {
                    // Seqs too: two episodes may share a turn (a cut between its units).
                    json!({"note": format!("{}: turns {} to {} (seqs {}-{}) covered orders for warehouse shipments.", self.memory, e["turns"][0], e["turns"][1], e["seqs"][0], e["seqs"][1]),
                        "subject": format!("{} orders", self.memory), "object": format!("turns {}-{}", e["turns"][0], e["turns"][1]), "milestone": false})
                })
                .collect();
            let call = json!({"role": "assistant", "content": null, "tool_calls": [{"id": format!("{}-note-{}", self.memory, self.turn),
                "type": "function", "function": {"name": "note", "arguments": json!({"notes": leaving}).to_string()}}]});
            if c.call(
                "report",
                json!({"memory": self.memory, "now": self.now + 1.0, "response": reply(call)}),
            )
            .is_err()
            {
                return false;
            }
        }
        let text = format!("{} answer {}: confirmed.", self.memory, self.turn);
        let ok = c
            .call(
                "report",
                json!({"memory": self.memory, "now": self.now + 2.0,
                    "response": reply(json!({"role": "assistant", "content": text}))}),
            )
            .is_ok();
        // Reported or not, the agent's history holds the reply: a full-history decorate
        // stores it next time if the daemon did not.
        self.history.push(json!({"role": "assistant", "content": text}));
        if ok {
            self.acknowledged.push(text);
        }
        self.turn += 1;
        ok
    }
}

/// A small xorshift: the kill points vary, the test stays reproducible.
struct Rng(u64);
impl Rng {
    fn below(&mut self, n: u64) -> u64 {
        self.0 ^= self.0 << 13;
        self.0 ^= self.0 >> 7;
        self.0 ^= self.0 << 17;
        self.0 % n
    }
}

#[test]
fn kill_9_while_lanes_are_busy_loses_nothing_and_runs_every_job_once() {
    let mut d = util::Daemon::start();
    let mut agents: Vec<Agent> = (0..MEMORIES)
        .map(|i| Agent {
            memory: format!("crash-{i}"),
            history: vec![json!({"role": "system", "content": "You track warehouse orders."})],
            turn: 0,
            now: 1_767_225_600.0,
            acknowledged: Vec::new(),
        })
        .collect();
    let mut rng = Rng(0x9e37_79b9_7f4a_7c15);
    let started = Instant::now();
    for _ in 0..KILLS {
        // The agents run on their own thread; the kill lands wherever they are, requests in
        // flight and lane jobs included.
        let mut c = d.client();
        let stop = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false));
        let flag = stop.clone();
        let mut i = rng.below(MEMORIES as u64) as usize;
        let driver = std::thread::spawn(move || {
            while !flag.load(std::sync::atomic::Ordering::SeqCst) {
                agents[i].step(&mut c);
                i = (i + 1) % MEMORIES;
            }
            agents
        });
        std::thread::sleep(Duration::from_millis(150 + rng.below(350)));
        let mut child = d.child.take().unwrap();
        child.kill().unwrap(); // SIGKILL
        child.wait().unwrap();
        stop.store(true, std::sync::atomic::Ordering::SeqCst);
        agents = driver.join().unwrap();
        d.spawn(&[]);
    }
    let mut c = d.client();
    // A last step each, then let the lanes drain.
    for a in &mut agents {
        assert!(a.step(&mut c));
    }
    eprintln!("{KILLS} kills in {:.1} s", started.elapsed().as_secs_f64());
    let drain_start = Instant::now();
    let deadline = Instant::now() + Duration::from_secs(180);
    loop {
        let stats = c.call("stats", json!({})).unwrap();
        if stats["jobs_pending"] == 0 {
            assert_eq!(stats["lanes"]["parked"], 0, "no job failed: {}", stats["lanes"]);
            break;
        }
        assert!(Instant::now() < deadline, "lanes did not drain: {}", stats["lanes"]);
        std::thread::sleep(Duration::from_millis(50));
    }
    eprintln!("lanes drained in {:.1} s", drain_start.elapsed().as_secs_f64());
    let mut total_facts = 0;
    for a in &agents {
        let export = c.call("export", json!({"memory": a.memory})).unwrap();
        let texts: HashSet<String> = export["messages"]
            .as_array()
            .unwrap()
            .iter()
            .filter(|m| m["superseded_at"].is_null())
            .filter_map(|m| m["message"]["content"].as_str().map(str::to_owned))
            .collect();
        for t in &a.acknowledged {
            assert!(texts.contains(t), "{}: acknowledged message lost: {t}", a.memory);
        }
        // Each note call's facts were written once.
        let mut per_note: HashMap<(u64, String), usize> = HashMap::new();
        for f in export["facts"].as_array().unwrap() {
            *per_note
                .entry((f["note_seq"].as_u64().unwrap(), f["note"].as_str().unwrap().to_owned()))
                .or_default() += 1;
            assert!(f["subject_entity"].is_u64(), "{}: a graph job was lost: {f}", a.memory);
            total_facts += 1;
        }
        let twice: Vec<_> = per_note.iter().filter(|(_, n)| **n > 1).collect();
        assert!(
            twice.is_empty(),
            "{}: a note's facts were written twice: {twice:?}",
            a.memory
        );
        let note_ids: Vec<&str> = export["messages"]
            .as_array()
            .unwrap()
            .iter()
            .filter(|m| m["note"] == true)
            .filter_map(|m| m["message"]["tool_calls"][0]["id"].as_str())
            .collect();
        let unique: HashSet<&&str> = note_ids.iter().collect();
        assert_eq!(
            unique.len(),
            note_ids.len(),
            "{}: a note call was taken twice",
            a.memory
        );
        // No trace twice: a fact is judged once against an episode, a restatement counted once.
        let mut seen = HashSet::new();
        for t in export["traces"].as_array().unwrap() {
            if t["kind"] != "encoding" {
                let key = (t["episode"].clone(), t["fact"].clone(), t["kind"].clone());
                assert!(seen.insert(key.clone()), "{}: duplicate trace {key:?}", a.memory);
            }
        }
    }
    assert!(total_facts > 0, "the run wrote facts (note asks were answered)");
}
