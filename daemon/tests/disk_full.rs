//! A full disk through the real daemon binary (issue 11, "Disk full and map growth without
//! corruption"). As root, the daemon's data directory is a small tmpfs holding filler files,
//! and the LMDB map starts at 1 MB so it grows several times on the way. Conversations with
//! large messages are decorated and reported until an op fails; that op must be a clean
//! `internal` error reply about storage (not a crash), the daemon must still answer `health`,
//! and every acknowledged message must be in `export`. Then a filler is removed: the failed op
//! succeeds when sent again, the next conversation too. In rounds: large user messages (the
//! disk fills on a decorate), then large replies (on a report), until both ops have met it. After a restart on the same
//! directory every acknowledged message is there exactly once.
//!
//! Not root, or no tmpfs can be mounted: the test prints why and passes without running.

use crate::util;

use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::Instant;

use recalld::client::{Client, ClientError};
use serde_json::{json, Value};

const DISK: &str = "size=20m";
const FILLER_BYTES: usize = 2 << 20;
const MAX_ROUNDS: usize = 4;

/// Sizes of one round's messages: odd rounds' user messages are large (the disk fills on a
/// decorate), even rounds' replies (it fills on a report).
#[derive(Clone, Copy)]
struct Shape {
    user: usize,
    reply: usize,
}
const USER_HEAVY: Shape = Shape {
    user: 96 * 1024,
    reply: 24 * 1024,
};
const REPLY_HEAVY: Shape = Shape {
    user: 512,
    reply: 128 * 1024,
};

/// Unmounts on drop, even when the test panics (declared before the daemon, so the daemon is
/// killed first and the mount is not busy).
struct Unmount(PathBuf);

impl Drop for Unmount {
    fn drop(&mut self) {
        let ok = Command::new("umount").arg(&self.0).status().is_ok_and(|s| s.success());
        if !ok {
            let _ = Command::new("umount").arg("-l").arg(&self.0).status();
        }
    }
}

/// Text of about `bytes` bytes that differs from every other call's (words from a seed), so no
/// two stored messages are alike.
fn text(tag: &str, seed: u64, bytes: usize) -> String {
    const WORDS: [&str; 16] = [
        "warehouse",
        "order",
        "invoice",
        "carrier",
        "pallet",
        "customer",
        "refund",
        "ledger",
        "shipment",
        "route",
        "depot",
        "freight",
        "parcel",
        "manifest",
        "quota",
        "tariff",
    ];
    let mut s = String::with_capacity(bytes + 64);
    s.push_str(tag);
    let mut x = seed.wrapping_mul(0x9e37_79b9_7f4a_7c15) | 1;
    while s.len() < bytes {
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        s.push(' ');
        s.push_str(WORDS[(x % 16) as usize]);
        s.push_str(&((x >> 8) % 10_000).to_string());
    }
    s
}

fn reply(content: &str) -> Value {
    json!({"id": "r", "object": "chat.completion", "model": "gpt-4o",
        "choices": [{"index": 0, "finish_reason": "stop",
            "message": {"role": "assistant", "content": content}}]})
}

/// One step of the driver: a decorate or a report of one conversation.
#[derive(Clone)]
enum Step {
    /// The whole history, oldest first, alternating user and assistant; the last is new.
    Decorate {
        memory: String,
        history: Vec<String>,
    },
    Report {
        memory: String,
        answer: String,
    },
}

impl Step {
    fn send(&self, c: &mut Client) -> Result<Value, ClientError> {
        match self {
            Step::Decorate { memory, history } => {
                let mut messages = vec![json!({"role": "system", "content": "You track warehouse orders."})];
                for (n, text) in history.iter().enumerate() {
                    let role = if n % 2 == 0 { "user" } else { "assistant" };
                    messages.push(json!({"role": role, "content": text}));
                }
                c.call(
                    "decorate",
                    json!({"memory": memory, "now": 1_767_225_600.0 + 10.0 * history.len() as f64,
                        "request": {"model": "gpt-4o", "messages": messages}}),
                )
            }
            Step::Report { memory, answer } => c.call(
                "report",
                json!({"memory": memory, "now": 1_767_225_700.0, "response": reply(answer)}),
            ),
        }
    }

    fn memory(&self) -> &str {
        match self {
            Step::Decorate { memory, .. } | Step::Report { memory, .. } => memory,
        }
    }

    fn op(&self) -> &'static str {
        match self {
            Step::Decorate { .. } => "decorate",
            Step::Report { .. } => "report",
        }
    }

    fn text(&self) -> &str {
        match self {
            Step::Decorate { history, .. } => history.last().unwrap(),
            Step::Report { answer, .. } => answer,
        }
    }
}

/// The steps of conversation `i`: two turns of a user message and a reply (the first turn
/// closes when the second begins, so the lanes have units to judge while the disk fills).
fn conversation(i: u64, shape: Shape) -> Vec<Step> {
    let memory = format!("full-{i}");
    let u1 = text(&format!("{memory} user 1:"), 4 * i, shape.user);
    let a1 = text(&format!("{memory} answer 1:"), 4 * i + 1, shape.reply);
    let u2 = text(&format!("{memory} user 2:"), 4 * i + 2, shape.user / 4);
    let a2 = text(&format!("{memory} answer 2:"), 4 * i + 3, shape.reply);
    vec![
        Step::Decorate {
            memory: memory.clone(),
            history: vec![u1.clone()],
        },
        Step::Report {
            memory: memory.clone(),
            answer: a1.clone(),
        },
        Step::Decorate {
            memory: memory.clone(),
            history: vec![u1, a1, u2],
        },
        Step::Report { memory, answer: a2 },
    ]
}

/// Every stored message text of a memory (superseded ones included), with how often it occurs.
fn stored(c: &mut Client, memory: &str) -> HashMap<String, usize> {
    let export = c.call("export", json!({"memory": memory})).unwrap();
    let mut texts = HashMap::new();
    for m in export["messages"].as_array().unwrap() {
        if let Some(t) = m["message"]["content"].as_str() {
            *texts.entry(t.to_owned()).or_insert(0) += 1;
        }
    }
    texts
}

/// Every acknowledged text is stored exactly once in its memory.
fn check_acknowledged(c: &mut Client, acknowledged: &[Step], when: &str) {
    let mut by_memory: HashMap<&str, Vec<&str>> = HashMap::new();
    for s in acknowledged {
        by_memory.entry(s.memory()).or_default().push(s.text());
    }
    for (memory, texts) in by_memory {
        let held = stored(c, memory);
        for t in texts {
            let n = held.get(t).copied().unwrap_or(0);
            assert_eq!(
                n,
                1,
                "{when}: {memory}: an acknowledged message is stored {n} times: {}…",
                &t[..60]
            );
        }
    }
}

fn is_root() -> bool {
    // SAFETY: geteuid has no preconditions.
    unsafe { libc::geteuid() == 0 }
}

fn mount_tmpfs(at: &Path) -> bool {
    Command::new("mount")
        .args(["-t", "tmpfs", "-o", DISK, "tmpfs"])
        .arg(at)
        .status()
        .is_ok_and(|s| s.success())
}

#[test]
fn a_full_disk_is_a_clean_error_and_every_acknowledged_message_survives_it() {
    if !is_root() {
        eprintln!("skipped: mounting a small tmpfs needs root");
        return;
    }
    let outer = tempfile::tempdir().unwrap();
    let disk = outer.path().join("disk");
    std::fs::create_dir(&disk).unwrap();
    if !mount_tmpfs(&disk) {
        eprintln!("skipped: cannot mount a tmpfs at {} ({DISK})", disk.display());
        return;
    }
    let _unmount = Unmount(disk.clone());
    let started = Instant::now();
    // Something to free later, one per round, written before the daemon takes the rest.
    let fillers: Vec<PathBuf> = (1..=MAX_ROUNDS).map(|r| disk.join(format!("filler-{r}"))).collect();
    for f in &fillers {
        std::fs::write(f, vec![0x5a_u8; FILLER_BYTES]).unwrap();
    }
    let dir = tempfile::tempdir().unwrap();
    let cfg = dir.path().join("recalld.toml");
    // A 1 MB map at start: it doubles several times before the disk is full.
    std::fs::write(&cfg, "map_size = 1048576\n").unwrap();
    let mut d = util::Daemon {
        child: None,
        socket: dir.path().join("recalld.sock"),
        data: disk.join("data"),
        dir,
    };
    let cfg_arg = ["--config", cfg.to_str().unwrap()];
    d.spawn(&cfg_arg);
    let mut c = d.client();

    let mut acknowledged: Vec<Step> = Vec::new();
    let mut i = 0u64;
    let mut map = 0;
    // The ops that met the full disk: rounds go on (large user messages until a decorate has met
    // it, then large replies) until both a decorate and a report have.
    let mut failed_ops = std::collections::BTreeSet::new();
    for (round, filler) in (1..).zip(&fillers) {
        // Which op's commit meets the full disk is a matter of sizes and of what the lanes
        // wrote just before, so a round is shaped for an op that has not met it yet.
        let shape = if failed_ops.contains("decorate") {
            REPLY_HEAVY
        } else {
            USER_HEAVY
        };
        // Fill the disk.
        let round_start = Instant::now();
        let before = acknowledged.len();
        let (failed, error) = 'fill: loop {
            for step in conversation(i, shape) {
                match step.send(&mut c) {
                    Ok(_) => acknowledged.push(step),
                    Err(e) => break 'fill (step, e),
                }
            }
            i += 1;
            assert!(i < 2_000, "a 20 MB disk never filled");
        };
        eprintln!(
            "round {round}: disk full after {} acknowledged ops in {:.1} s, at the {} of {}: {error}",
            acknowledged.len() - before,
            round_start.elapsed().as_secs_f64(),
            failed.op(),
            failed.memory()
        );
        // The failure is an error reply with the documented code, not a dropped connection.
        match &error {
            ClientError::Server(body) => {
                assert_eq!(body.code.as_str(), "internal", "{error}");
                assert!(body.message.contains("storage"), "{error}");
            }
            other => panic!("the full disk was not an error reply: {other} (did the daemon die?)"),
        }
        failed_ops.insert(failed.op());
        if round == 1 {
            assert!(
                acknowledged.len() > 10,
                "{} ops before the disk was full",
                acknowledged.len()
            );
        }
        // Still serving, on the same connection and a new one.
        assert_eq!(c.call("health", json!({})).unwrap()["status"], "ok");
        assert_eq!(d.client().call("health", json!({})).unwrap()["status"], "ok");
        // The map grew from 1 MB on the way.
        let metrics = c.call("metrics", json!({})).unwrap();
        map = metrics["store_map_bytes"].as_u64().unwrap();
        assert!(map >= 4 << 20, "the map did not grow: {metrics}");
        check_acknowledged(&mut c, &acknowledged, "disk full");
        // Sent again while the disk is still full: the same clean error (or, if something freed
        // a little room meanwhile, stored), never a poisoned memory or a dead connection.
        let mut pending = Some(failed);
        for _ in 0..2 {
            let Some(step) = pending.take() else { break };
            match step.send(&mut c) {
                Ok(_) => acknowledged.push(step),
                Err(ClientError::Server(body)) if body.code.as_str() == "internal" => pending = Some(step),
                Err(e) => panic!("sent again on a full disk: {e}"),
            }
        }
        check_acknowledged(&mut c, &acknowledged, "disk still full");

        // Space again: the failed op goes through when sent again, and so does a new conversation.
        std::fs::remove_file(filler).unwrap();
        let failed = match pending {
            Some(step) => {
                step.send(&mut c).expect("the failed op succeeds once there is space");
                acknowledged.push(step.clone());
                step
            }
            None => acknowledged.last().unwrap().clone(),
        };
        // The rest of the conversation it belongs to.
        let steps = conversation(i, shape);
        let at = steps.iter().position(|s| s.text() == failed.text()).unwrap();
        for step in steps.into_iter().skip(at + 1) {
            step.send(&mut c).expect("the rest of its conversation succeeds too");
            acknowledged.push(step);
        }
        for step in conversation(i + 1, shape) {
            step.send(&mut c)
                .expect("a new conversation is stored once there is space");
            acknowledged.push(step);
        }
        i += 2;
        check_acknowledged(&mut c, &acknowledged, "space freed");
        if failed_ops.len() == 2 {
            break;
        }
    }
    // Which op meets the full disk follows from the sizes (and a little from the lanes' small
    // writes): large user messages fill it on a decorate, large replies on a report.
    assert_eq!(
        failed_ops.len(),
        2,
        "in {MAX_ROUNDS} rounds the full disk met only {failed_ops:?}"
    );
    drop(c);

    // Restarted on the same directory: every acknowledged message is there, once.
    assert_eq!(d.stop(), Some(0), "SIGTERM after a full disk is a clean exit");
    d.spawn(&cfg_arg);
    let mut c = d.client();
    assert_eq!(c.call("health", json!({})).unwrap()["status"], "ok");
    check_acknowledged(&mut c, &acknowledged, "restarted");
    // The lanes' jobs (queued by the first turns) live on: none was parked by the full disk.
    let stats = c.call("stats", json!({})).unwrap();
    assert_eq!(stats["lanes"]["parked"], 0, "{}", stats["lanes"]);
    eprintln!(
        "map grew to {} MB; {} acknowledged messages checked after the restart; {:.1} s",
        map >> 20,
        acknowledged.len(),
        started.elapsed().as_secs_f64()
    );
}
