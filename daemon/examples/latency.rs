//! Latency and throughput of the Rust client against a running daemon (not a test).
//!
//!     cargo run --release -p recalld --example latency -- --socket /tmp/recalld.sock [-n 10000]
//!
//! One JSON line per measurement: `hello`, `ping` and a ~2 KB Chat Completions `decorate`
//! (`dry_run: true`, one memory) as N sequential calls (p50/p99/mean µs); then throughput with
//! 64 requests in flight, pipelined on one connection and spread over 64 connections.
//! `scripts/bench-latency.sh` starts a release daemon and runs this with the Python and
//! TypeScript benchmarks.

use std::path::{Path, PathBuf};
use std::time::Instant;

use recalld::client::{into_result, Client};
use serde_json::{json, Value};

fn chat_request_2kb() -> Value {
    let turns = [
        (
            "user",
            "We are moving the pricing page to the new design system. What changes first?",
        ),
        (
            "assistant",
            "Start with the table component: swap the grid for the new data table, then the plan cards.",
        ),
        (
            "user",
            "The checkout team wants the annual toggle to default to yearly billing. Is that fine?",
        ),
        (
            "assistant",
            "Yes, if the monthly price stays visible and the saving is shown as a percentage.",
        ),
        (
            "user",
            "Dana owns checkout; Priya owns the design tokens. Who should review the toggle?",
        ),
        (
            "assistant",
            "Both: Dana for the billing logic and Priya for the tokens used by the toggle states.",
        ),
        (
            "user",
            "Write a short summary of the decisions so far for the channel, three bullet points at most.",
        ),
    ];
    let mut messages = vec![
        json!({"role": "system", "content": "You help the web team ship the pricing page. Be brief and concrete."}),
    ];
    messages.extend(turns.iter().map(|(r, c)| json!({"role": r, "content": c})));
    let mut req = json!({"model": "gpt-4o-mini", "temperature": 0.3, "messages": messages});
    let size = req.to_string().len();
    if size < 2048 {
        let pad = 2048 - size;
        let filler: String = "pricing table, plan cards, toggle. "
            .repeat(pad / 35 + 1)
            .chars()
            .take(pad)
            .collect();
        let last = req["messages"].as_array_mut().unwrap().last_mut().unwrap();
        let text = format!("{} Context: {}", last["content"].as_str().unwrap(), filler);
        last["content"] = json!(text);
    }
    req
}

fn sequential(name: &str, n: usize, mut f: impl FnMut(), extra: Value) {
    for _ in 0..n.min(200) {
        f();
    }
    let mut us: Vec<f64> = Vec::with_capacity(n);
    for _ in 0..n {
        let t = Instant::now();
        f();
        us.push(t.elapsed().as_secs_f64() * 1e6);
    }
    us.sort_by(f64::total_cmp);
    let at = |q: f64| (us[((q * n as f64) as usize).min(n - 1)] * 10.0).round() / 10.0;
    let mean = us.iter().sum::<f64>() / n as f64;
    let mut out = json!({"client": "rust", "bench": name, "calls": n, "p50_us": at(0.50), "p99_us": at(0.99), "mean_us": (mean * 10.0).round() / 10.0});
    if let Value::Object(m) = extra {
        out.as_object_mut().unwrap().extend(m);
    }
    println!("{out}");
}

/// `in_flight` requests pipelined on one connection until `n` have been answered.
fn pipelined(socket: &Path, name: &str, op: &str, args: &Value, n: usize, in_flight: usize) {
    let mut c = Client::connect(socket).unwrap();
    let t = Instant::now();
    let (mut sent, mut done) = (0, 0);
    while sent < in_flight.min(n) {
        c.send(op, args.clone()).unwrap();
        sent += 1;
    }
    while done < n {
        into_result(c.recv().unwrap()).unwrap();
        done += 1;
        if sent < n {
            c.send(op, args.clone()).unwrap();
            sent += 1;
        }
    }
    let s = t.elapsed().as_secs_f64();
    println!(
        "{}",
        json!({"client": "rust", "bench": name, "calls": n, "in_flight": in_flight, "connections": 1, "seconds": (s * 1000.0).round() / 1000.0, "calls_per_s": (n as f64 / s).round()})
    );
}

/// `conns` connections, one request in flight each, `n` calls in all.
fn connections(socket: &Path, name: &str, op: &str, args: &Value, n: usize, conns: usize) {
    let mut clients: Vec<Client> = (0..conns).map(|_| Client::connect(socket).unwrap()).collect();
    let t = Instant::now();
    std::thread::scope(|s| {
        for (i, c) in clients.iter_mut().enumerate() {
            let per = n / conns + usize::from(i < n % conns);
            s.spawn(move || {
                for _ in 0..per {
                    c.call(op, args.clone()).unwrap();
                }
            });
        }
    });
    let s = t.elapsed().as_secs_f64();
    println!(
        "{}",
        json!({"client": "rust", "bench": name, "calls": n, "in_flight": conns, "connections": conns, "seconds": (s * 1000.0).round() / 1000.0, "calls_per_s": (n as f64 / s).round()})
    );
}

fn main() {
    let mut socket = std::env::var_os("RECALLD_SOCKET").map(PathBuf::from);
    let mut n = 10_000usize;
    let mut in_flight = 64usize;
    let mut args = std::env::args().skip(1);
    while let Some(a) = args.next() {
        match a.as_str() {
            "--socket" => socket = args.next().map(PathBuf::from),
            "-n" | "--calls" => n = args.next().and_then(|v| v.parse().ok()).expect("-n takes a number"),
            "--in-flight" => {
                in_flight = args
                    .next()
                    .and_then(|v| v.parse().ok())
                    .expect("--in-flight takes a number")
            }
            other => panic!("unknown argument {other}; usage: latency --socket PATH [-n N] [--in-flight K]"),
        }
    }
    let socket = socket.expect("give --socket PATH or set RECALLD_SOCKET");
    let mut c = Client::connect(&socket).unwrap();
    let hello = json!({"min_version": 1, "max_version": 1, "client": "bench"});
    sequential("hello", n, || drop(c.call("hello", hello.clone()).unwrap()), json!({}));
    sequential("ping", n, || drop(c.call("ping", json!({})).unwrap()), json!({}));
    let req = chat_request_2kb();
    let size = req.to_string().len();
    let dec = json!({"memory": "bench-rust", "request": req, "dry_run": true});
    sequential(
        "decorate_dry_run",
        n,
        || drop(c.call("decorate", dec.clone()).unwrap()),
        json!({"request_bytes": size}),
    );
    pipelined(&socket, "ping_pipelined", "ping", &json!({}), n, in_flight);
    connections(&socket, "ping_connections", "ping", &json!({}), n, in_flight);
    pipelined(&socket, "decorate_dry_run_pipelined", "decorate", &dec, n, in_flight);
    connections(&socket, "decorate_dry_run_connections", "decorate", &dec, n, in_flight);
}
