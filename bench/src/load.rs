//! `recalld-bench load`: real agent traffic against a daemon started for the run, as C
//! clients over N memories, and what it costs (issue 12, the load half).
//!
//! The phases, in order, on one daemon:
//! 1. traffic: each client owns memories `c, c+C, …` and gives them turns in rotation, each
//!    turn a `decorate` (the session's history so far) then a `report` (see `agent`), until
//!    every memory holds `messages`; a sampler watches lane depth and RSS meanwhile;
//! 2. drain: `quiet` per memory, so the lanes' work is done and counted before the end state;
//! 3. end state: `stats` and the data dir's size;
//! 4. floor: `ping` echoing a sample of the decorate requests themselves (same sizes and
//!    shapes), by the same number of clients, on the now idle daemon;
//! 5. paced: when the lanes drained, more turns in rotation over the memories, each decorate
//!    sent once its memory's lane is quiet, as an agent waiting seconds on its model leaves
//!    the lanes time to finish: what decorate and report cost at the memories' size when the
//!    lanes keep up (the traffic sends each call at once, beside a backlog of lane work);
//! 6. cold start: the daemon stopped and started on the same data, timed to `hello` and to
//!    the first `decorate` of an existing memory.

use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

use bytes::BufMut;
use recalld::client::{Client, ClientError};
use recalld_protocol::{encode_request, Request};
use serde_json::{json, Value};

use crate::agent::Agent;
use crate::counting_model::CountingModel;
use crate::daemon::Daemon;
use crate::load_report::{ColdStart, Cost, Lanes, Latency, LoadReport, Paced, Storage, TrafficCpu};
use crate::sampler::{self, Cpu, Sampler};
use crate::traces;
use recalld::models::Counts;

/// How often a run prints how far its traffic is.
const PROGRESS_EVERY: Duration = Duration::from_secs(15);

/// The longest a paced turn waits for its memory's lane (one turn's background work).
const PACED_QUIET: Duration = Duration::from_secs(50);

#[derive(Debug, Clone)]
pub struct LoadOptions {
    pub recalld: PathBuf,
    pub traces: PathBuf,
    pub clients: usize,
    pub memories: usize,
    /// Stored history messages per memory to reach.
    pub messages: u64,
    pub ceiling: u64,
    /// Lines of the started daemon's `[engine]` section.
    pub engine: Vec<String>,
    pub poll: Duration,
    /// How many decorate requests are kept to be echoed by `ping`.
    pub floor_samples: usize,
    pub drain_timeout: Duration,
    /// The cost run: the embedder and judge are the OpenAI-compatible provider, pointed at a
    /// local endpoint that counts what it is asked (else the built-in models run).
    pub cost: bool,
    /// Wall-clock time the simulated model takes per call (between decorate and report): 0
    /// sends the next call at once, a stress far beyond agents that wait on a real model.
    pub think: Duration,
    /// Turns of the paced phase (0: none).
    pub paced: usize,
}

impl LoadOptions {
    pub fn to_json(&self) -> Value {
        json!({
            "recalld": self.recalld,
            "traces": std::fs::canonicalize(&self.traces).unwrap_or_else(|_| self.traces.clone()),
            "clients": self.clients,
            "memories": self.memories, "messages": self.messages, "ceiling": self.ceiling,
            "engine": self.engine, "poll_ms": self.poll.as_millis() as u64,
            "floor_samples": self.floor_samples, "drain_timeout_s": self.drain_timeout.as_secs(),
            "cost": self.cost, "think_ms": self.think.as_millis() as u64, "paced": self.paced,
        })
    }
}

/// What one client thread measured.
#[derive(Default)]
struct Measured {
    decorate: Vec<f64>,
    decorate_recall: Vec<f64>,
    report: Vec<f64>,
    recall: Vec<f64>,
    /// `info.recall.ms.embed`: the wait for the new message's embedding (queue and model).
    recall_embed: Vec<f64>,
    bytes: Vec<usize>,
    /// Decorate arguments kept for the ping floor.
    kept: Vec<Value>,
    errors: Vec<String>,
}

fn ms(since: Instant) -> f64 {
    since.elapsed().as_secs_f64() * 1e3
}

fn encoded_len(op: &str, args: &Value) -> usize {
    let args = args.as_object().cloned().unwrap_or_default();
    encode_request(&Request {
        id: 1,
        op: op.into(),
        args,
    })
    .len()
}

pub fn run(o: &LoadOptions, progress: &mut dyn FnMut(String)) -> Result<LoadReport, String> {
    let started = Instant::now();
    let traces = traces::load(&o.traces)?;
    let memories = o.memories.max(1);
    // A client without a memory of its own would measure nothing.
    let clients = o.clients.clamp(1, memories);
    let endpoint = if o.cost { Some(CountingModel::start()?) } else { None };
    let models = endpoint.as_ref().map(CountingModel::models_toml).unwrap_or_default();
    let mut daemon = Daemon::start_logging(&o.recalld, &o.engine, &models, "error")?;
    let socket = daemon.socket.clone();
    let server = connect(&socket)?
        .call("hello", json!({"client": "recalld-bench load"}))
        .map_err(|e| format!("hello: {e}"))?;
    progress(format!(
        "daemon {} started; {} traces; {clients} clients over {memories} memories to {} messages each at ceiling {}",
        o.recalld.display(),
        traces.len(),
        o.messages,
        o.ceiling
    ));

    let t0 = Instant::now();
    let cpu0 = (Cpu::of(daemon.pid()), Cpu::of_self());
    let sampler = Sampler::start(socket.clone(), daemon.pid(), o.poll, t0)?;
    // About half the messages are the model's, so a memory takes messages/2 calls.
    let expected_pairs = (memories as u64 * o.messages / 2).max(1);
    let keep_every = (expected_pairs / o.floor_samples.max(1) as u64).max(1) as usize;
    let done = AtomicU64::new(0);
    let pid = daemon.pid();
    let outcomes: Vec<(ClientOutcome, Instant)> = std::thread::scope(|scope| {
        let handles: Vec<_> = (0..clients)
            .map(|c| {
                let (socket, traces, done) = (&socket, &traces, &done);
                scope.spawn(move || {
                    let agents = (c..memories)
                        .step_by(clients)
                        .map(|m| Agent::new(format!("load-{m}"), m, traces, o.ceiling))
                        .collect();
                    let out = traffic(socket, agents, o.messages, keep_every, o.think, done);
                    (out, Instant::now())
                })
            })
            .collect();
        // A long run says how far it is every PROGRESS_EVERY. Polled often: the CPU times are
        // read when the last client is done (a 200 ms poll made a 3 s run's rate move by 6%).
        let mut last = Instant::now();
        while !handles.iter().all(|h| h.is_finished()) {
            std::thread::sleep(Duration::from_millis(5));
            if last.elapsed() >= PROGRESS_EVERY {
                last = Instant::now();
                let n = done.load(Ordering::Relaxed);
                progress(format!(
                    "traffic: {n} of about {expected_pairs} pairs in {:.0} s ({:.1}/s), daemon RSS {} MB",
                    t0.elapsed().as_secs_f64(),
                    n as f64 / t0.elapsed().as_secs_f64().max(1e-9),
                    sampler::rss_kb(pid).map_or("?".into(), |kb| (kb / 1024).to_string())
                ));
            }
        }
        handles
            .into_iter()
            .map(|h| {
                h.join()
                    .unwrap_or_else(|_| (Err("a client panicked".into()), Instant::now()))
            })
            .collect()
    });
    let cpu_end = (Cpu::of(pid), Cpu::of_self());
    // From the start to the last client's last reply.
    let traffic_s = outcomes
        .iter()
        .map(|(_, end)| end.duration_since(t0).as_secs_f64())
        .fold(0.0, f64::max);
    let cpu = match (cpu0, cpu_end) {
        ((Some(d0), Some(b0)), (Some(d1), Some(b1))) => Some(TrafficCpu {
            daemon: d1.since(d0),
            bench: b1.since(b0),
        }),
        _ => None,
    };
    let mut all = Measured::default();
    let mut agents = Vec::new();
    for (out, _) in outcomes {
        let (m, a) = out?;
        all.decorate.extend(m.decorate);
        all.decorate_recall.extend(m.decorate_recall);
        all.report.extend(m.report);
        all.recall.extend(m.recall);
        all.recall_embed.extend(m.recall_embed);
        all.bytes.extend(m.bytes);
        all.kept.extend(m.kept);
        all.errors.extend(m.errors);
        agents.extend(a);
    }
    agents.sort_by_key(|a| a.memory.trim_start_matches("load-").parse::<usize>().unwrap_or(0));
    let pairs = all.report.len() as u64;
    progress(format!("traffic: {pairs} pairs in {traffic_s:.1} s"));

    let mut admin = connect(&socket)?;
    let depth_at_end = admin.call("stats", json!({})).map_err(|e| e.to_string())?["lanes"]["depth"]
        .as_u64()
        .unwrap_or(0);
    let (drain_s, jobs_left, parked) = drain(&mut admin, &agents, o.drain_timeout)?;
    progress(match jobs_left {
        0 => format!("lanes drained in {drain_s:.1} s ({depth_at_end} jobs waiting at the end of traffic)"),
        n => format!("lanes not drained in {drain_s:.1} s: {n} of {depth_at_end} jobs left"),
    });
    let samples = sampler.finish()?;

    let stats = admin.call("stats", json!({})).map_err(|e| format!("stats: {e}"))?;
    let storage = storage(&daemon.data_dir(), &stats, &agents);
    let cost = cost(&stats, endpoint.as_ref(), pairs, memories);
    let mut lane_stats = stats["lanes"].clone();
    if let Some(l) = lane_stats.as_object_mut() {
        l.remove("memories");
    }

    let (ping, ping_bytes) = floor(&socket, &all.kept, clients)?;
    progress(format!("floor: {} pings", ping.n));

    // Beside a backlog, a quiet before each turn would first wait for all of it.
    let (paced, paced_skipped) = match (o.paced, jobs_left) {
        (0, _) => (None, Some("not asked for (`--paced 0`)".to_owned())),
        // A lane that does not go quiet is reported; the rest of the run goes on.
        (_, 0) => match paced(&socket, &mut agents, o.paced) {
            Ok(p) => {
                progress(format!("paced: {} turns", p.turns));
                (Some(p), None)
            }
            Err(e) => (None, Some(format!("stopped: {e}"))),
        },
        (_, n) => (None, Some(format!("not run: the lanes did not drain ({n} jobs left)"))),
    };

    drop(admin);
    let cold_start = cold_start(&mut daemon, &mut agents[0])?;
    progress(format!(
        "cold start: hello {:.0} ms, first decorate {:.0} ms",
        cold_start.hello_ms, cold_start.first_decorate_ms
    ));

    let decorate = Latency::of(all.decorate.iter().chain(&all.decorate_recall).copied().collect());
    let ratio = |a: f64, b: f64| if b > 0.0 { a / b } else { 0.0 };
    let rss_max_kb = samples.iter().filter_map(|s| s.rss_kb).max();
    Ok(LoadReport {
        options: o.to_json(),
        server,
        traces: traces.len(),
        clients,
        memories,
        traffic_s,
        pairs,
        pairs_per_s: pairs as f64 / traffic_s.max(1e-9),
        ratio_p50: ratio(decorate.p50_ms, ping.p50_ms),
        ratio_p99: ratio(decorate.p99_ms, ping.p99_ms),
        decorate,
        decorate_without_recall: Latency::of(all.decorate),
        decorate_with_recall: Latency::of(all.decorate_recall),
        report: Latency::of(all.report),
        recall: Latency::of(all.recall),
        recall_embed: Latency::of(all.recall_embed),
        decorate_request_bytes_mean: mean(&all.bytes),
        decorate_request_bytes_max: all.bytes.iter().copied().max().unwrap_or(0),
        ping,
        ping_payload_bytes_mean: mean(&ping_bytes),
        recall_embeddings_dropped: stats["recall_embeddings_dropped"].as_u64(),
        state_cache: stats["state_cache"].clone(),
        note_asks: agents.iter().map(|a| a.note_calls).sum(),
        notes_written: agents.iter().map(|a| a.notes_written).sum(),
        errors: all.errors.len() as u64,
        error_examples: all.errors.into_iter().take(5).collect(),
        lanes: Lanes {
            max_depth: samples.iter().map(|s| s.depth).max().unwrap_or(0).max(depth_at_end),
            depth_at_end_of_traffic: depth_at_end,
            drain_s,
            jobs_left,
            parked,
            stats: lane_stats,
            samples,
        },
        rss_max_kb,
        cpu,
        storage,
        paced,
        paced_skipped,
        cold_start,
        cost,
        seconds: started.elapsed().as_secs_f64(),
    })
}

/// Model calls and tokens outside the agent's own, as the daemon counts them (`stats.models`)
/// and, in the cost run, as the counting endpoint saw them.
fn cost(stats: &Value, endpoint: Option<&CountingModel>, pairs: u64, memories: usize) -> Cost {
    let total: Counts = serde_json::from_value(stats["models"]["total"].clone()).unwrap_or_default();
    let per = |n: u64, by: u64| n as f64 / by.max(1) as f64;
    let external = endpoint.map_or(0, |e| e.counts().values().map(|c| c.calls).sum());
    Cost {
        provider: if endpoint.is_some() {
            "openai-compatible (counting endpoint)"
        } else {
            "built-in"
        }
        .into(),
        calls_per_turn: per(total.embed_calls + total.judge_calls, pairs),
        tokens_per_turn: per(total.embed_tokens + total.judge_tokens, pairs),
        calls_per_memory: per(total.embed_calls + total.judge_calls, memories as u64),
        tokens_per_memory: per(total.embed_tokens + total.judge_tokens, memories as u64),
        daemon: total,
        external_calls: external,
        endpoint: endpoint.map(CountingModel::counts).unwrap_or_default(),
        embed_cache: serde_json::from_value(stats["models"]["embed_cache"].clone()).unwrap_or_default(),
    }
}

fn connect(socket: &Path) -> Result<Client, String> {
    Client::connect(socket).map_err(|e| format!("cannot connect to {}: {e}", socket.display()))
}

fn mean(v: &[usize]) -> f64 {
    v.iter().sum::<usize>() as f64 / v.len().max(1) as f64
}

/// What one client measured, and its agents as the traffic left them.
type ClientOutcome<'a> = Result<(Measured, Vec<Agent<'a>>), String>;

/// One client's traffic: turns in rotation over its memories until each holds `messages`.
fn traffic<'a>(
    socket: &Path,
    mut agents: Vec<Agent<'a>>,
    messages: u64,
    keep_every: usize,
    think: Duration,
    done: &AtomicU64,
) -> ClientOutcome<'a> {
    let mut client = connect(socket)?;
    let mut m = Measured::default();
    // Keeps every `keep_every`-th request, the first included.
    let mut until_kept = 0usize;
    while agents.iter().any(|a| a.stored < messages) {
        for a in agents.iter_mut().filter(|a| a.stored < messages) {
            let keep = until_kept == 0;
            if keep {
                until_kept = keep_every;
            }
            until_kept -= 1;
            if turn(&mut client, a, &mut m, think, keep)? {
                done.fetch_add(1, Ordering::Relaxed);
            }
        }
    }
    Ok((m, agents))
}

/// One turn of `a`: its decorate, the model's time (`think`), its report, timed into `m` (and
/// the decorate's arguments kept for the floor when `keep`). Ok(false) when the daemon refused
/// a call: counted, and the session left.
fn turn(client: &mut Client, a: &mut Agent, m: &mut Measured, think: Duration, keep: bool) -> Result<bool, String> {
    /// What the traffic reads of a decorate's reply (its `request` is cut out unread, and of
    /// its `info` only what the next report and the figures need is built).
    #[derive(serde::Deserialize)]
    struct Decorated {
        info: Info,
    }
    #[derive(serde::Deserialize)]
    struct Info {
        #[serde(default)]
        note_ask: bool,
        #[serde(default)]
        episodes: Value,
        recall: Option<Recall>,
    }
    #[derive(serde::Deserialize)]
    struct Recall {
        ms: Option<RecallMs>,
    }
    #[derive(serde::Deserialize)]
    struct RecallMs {
        total: Option<f64>,
        embed: Option<f64>,
    }
    let args = a.decorate_call();
    if keep {
        m.kept.push(serde_json::to_value(&args).map_err(|e| e.to_string())?);
    }
    let t = Instant::now();
    let decorated = match client
        .send_with("decorate", |b| args.write_msgpack(&mut b.writer()))
        .and_then(|id| client.recv_without::<Decorated>(id, "request"))
    {
        Ok(d) => d,
        Err(e) => {
            note_error(m, &a.memory, "decorate", e)?;
            a.abandon_session();
            return Ok(false);
        }
    };
    let took = ms(t);
    m.bytes.push(client.sent_bytes());
    let Info {
        note_ask,
        episodes,
        recall,
    } = decorated.info;
    match recall.and_then(|r| r.ms).and_then(|ms| Some((ms.total?, ms.embed))) {
        Some((total, embed)) => {
            m.decorate_recall.push(took);
            m.recall.push(total);
            m.recall_embed.push(embed.unwrap_or(0.0));
        }
        None => m.decorate.push(took),
    }
    // The model's time: this client's other memories wait too, as its agent would.
    std::thread::sleep(think);
    let args = a.report_args(&json!({"note_ask": note_ask, "episodes": episodes}));
    let t = Instant::now();
    match client.call("report", args) {
        Ok(_) => {
            m.report.push(ms(t));
            Ok(true)
        }
        Err(e) => {
            note_error(m, &a.memory, "report", e)?;
            a.abandon_session();
            Ok(false)
        }
    }
}

/// The paced phase: `turns` turns in rotation over the memories on one connection, each
/// decorate sent once its memory's lane is quiet (`quiet`, right after the turn before: how
/// long it waits is the lanes' time per turn).
fn paced(socket: &Path, agents: &mut [Agent], turns: usize) -> Result<Paced, String> {
    let mut client = connect(socket)?;
    let mut m = Measured::default();
    let mut waits = Vec::with_capacity(turns);
    for i in 0..turns {
        let a = &mut agents[i % agents.len()];
        let t = Instant::now();
        let left = client
            .quiet(&a.memory, PACED_QUIET.as_millis() as u64)
            .map_err(|e| format!("quiet {}: {e}", a.memory))?;
        if left > 0 {
            return Err(format!(
                "paced: {}'s lane still had {left} jobs after {} s",
                a.memory,
                PACED_QUIET.as_secs()
            ));
        }
        waits.push(ms(t));
        turn(&mut client, a, &mut m, Duration::ZERO, false)?;
    }
    Ok(Paced {
        turns,
        decorate_without_recall: Latency::of(m.decorate),
        decorate_with_recall: Latency::of(m.decorate_recall),
        report: Latency::of(m.report),
        recall: Latency::of(m.recall),
        lane_wait: Latency::of(waits),
        errors: m.errors,
    })
}

/// A refusal from the daemon is counted and the session left; a broken connection ends the run.
fn note_error(m: &mut Measured, memory: &str, op: &str, e: ClientError) -> Result<(), String> {
    match e {
        ClientError::Server(_) => {
            m.errors.push(format!("{memory} {op}: {e}"));
            Ok(())
        }
        e => Err(format!("{memory} {op}: {e}")),
    }
}

/// Waits until every memory's lane is empty; returns (seconds, jobs left, parked).
fn drain(client: &mut Client, agents: &[Agent], timeout: Duration) -> Result<(f64, u64, u64), String> {
    let t = Instant::now();
    let (mut left, mut parked) = (0, 0);
    for a in agents {
        loop {
            let remaining = timeout.saturating_sub(t.elapsed());
            // The client gives up reading after 60 s: ask in slices shorter than that.
            let slice = remaining.min(Duration::from_secs(50)).as_millis() as u64;
            let r = client
                .call("quiet", json!({"memory": a.memory, "timeout_ms": slice.max(1)}))
                .map_err(|e| format!("quiet {}: {e}", a.memory))?;
            let jobs = r["jobs"].as_u64().unwrap_or(0);
            if jobs == 0 || remaining.is_zero() {
                left += jobs;
                parked += r["parked"].as_u64().unwrap_or(0);
                break;
            }
        }
    }
    Ok((t.elapsed().as_secs_f64(), left, parked))
}

/// Bytes on disk per stored message, against the transcript's own bytes.
fn storage(data: &Path, stats: &Value, agents: &[Agent]) -> Storage {
    let (data_dir_bytes, data_dir_apparent_bytes) = du(data);
    let (index_bytes, _) = du(&data.join("index"));
    let messages_sent = agents.iter().map(|a| a.stored).sum::<u64>();
    let raw = agents.iter().map(|a| a.raw_bytes).sum::<u64>();
    let per = |b: u64| b as f64 / messages_sent.max(1) as f64;
    Storage {
        messages_sent,
        messages_stored: stats["messages"].as_u64().unwrap_or(0),
        facts: stats["facts"].as_u64().unwrap_or(0),
        data_dir_bytes,
        index_bytes,
        data_dir_apparent_bytes,
        store_bytes: stats["store_bytes"].as_u64().unwrap_or(0),
        raw_transcript_bytes: raw,
        bytes_per_message: per(data_dir_bytes),
        raw_bytes_per_message: per(raw),
        tables: {
            let mut t: Vec<(String, u64)> = stats["store_tables"]
                .as_object()
                .into_iter()
                .flatten()
                .map(|(name, v)| (name.clone(), v["bytes"].as_u64().unwrap_or(0)))
                .collect();
            t.sort_by_key(|b| std::cmp::Reverse(b.1));
            t
        },
        group_commits: {
            let g = &stats["store_groups"];
            let n = |k: &str| g[k].as_u64().unwrap_or(0);
            (n("commits"), n("writes"), n("all_writes"))
        },
    }
}

/// (allocated, apparent) bytes of the files under `dir`.
fn du(dir: &Path) -> (u64, u64) {
    use std::os::unix::fs::MetadataExt;
    let mut total = (0, 0);
    let Ok(entries) = std::fs::read_dir(dir) else {
        return total;
    };
    for e in entries.flatten() {
        let Ok(meta) = e.metadata() else { continue };
        if meta.is_dir() {
            let (a, b) = du(&e.path());
            total = (total.0 + a, total.1 + b);
        } else {
            total = (total.0 + meta.blocks() * 512, total.1 + meta.len());
        }
    }
    total
}

/// One ping client's times (ms) and request sizes (bytes).
type Pinged = Result<(Vec<f64>, Vec<usize>), String>;

/// `ping` echoing the kept decorate requests, split over `clients` connections at once.
fn floor(socket: &Path, kept: &[Value], clients: usize) -> Result<(Latency, Vec<usize>), String> {
    let chunk = kept.len().div_ceil(clients).max(1);
    let results: Vec<Pinged> = std::thread::scope(|scope| {
        let handles: Vec<_> = kept
            .chunks(chunk)
            .map(|part| {
                scope.spawn(move || {
                    let mut client = connect(socket)?;
                    let (mut times, mut bytes) = (Vec::new(), Vec::new());
                    for args in part {
                        let args = json!({"payload": args});
                        bytes.push(encoded_len("ping", &args));
                        let t = Instant::now();
                        client.call("ping", args).map_err(|e| format!("ping: {e}"))?;
                        times.push(ms(t));
                    }
                    Ok((times, bytes))
                })
            })
            .collect();
        handles
            .into_iter()
            .map(|h| h.join().unwrap_or_else(|_| Err("a ping client panicked".into())))
            .collect()
    });
    let (mut times, mut bytes) = (Vec::new(), Vec::new());
    for r in results {
        let (t, b) = r?;
        times.extend(t);
        bytes.extend(b);
    }
    Ok((Latency::of(times), bytes))
}

/// Stops the daemon, starts a new one on the same data, and times it to `hello` and to the
/// agent's next decorate at once (a memory the new daemon has never loaded: a dry run, so the
/// same message can be asked again); then starts it once more and asks that message for real
/// once the daemon's warm-up (the model's first pass, the recently used memories loaded) is
/// done, as a restart followed by a pause sees it.
/// Restarts the daemon and connects once it listens; returns when it was spawned.
fn restarted(daemon: &mut Daemon) -> Result<(Instant, Client), String> {
    let spawned = daemon.restart()?;
    daemon.wait_listening()?;
    Ok((spawned, connect(&daemon.socket)?))
}

fn cold_start(daemon: &mut Daemon, agent: &mut Agent) -> Result<ColdStart, String> {
    let (spawned, mut client) = restarted(daemon)?;
    client
        .call("hello", json!({"client": "recalld-bench load"}))
        .map_err(|e| format!("hello after restart: {e}"))?;
    let hello_ms = ms(spawned);
    let args = agent.decorate_args();
    let first_decorate_bytes = encoded_len("decorate", &args);
    let mut dry = args.clone();
    dry["dry_run"] = json!(true);
    let asked = Instant::now();
    let out = client
        .call("decorate", dry)
        .map_err(|e| format!("decorate after restart: {e}"))?;
    let first_decorate_ms = ms(asked);
    let first_decorate_recall_ms = out["info"]["recall"]["ms"].clone();
    let first_decorate_aligned_on = out["info"]["aligned_on"].as_str().unwrap_or("?").to_owned();

    let (_, mut client) = restarted(daemon)?;
    let waited = Instant::now();
    let warm = loop {
        let stats = client
            .call("stats", json!({}))
            .map_err(|e| format!("stats after restart: {e}"))?;
        if stats["warm"]["done"] == true {
            break stats["warm"].clone();
        }
        if waited.elapsed() > Duration::from_secs(120) {
            return Err("the daemon's warm-up did not finish within 120 s".into());
        }
        std::thread::sleep(Duration::from_millis(20));
    };
    let asked = Instant::now();
    let out = client
        .call("decorate", args)
        .map_err(|e| format!("decorate after the warm-up: {e}"))?;
    let warmed_decorate_ms = ms(asked);
    Ok(ColdStart {
        hello_ms,
        first_decorate_ms,
        first_decorate_bytes,
        first_decorate_recall_ms,
        first_decorate_aligned_on,
        warm_up_ms: warm["ms"].as_f64().unwrap_or(0.0),
        warmed_memories: warm["memories"].as_u64().unwrap_or(0),
        warmed_decorate_ms,
        warmed_decorate_recall_ms: out["info"]["recall"]["ms"].clone(),
        rss_kb_after: sampler::rss_kb(daemon.pid()),
    })
}
