//! Engine latency at 1k, 10k and 100k stored messages (not a test).
//!
//!     cargo run --release -p recalld --example engine_bench [-- --calls 200 --sizes 1000,10000,100000]
//!     cargo run --release -p recalld --example engine_bench -- --ceiling 16000 --sizes 1000,10000
//!     cargo run --release -p recalld --example engine_bench -- --traces --ceiling 4000
//!     cargo run --release -p recalld --example engine_bench -- --lanes 10 --interval-ms 100 --seconds 60
//!
//! `--engine 'key = value'` (repeatable) adds `[engine]` settings, e.g. `--engine 'recall = false'`.
//! `--no-drain` skips waiting for the lane at the end (latency runs repeated for medians).
//!
//! `--lanes N` is the lanes under load: N memories each get a turn (user message, note when
//! asked, reply) every `--interval-ms` for `--seconds`, at a 4,000-token ceiling so episodes cut,
//! leave, seal and notes write facts all the time; the lane depth is sampled every second.
//!
//! With `--ceiling` the memory lives as in real use: it is filled turn by turn (one user message,
//! one reply) at that ceiling, and a simulated model answers every note ask with one fact per
//! leaving episode, so episodes are cut, leave, seal and are forgotten while the lane judges
//! units and facts beside it. `--traces` replays the real agent traces
//! (`$RECALLD_BENCH_DIR/agent-traces-dev.jsonl`) at the ceiling the same way (full history
//! resent each call, note asks answered). Both print the lane's depth and throughput.
//!
//! Without `--ceiling` (the worst case for assembly):
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
        s.push_str(WORDS[(k >> 33) % WORDS.len()]);
        s.push(' ');
    }
    s
}

fn pct(v: &mut [f64], q: f64) -> f64 {
    if v.is_empty() {
        return 0.0;
    }
    v.sort_by(f64::total_cmp);
    (v[((q * v.len() as f64) as usize).min(v.len() - 1)] * 100.0).round() / 100.0
}

struct Opts {
    calls: usize,
    sizes: Vec<usize>,
    ceiling: Option<u64>,
    traces: bool,
    lanes: Option<usize>,
    interval_ms: u64,
    seconds: u64,
    /// Extra `[engine]` settings (`--engine 'recall = false'`).
    engine: Vec<String>,
}

fn main() {
    let mut o = Opts {
        calls: 200,
        sizes: vec![1_000, 10_000, 100_000],
        ceiling: None,
        traces: false,
        lanes: None,
        interval_ms: 100,
        seconds: 60,
        engine: Vec::new(),
    };
    let mut args = std::env::args().skip(1);
    while let Some(a) = args.next() {
        match a.as_str() {
            "--calls" => o.calls = args.next().and_then(|v| v.parse().ok()).expect("--calls N"),
            "--ceiling" => o.ceiling = Some(args.next().and_then(|v| v.parse().ok()).expect("--ceiling N")),
            "--traces" => o.traces = true,
            "--lanes" => o.lanes = Some(args.next().and_then(|v| v.parse().ok()).expect("--lanes N")),
            "--interval-ms" => o.interval_ms = args.next().and_then(|v| v.parse().ok()).expect("--interval-ms N"),
            "--seconds" => o.seconds = args.next().and_then(|v| v.parse().ok()).expect("--seconds N"),
            "--no-drain" => {}
            "--engine" => o.engine.push(args.next().expect("--engine 'key = value'")),
            "--sizes" => {
                o.sizes = args
                    .next()
                    .expect("--sizes a,b,c")
                    .split(',')
                    .map(|s| s.parse().unwrap())
                    .collect()
            }
            other => panic!("unknown argument {other}"),
        }
    }
    // Only the worst case needs episodes that never fit (so nothing is ever cut).
    let mut config = String::from("[engine]\n");
    if o.ceiling.is_none() && o.lanes.is_none() {
        config.push_str("max_episode_tokens = 1000000000\n");
    }
    for line in &o.engine {
        config.push_str(line);
        config.push('\n');
    }
    let daemon = Daemon::start(&config);
    let mut c = Client::connect(&daemon.socket).unwrap();
    if let Some(n) = o.lanes {
        return lanes(&daemon.socket, &mut c, n, &o);
    }
    match (o.traces, o.ceiling) {
        (true, ceiling) => traces(&mut c, ceiling.unwrap_or(4_000)),
        (false, Some(ceiling)) => realistic(&mut c, &o, ceiling),
        (false, None) => worst_case(&mut c, &o),
    }
}

/// The release daemon on a temp socket and data dir; SIGTERM on drop.
struct Daemon {
    child: std::process::Child,
    socket: PathBuf,
    _dir: tempfile::TempDir,
}

impl Daemon {
    fn start(config: &str) -> Daemon {
        let repo = repo();
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
        std::fs::write(&cfg, config).unwrap();
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
        println!("binary {}", bin.display());
        Daemon {
            child,
            socket,
            _dir: dir,
        }
    }
}

impl Drop for Daemon {
    fn drop(&mut self) {
        // SAFETY: plain kill(2) on our own child.
        unsafe { libc::kill(self.child.id() as i32, libc::SIGTERM) };
        let _ = self.child.wait();
    }
}

fn repo() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("..")
}

fn chat_reply(id: &str, message: Value, prompt_tokens: &Value) -> Value {
    json!({"id": id, "object": "chat.completion", "model": "gpt-4o",
        "choices": [{"index": 0, "finish_reason": "stop", "message": message}],
        "usage": {"prompt_tokens": prompt_tokens, "completion_tokens": 50, "total_tokens": 0}})
}

/// The simulated model's note: one fact per leaving episode, naming its turns.
fn note_message(info: &Value, id: &str) -> Value {
    let notes: Vec<Value> = info["episodes"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|e| e["state"] == "leaving")
        .map(|e| {
            let (a, b) = (&e["turns"][0], &e["turns"][1]);
            json!({"note": format!("In turns {a} to {b} the passenger's booking {} was changed.", text(e["n"].as_u64().unwrap() as usize, 40)),
                "subject": "passenger", "object": format!("booking of turns {a}-{b}"), "milestone": false})
        })
        .collect();
    json!({"role": "assistant", "content": null, "tool_calls": [{"id": id, "type": "function",
        "function": {"name": "note", "arguments": json!({"notes": notes}).to_string()}}]})
}

/// Lane depth and what the lane has done so far (from `stats`).
fn lane_line(c: &mut Client) -> String {
    let mut s = c.call("stats", json!({})).unwrap();
    if let Some(l) = s["lanes"].as_object_mut() {
        l.remove("memories"); // one entry per memory with work: too long to print
    }
    format!("jobs pending {}; lanes {}", s["jobs_pending"], s["lanes"])
}

/// Waits for the lane to drain; prints jobs and judged units per second while it did.
fn drain(c: &mut Client) {
    if std::env::args().any(|a| a == "--no-drain") {
        return;
    }
    let before = c.call("stats", json!({})).unwrap();
    let pending = before["jobs_pending"].as_u64().unwrap_or(0);
    let t = Instant::now();
    while c.call("stats", json!({})).unwrap()["jobs_pending"]
        .as_u64()
        .unwrap_or(0)
        > 0
    {
        std::thread::sleep(Duration::from_millis(50));
    }
    let after = c.call("stats", json!({})).unwrap();
    let secs = t.elapsed().as_secs_f64().max(1e-9);
    let d = |k: &str| after["lanes"][k].as_f64().unwrap_or(0.0) - before["lanes"][k].as_f64().unwrap_or(0.0);
    println!(
        "lane drained {pending} jobs in {secs:.1} s: {:.1} jobs/s, {:.1} units judged/s, {:.1} fact judgments/s",
        d("jobs_run") / secs,
        d("units_judged") / secs,
        d("fact_judgments") / secs
    );
}

/// A memory filled turn by turn at a realistic ceiling, notes answered; then `calls` measured
/// rounds of decorate + report (with a note round when asked).
fn realistic(c: &mut Client, o: &Opts, ceiling: u64) {
    println!(
        "ceiling {ceiling}; filled turn by turn with notes answered; {} rounds per size",
        o.calls
    );
    println!("| stored messages | fill s | decorate p50 ms | decorate p99 ms | with recall: n, p50 ms, p99 ms | report p50 ms | report p99 ms | note asks | lane depth at end |");
    println!("|---|---|---|---|---|---|---|---|---|");
    for &size in &o.sizes {
        let memory = format!("real-{size}");
        let mut now = 1.7e9;
        let mut k = 0usize;
        let (mut dec, mut rep, mut dec_recall) = (Vec::new(), Vec::new(), Vec::new());
        let mut asks = 0;
        let t = Instant::now();
        let mut fill = 0.0;
        let system = json!({"role": "system", "content": "You are a helpful airline agent."});
        while k < size + 2 * o.calls {
            let measuring = k >= size;
            if k == size {
                fill = t.elapsed().as_secs_f64();
            }
            now += 30.0;
            let mut messages = if k == 0 { vec![system.clone()] } else { vec![] };
            messages.push(json!({"role": "user", "content": text(k, 200)}));
            let req = json!({"model": "gpt-4o", "messages": messages});
            let started = Instant::now();
            let r = c
                .call(
                    "decorate",
                    json!({"memory": memory, "history": "delta", "ceiling": ceiling, "now": now, "request": req}),
                )
                .unwrap();
            if measuring {
                let ms = started.elapsed().as_secs_f64() * 1e3;
                if r["info"]["recall"].is_object() {
                    dec_recall.push(ms)
                } else {
                    dec.push(ms)
                }
            }
            if r["info"]["note_ask"] == true {
                asks += 1;
                let reply = chat_reply(
                    &format!("n{k}"),
                    note_message(&r["info"], &format!("note{k}")),
                    &r["info"]["request_tokens"],
                );
                let started = Instant::now();
                let out = c
                    .call("report", json!({"memory": memory, "now": now + 0.5, "response": reply}))
                    .unwrap();
                if measuring {
                    rep.push(started.elapsed().as_secs_f64() * 1e3);
                }
                assert_eq!(out["again"], true);
                let started = Instant::now();
                c.call(
                    "decorate",
                    json!({"memory": memory, "history": "delta", "now": now + 0.6,
                    "request": {"model": "gpt-4o", "messages": []}}),
                )
                .unwrap();
                if measuring {
                    dec.push(started.elapsed().as_secs_f64() * 1e3);
                }
            }
            let reply = chat_reply(
                &format!("c{k}"),
                json!({"role": "assistant", "content": text(k + 1, 200)}),
                &r["info"]["request_tokens"],
            );
            let started = Instant::now();
            c.call("report", json!({"memory": memory, "now": now + 1.0, "response": reply}))
                .unwrap();
            if measuring {
                rep.push(started.elapsed().as_secs_f64() * 1e3);
            }
            k += 2;
        }
        let depth = c.call("stats", json!({})).unwrap()["jobs_pending"].clone();
        println!(
            "| {size} | {fill:.1} | {} | {} | {}, {}, {} | {} | {} | {asks} | {depth} |",
            pct(&mut dec, 0.5),
            pct(&mut dec, 0.99),
            dec_recall.len(),
            pct(&mut dec_recall, 0.5),
            pct(&mut dec_recall, 0.99),
            pct(&mut rep, 0.5),
            pct(&mut rep, 0.99)
        );
        drain(c);
    }
    println!("{}", lane_line(c));
}

/// The real agent traces at `ceiling`, as an agent sends them (the whole history each call).
fn traces(c: &mut Client, ceiling: u64) {
    let dir = std::env::var_os("RECALLD_BENCH_DIR")
        .map(PathBuf::from)
        .unwrap_or_else(|| repo().join("../shared/bench"));
    let text = std::fs::read_to_string(dir.join("agent-traces-dev.jsonl")).expect("agent-traces-dev.jsonl");
    let (mut dec, mut rep, mut dec_recall) = (Vec::new(), Vec::new(), Vec::new());
    let mut asks = 0;
    let t = Instant::now();
    let convs: Vec<Value> = text
        .lines()
        .filter(|l| !l.trim().is_empty())
        .map(|l| serde_json::from_str(l).unwrap())
        .collect();
    for (ci, conv) in convs.iter().enumerate() {
        let memory = format!("trace-{ci}");
        let messages = conv["messages"].as_array().unwrap();
        let mut now = 1.7e9;
        for (i, m) in messages.iter().enumerate() {
            if m["role"] != "assistant" {
                continue;
            }
            now += 20.0;
            let req = json!({"model": "gpt-4o", "messages": &messages[..i]});
            let started = Instant::now();
            let mut r = c
                .call(
                    "decorate",
                    json!({"memory": memory, "ceiling": ceiling, "now": now, "request": req}),
                )
                .unwrap();
            let ms = started.elapsed().as_secs_f64() * 1e3;
            if r["info"]["recall"].is_object() {
                dec_recall.push(ms)
            } else {
                dec.push(ms)
            }
            for ask in 0..4 {
                if r["info"]["note_ask"] != true {
                    break;
                }
                asks += 1;
                let reply = chat_reply(
                    "n",
                    note_message(&r["info"], &format!("note-{i}-{ask}")),
                    &r["info"]["request_tokens"],
                );
                let started = Instant::now();
                c.call("report", json!({"memory": memory, "now": now + 0.5, "response": reply}))
                    .unwrap();
                rep.push(started.elapsed().as_secs_f64() * 1e3);
                let started = Instant::now();
                r = c
                    .call(
                        "decorate",
                        json!({"memory": memory, "ceiling": ceiling, "now": now + 0.6, "request": req}),
                    )
                    .unwrap();
                dec.push(started.elapsed().as_secs_f64() * 1e3);
            }
            let mut reply_msg = m.clone();
            if let Some(o) = reply_msg.as_object_mut() {
                o.retain(|k, _| k == "role" || k == "content" || k == "tool_calls");
            }
            let reply = chat_reply("c", reply_msg, &r["info"]["request_tokens"]);
            let started = Instant::now();
            c.call("report", json!({"memory": memory, "now": now + 1.0, "response": reply}))
                .unwrap();
            rep.push(started.elapsed().as_secs_f64() * 1e3);
        }
    }
    println!(
        "agent traces: {} conversations at ceiling {ceiling} in {:.1} s; {} decorates, {} reports, {asks} note asks",
        convs.len(),
        t.elapsed().as_secs_f64(),
        dec.len() + dec_recall.len(),
        rep.len()
    );
    println!("| op | p50 ms | p99 ms | max ms |");
    println!("|---|---|---|---|");
    let max = |v: &[f64]| v.iter().copied().fold(0.0, f64::max);
    let (dm, rm, drm) = (max(&dec), max(&rep), max(&dec_recall));
    println!(
        "| decorate (no recall: {}) | {} | {} | {dm:.2} |",
        dec.len(),
        pct(&mut dec, 0.5),
        pct(&mut dec, 0.99)
    );
    println!(
        "| decorate (recall: {}) | {} | {} | {drm:.2} |",
        dec_recall.len(),
        pct(&mut dec_recall, 0.5),
        pct(&mut dec_recall, 0.99)
    );
    println!(
        "| report | {} | {} | {rm:.2} |",
        pct(&mut rep, 0.5),
        pct(&mut rep, 0.99)
    );
    println!("{}", lane_line(c));
    drain(c);
}

/// N memories, each a turn every `interval_ms`, for `seconds`: does the lane keep up?
fn lanes(socket: &std::path::Path, c: &mut Client, n: usize, o: &Opts) {
    use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
    use std::sync::Arc;
    let stop = Arc::new(AtomicBool::new(false));
    let turns = Arc::new(AtomicUsize::new(0));
    let before = c.call("stats", json!({})).unwrap();
    let started = Instant::now();
    let drivers: Vec<_> = (0..n)
        .map(|m| {
            let (stop, turns, socket) = (stop.clone(), turns.clone(), socket.to_path_buf());
            let interval = Duration::from_millis(o.interval_ms);
            std::thread::spawn(move || {
                let mut c = Client::connect(&socket).unwrap();
                let memory = format!("lane-{m}");
                let mut now = 1.7e9;
                let mut k = 0usize;
                let mut next = Instant::now();
                while !stop.load(Ordering::SeqCst) {
                    now += 30.0;
                    let mut messages = vec![];
                    if k == 0 {
                        messages.push(json!({"role": "system", "content": "You are a helpful airline agent."}));
                    }
                    messages.push(json!({"role": "user", "content": text(k + m * 1_000_000, 200)}));
                    let r = c
                        .call(
                            "decorate",
                            json!({"memory": memory, "history": "delta", "ceiling": 4000, "now": now,
                            "request": {"model": "gpt-4o", "messages": messages}}),
                        )
                        .unwrap();
                    if r["info"]["note_ask"] == true {
                        let reply = chat_reply(
                            "n",
                            note_message(&r["info"], &format!("note{k}")),
                            &r["info"]["request_tokens"],
                        );
                        c.call("report", json!({"memory": memory, "now": now + 0.5, "response": reply}))
                            .unwrap();
                    }
                    let reply = chat_reply(
                        "c",
                        json!({"role": "assistant", "content": text(k + 1 + m * 1_000_000, 200)}),
                        &r["info"]["request_tokens"],
                    );
                    c.call("report", json!({"memory": memory, "now": now + 1.0, "response": reply}))
                        .unwrap();
                    turns.fetch_add(1, Ordering::Relaxed);
                    k += 2;
                    next += interval;
                    if let Some(wait) = next.checked_duration_since(Instant::now()) {
                        std::thread::sleep(wait);
                    }
                }
            })
        })
        .collect();
    println!(
        "{n} memories, a turn each every {} ms, for {} s; lane depth each second:",
        o.interval_ms, o.seconds
    );
    let mut depths = Vec::new();
    for _ in 0..o.seconds {
        std::thread::sleep(Duration::from_secs(1));
        depths.push(
            c.call("stats", json!({})).unwrap()["lanes"]["depth"]
                .as_u64()
                .unwrap_or(0),
        );
    }
    stop.store(true, Ordering::SeqCst);
    for d in drivers {
        d.join().unwrap();
    }
    let secs = started.elapsed().as_secs_f64();
    let after = c.call("stats", json!({})).unwrap();
    let d = |k: &str| after["lanes"][k].as_f64().unwrap_or(0.0) - before["lanes"][k].as_f64().unwrap_or(0.0);
    println!("depth: {depths:?}");
    println!(
        "turns {} ({:.1}/s); max depth {}; depth at end {}; lane per second: {:.1} jobs, {:.1} units judged, {:.1} facts placed (resolved + embedded), {:.1} fact judgments; judge busy {:.0}%",
        turns.load(Ordering::Relaxed),
        turns.load(Ordering::Relaxed) as f64 / secs,
        depths.iter().max().unwrap_or(&0),
        depths.last().unwrap_or(&0),
        d("jobs_run") / secs,
        d("units_judged") / secs,
        d("facts_placed") / secs,
        d("fact_judgments") / secs,
        100.0 * d("judge_seconds") / secs
    );
    drain(c);
}

/// Nothing cut or faded: every returned request holds the whole history.
fn worst_case(c: &mut Client, o: &Opts) {
    let ceiling = 1_000_000_000u64;
    let calls = o.calls;
    println!("ceiling {ceiling} (nothing cut or faded); {calls} rounds per size");
    println!("| stored messages | fill s | decorate p50 ms | decorate p99 ms | report p50 ms | report p99 ms | request bytes |");
    println!("|---|---|---|---|---|---|---|");
    for &size in &o.sizes {
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
}
