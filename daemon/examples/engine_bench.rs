//! Engine latency at 1k, 10k and 100k stored messages (not a test).
//!
//!     cargo run --release -p recalld --example engine_bench [-- --calls 200 --sizes 1000,10000,100000]
//!
//! Starts the release daemon binary (`target/release/recalld`, or `$RECALLD_BIN`) on a temp
//! socket and data dir, with `[engine] max_episode_tokens` set very high, and uses a very large
//! `ceiling` (1e9 tokens): nothing is cut, nothing fades, so the judge never runs and the figures
//! are the cost of the store, the state load/save and assembly at each history size. Note that
//! with nothing faded every assembled request holds the whole history (its size is printed).
//! One memory per size is filled with `history: "delta"` decorates of 1,000 messages (alternating
//! user/assistant, ~200 bytes each), then `--calls` rounds of: decorate one new user message
//! (`history: "delta"`), report a short assistant reply. p50/p99 of each op per size.

use std::path::PathBuf;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use recalld::client::Client;
use serde_json::{json, Value};

const WORDS: &[&str] = &[
    "flight",
    "booking",
    "refund",
    "seat",
    "upgrade",
    "baggage",
    "Seattle",
    "certificate",
    "economy",
    "passenger",
    "cancel",
    "itinerary",
    "payment",
    "reservation",
    "delay",
    "insurance",
    "gate",
    "Dana",
    "Priya",
    "invoice",
];

fn text(i: usize, len: usize) -> String {
    let mut s = format!("Message {i}: ");
    let mut k = i.wrapping_mul(2654435761);
    while s.len() < len {
        k = k.wrapping_mul(6364136223846793005).wrapping_add(1442695040888963407);
        s.push_str(WORDS[(k >> 33) as usize % WORDS.len()]);
        s.push(' ');
    }
    s
}

fn pct(v: &mut [f64], q: f64) -> f64 {
    v.sort_by(f64::total_cmp);
    (v[((q * v.len() as f64) as usize).min(v.len() - 1)] * 100.0).round() / 100.0
}

fn main() {
    let mut calls = 200usize;
    let mut sizes = vec![1_000usize, 10_000, 100_000];
    let mut args = std::env::args().skip(1);
    while let Some(a) = args.next() {
        match a.as_str() {
            "--calls" => calls = args.next().and_then(|v| v.parse().ok()).expect("--calls N"),
            "--sizes" => {
                sizes = args
                    .next()
                    .expect("--sizes a,b,c")
                    .split(',')
                    .map(|s| s.parse().unwrap())
                    .collect()
            }
            other => panic!("unknown argument {other}"),
        }
    }
    let repo = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("..");
    let bin = std::env::var_os("RECALLD_BIN")
        .map(PathBuf::from)
        .unwrap_or_else(|| repo.join("target/release/recalld"));
    assert!(
        bin.exists(),
        "{} not found: cargo build --release -p recalld",
        bin.display()
    );
    let model = std::env::var_os("RECALLD_MODEL_DIR")
        .map(PathBuf::from)
        .unwrap_or_else(|| repo.join("models/all-MiniLM-L6-v2"));
    let dir = tempfile::tempdir().unwrap();
    let socket = dir.path().join("recalld.sock");
    let cfg = dir.path().join("recalld.toml");
    std::fs::write(&cfg, "[engine]\nmax_episode_tokens = 1000000000\n").unwrap();
    let mut child = Command::new(&bin)
        .args([
            "serve",
            "--config",
            cfg.to_str().unwrap(),
            "--socket",
            socket.to_str().unwrap(),
        ])
        .arg("--data")
        .arg(dir.path().join("data"))
        .env("RECALLD_LOG", "warn")
        .env("RECALLD_MODEL_DIR", &model)
        .stdout(Stdio::null())
        .spawn()
        .unwrap();
    let deadline = Instant::now() + Duration::from_secs(60);
    while std::os::unix::net::UnixStream::connect(&socket).is_err() {
        assert!(Instant::now() < deadline, "daemon did not listen");
        assert!(child.try_wait().unwrap().is_none(), "daemon exited");
        std::thread::sleep(Duration::from_millis(50));
    }
    let mut c = Client::connect(&socket).unwrap();
    let ceiling = 1_000_000_000u64;
    println!(
        "binary {}; ceiling {ceiling} (nothing cut or faded); {calls} rounds per size",
        bin.display()
    );
    println!("| stored messages | fill s | decorate p50 ms | decorate p99 ms | report p50 ms | report p99 ms | request bytes |");
    println!("|---|---|---|---|---|---|---|");
    for &size in &sizes {
        let memory = format!("bench-{size}");
        let mut now = 1.7e9;
        let t = Instant::now();
        let system = json!({"role": "system", "content": "You are a helpful airline agent."});
        let mut i = 0;
        while i < size {
            let n = 1_000.min(size - i);
            let mut batch: Vec<Value> = if i == 0 { vec![system.clone()] } else { vec![] };
            for k in i..i + n {
                let role = if k % 2 == 0 { "user" } else { "assistant" };
                batch.push(json!({"role": role, "content": text(k, 200)}));
            }
            now += 60.0;
            let r = c
                .call(
                    "decorate",
                    json!({"memory": memory, "history": "delta", "ceiling": ceiling, "now": now,
                    "request": {"model": "gpt-4o", "messages": batch}}),
                )
                .unwrap();
            assert_eq!(r["info"]["stored"].as_u64().unwrap() as usize, n, "{}", r["info"]);
            i += n;
        }
        let fill = t.elapsed().as_secs_f64();
        let (mut dec, mut rep) = (Vec::new(), Vec::new());
        let mut bytes = 0;
        for k in 0..calls {
            now += 30.0;
            let req = json!({"model": "gpt-4o", "messages": [{"role": "user", "content": text(size + 2 * k, 200)}]});
            let t = Instant::now();
            let r = c
                .call(
                    "decorate",
                    json!({"memory": memory, "history": "delta", "now": now, "request": req}),
                )
                .unwrap();
            dec.push(t.elapsed().as_secs_f64() * 1e3);
            bytes = r["request"].to_string().len();
            let reply = json!({"id": format!("c{k}"), "object": "chat.completion", "model": "gpt-4o",
                "choices": [{"index": 0, "finish_reason": "stop", "message": {"role": "assistant", "content": text(size + 2 * k + 1, 200)}}],
                "usage": {"prompt_tokens": r["info"]["request_tokens"], "completion_tokens": 50, "total_tokens": 0}});
            let t = Instant::now();
            c.call("report", json!({"memory": memory, "now": now + 1.0, "response": reply}))
                .unwrap();
            rep.push(t.elapsed().as_secs_f64() * 1e3);
        }
        println!(
            "| {size} | {fill:.1} | {} | {} | {} | {} | {bytes} |",
            pct(&mut dec, 0.5),
            pct(&mut dec, 0.99),
            pct(&mut rep, 0.5),
            pct(&mut rep, 0.99)
        );
    }
    // SAFETY: plain kill(2) on our own child.
    unsafe { libc::kill(child.id() as i32, libc::SIGTERM) };
    let _ = child.wait();
}
