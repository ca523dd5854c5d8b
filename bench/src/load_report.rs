//! What the load mode measured: the JSON it writes (`load.json`) and the Markdown table.

use std::path::Path;

use serde::Serialize;
use serde_json::Value;

use crate::sampler::{Cpu, Sample};

/// Latencies (or other times) of one kind, in ms.
#[derive(Debug, Clone, Default, Serialize)]
pub struct Latency {
    pub n: usize,
    pub p50_ms: f64,
    pub p99_ms: f64,
    pub max_ms: f64,
    pub mean_ms: f64,
}

impl Latency {
    pub fn of(mut ms: Vec<f64>) -> Latency {
        if ms.is_empty() {
            return Latency::default();
        }
        ms.sort_by(f64::total_cmp);
        // Nearest rank: the value at or below which q of the calls fall.
        let rank = |q: f64| ms[((q * ms.len() as f64).ceil() as usize).clamp(1, ms.len()) - 1];
        Latency {
            n: ms.len(),
            p50_ms: rank(0.5),
            p99_ms: rank(0.99),
            max_ms: ms[ms.len() - 1],
            mean_ms: ms.iter().sum::<f64>() / ms.len() as f64,
        }
    }

    fn cell(&self) -> String {
        if self.n == 0 {
            return "– (none)".into();
        }
        format!(
            "{:.2} / {:.2} (max {:.1}, n {})",
            self.p50_ms, self.p99_ms, self.max_ms, self.n
        )
    }
}

#[derive(Debug, Clone, Default, Serialize)]
pub struct Lanes {
    pub max_depth: u64,
    /// Jobs waiting when the traffic stopped.
    pub depth_at_end_of_traffic: u64,
    /// Seconds from the end of the traffic until `quiet` said every memory's lane was empty.
    pub drain_s: f64,
    /// Jobs still queued (the drain timed out) and parked (failed 3 times) after the drain.
    pub jobs_left: u64,
    pub parked: u64,
    /// `stats.lanes` after the drain (jobs run, units judged, …; per-memory list left out).
    pub stats: Value,
    pub samples: Vec<Sample>,
}

/// CPU seconds used during the traffic: the pairs/s of a run on a shared machine move with
/// what else runs, the CPU a pair costs much less.
#[derive(Debug, Clone, Copy, Serialize)]
pub struct TrafficCpu {
    pub daemon: Cpu,
    pub bench: Cpu,
}

impl TrafficCpu {
    /// Per pair, in µs: the request path, the lanes, the daemon's other threads, the
    /// benchmark's clients.
    fn cell(&self, pairs: u64, traffic_s: f64) -> String {
        let per = |s: f64| s * 1e6 / pairs.max(1) as f64;
        let cores = std::thread::available_parallelism().map_or(1, |n| n.get()) as f64;
        format!(
            "request path **{:.0} µs**, lanes {:.0} µs, the daemon's other threads (query \
             embedding, model pool, index commits) {:.0} µs, the benchmark's clients {:.0} µs \
             ({:.0}% of {cores} cores busy over the traffic)",
            per(self.daemon.request_path_s()),
            per(self.daemon.lanes_s),
            per(self.daemon.other_s),
            per(self.bench.total_s),
            100.0 * (self.daemon.total_s + self.bench.total_s) / (cores * traffic_s.max(1e-9)),
        )
    }
}

#[derive(Debug, Clone, Default, Serialize)]
pub struct Storage {
    /// History messages the agents sent (user, assistant, tool), summed over memories.
    pub messages_sent: u64,
    /// `stats.messages`: what the daemon holds (note calls included).
    pub messages_stored: u64,
    pub facts: u64,
    /// Blocks allocated under the data dir (LMDB and the indexes), and of it the indexes.
    pub data_dir_bytes: u64,
    pub index_bytes: u64,
    /// Apparent size of the files (LMDB's file may be larger than what it has written).
    pub data_dir_apparent_bytes: u64,
    /// `stats.store_bytes`.
    pub store_bytes: u64,
    /// The sent messages' JSON text.
    pub raw_transcript_bytes: u64,
    pub bytes_per_message: f64,
    pub raw_bytes_per_message: f64,
    /// `stats.store_tables`: the store's tables by the bytes of their pages, largest first.
    pub tables: Vec<(String, u64)>,
    /// `stats.store_groups`: commits that held several writes, the writes they held, and every
    /// write since the daemon started.
    pub group_commits: (u64, u64, u64),
}

#[derive(Debug, Clone, Default, Serialize)]
pub struct ColdStart {
    /// From spawning the daemon on the existing data until `hello` answered.
    pub hello_ms: f64,
    /// The first `decorate` of an existing memory right after `hello` (its state not loaded
    /// yet, its indexes not opened; a dry run).
    pub first_decorate_ms: f64,
    pub first_decorate_bytes: usize,
    /// Of the first decorate: recall's steps as its `info` gives them (`embed`, `search`,
    /// `walk`, `total`; null when it ran no recall) and what its alignment read.
    pub first_decorate_recall_ms: serde_json::Value,
    pub first_decorate_aligned_on: String,
    /// After a second restart: the daemon's warm-up (`stats.warm`: its time and the memories
    /// it loaded), then the same message decorated for real.
    pub warm_up_ms: f64,
    pub warmed_memories: u64,
    pub warmed_decorate_ms: f64,
    pub warmed_decorate_recall_ms: serde_json::Value,
    pub rss_kb_after: Option<u64>,
}

/// The paced phase (see `load`): turns sent once their memory's lane is quiet.
#[derive(Debug, Clone, Default, Serialize)]
pub struct Paced {
    pub turns: usize,
    pub decorate_without_recall: Latency,
    pub decorate_with_recall: Latency,
    pub report: Latency,
    /// `info.recall.ms.total` of the decorates that ran recall.
    pub recall: Latency,
    /// How long each turn's `quiet` waited: the lanes' time for the turn before.
    pub lane_wait: Latency,
    pub errors: Vec<String>,
}

/// What the run's model calls cost beside the agent's own model.
#[derive(Debug, Clone, Default, Serialize)]
pub struct Cost {
    /// Which models ran: "built-in" (local, no calls leave the machine) or the counting endpoint.
    pub provider: String,
    /// `stats.models.total`: the daemon's own count of its model calls.
    pub daemon: recalld::models::Counts,
    pub calls_per_turn: f64,
    pub tokens_per_turn: f64,
    pub calls_per_memory: f64,
    pub tokens_per_memory: f64,
    /// HTTP requests the counting endpoint answered (0 with the built-in models: none leave).
    pub external_calls: u64,
    /// Per endpoint path and judge task, what it was asked.
    pub endpoint: std::collections::BTreeMap<String, crate::counting_model::Count>,
    /// `stats.models.embed_cache`: texts answered from the daemon's embedding cache and texts
    /// its model embedded.
    pub embed_cache: recalld::models::cache::CacheCounts,
}

#[derive(Debug, Clone, Default, Serialize)]
pub struct LoadReport {
    pub options: Value,
    pub server: Value,
    pub traces: usize,
    pub clients: usize,
    pub memories: usize,
    pub traffic_s: f64,
    pub pairs: u64,
    pub pairs_per_s: f64,
    /// Every decorate; and apart, those that ran recall (embedding the new user message).
    pub decorate: Latency,
    pub decorate_without_recall: Latency,
    pub decorate_with_recall: Latency,
    pub report: Latency,
    /// `info.recall.ms.total` of the decorates that ran recall (the daemon's own account).
    pub recall: Latency,
    /// `info.recall.ms.embed`: of it, the wait for the new message's embedding.
    pub recall_embed: Latency,
    /// `stats.recall_embeddings_dropped`: new user messages recalled by words only, because
    /// their embedding was not ready within the recall deadline.
    pub recall_embeddings_dropped: Option<u64>,
    pub decorate_request_bytes_mean: f64,
    pub decorate_request_bytes_max: usize,
    /// `ping` echoing a sample of the decorate requests, same socket, same number of clients.
    pub ping: Latency,
    pub ping_payload_bytes_mean: f64,
    /// decorate ÷ ping at p50 and p99.
    pub ratio_p50: f64,
    pub ratio_p99: f64,
    pub note_asks: u64,
    pub notes_written: u64,
    pub errors: u64,
    pub error_examples: Vec<String>,
    pub lanes: Lanes,
    pub rss_max_kb: Option<u64>,
    /// CPU used while the traffic ran, by the daemon and by the benchmark's clients.
    pub cpu: Option<TrafficCpu>,
    /// `stats.state_cache` at the end of the traffic: memories whose state is kept between ops,
    /// and the heap the daemon estimates they take.
    pub state_cache: serde_json::Value,
    pub storage: Storage,
    /// The paced phase, or why it did not run.
    pub paced: Option<Paced>,
    pub paced_skipped: Option<String>,
    pub cold_start: ColdStart,
    pub cost: Cost,
    pub seconds: f64,
}

impl LoadReport {
    pub fn markdown(&self, command: &str) -> String {
        let o = &self.options;
        let mut md = format!(
            "Load on real agent traffic (`{}`, {} traces as sessions), recalld {}: {} clients over {} \
             memories, {} stored messages per memory, ceiling {}, history resent in full each call, \
             a simulated model answering note asks in {} ms. Times in ms, p50 / p99.\n\n```sh\n{command}\n```\n\n",
            Path::new(o["traces"].as_str().unwrap_or("?"))
                .file_name()
                .and_then(|f| f.to_str())
                .unwrap_or("?"),
            self.traces,
            self.server["server_version"].as_str().unwrap_or("?"),
            self.clients,
            self.memories,
            o["messages"],
            o["ceiling"],
            o["think_ms"],
        );
        let s = &self.storage;
        let l = &self.lanes;
        let mb = |kb: Option<u64>| kb.map_or("?".into(), |k| format!("{:.0} MB", k as f64 / 1024.0));
        let mut rows: Vec<(String, String)> = vec![
            (
                "decorate+report pairs".into(),
                format!(
                    "{} in {:.1} s: **{:.0} pairs/s**",
                    self.pairs, self.traffic_s, self.pairs_per_s
                ),
            ),
            ("decorate (all)".into(), self.decorate.cell()),
            ("decorate without recall".into(), self.decorate_without_recall.cell()),
            ("decorate that ran recall".into(), self.decorate_with_recall.cell()),
            ("recall (`info.recall.ms.total`)".into(), self.recall.cell()),
            (
                "of it, the query embedding (`…ms.embed`)".into(),
                self.recall_embed.cell(),
            ),
            (
                "recall embeddings late (words only)".into(),
                self.recall_embeddings_dropped.map_or("–".into(), |n| n.to_string()),
            ),
            ("report".into(), self.report.cell()),
            (
                "CPU per pair during the traffic".into(),
                self.cpu.map_or("–".into(), |c| c.cell(self.pairs, self.traffic_s)),
            ),
            (
                "decorate request size".into(),
                format!(
                    "mean {:.1} KB, max {:.1} KB",
                    self.decorate_request_bytes_mean / 1024.0,
                    self.decorate_request_bytes_max as f64 / 1024.0
                ),
            ),
            (
                "ping floor (same payloads)".into(),
                format!(
                    "{} (mean {:.1} KB)",
                    self.ping.cell(),
                    self.ping_payload_bytes_mean / 1024.0
                ),
            ),
            (
                "decorate ÷ ping".into(),
                format!("**{:.1}× at p50, {:.1}× at p99**", self.ratio_p50, self.ratio_p99),
            ),
        ];
        rows.extend(self.paced_rows());
        rows.extend([
            (
                "note asks answered · notes written".into(),
                format!("{} · {}", self.note_asks, self.notes_written),
            ),
            ("errors".into(), self.errors.to_string()),
            (
                "lane depth".into(),
                format!(
                    "max {}, {} at end of traffic; over time: {}",
                    l.max_depth,
                    l.depth_at_end_of_traffic,
                    depth_series(&l.samples, 8)
                ),
            ),
            (
                "lanes drained (`quiet` per memory)".into(),
                if l.jobs_left == 0 {
                    format!("in {:.1} s; {} parked", l.drain_s, l.parked)
                } else {
                    format!(
                        "**not within {:.0} s**: {} jobs left (`--drain-timeout`), {} parked; the \
                         end state below and the ping floor were measured with the lanes still busy",
                        l.drain_s, l.jobs_left, l.parked
                    )
                },
            ),
            ("daemon RSS (max over the run)".into(), mb(self.rss_max_kb)),
            (
                "states kept between ops (`stats.state_cache`)".into(),
                format!(
                    "{} memories, {:.1} MB estimated",
                    self.state_cache["memories"].as_u64().unwrap_or(0),
                    self.state_cache["bytes"].as_u64().unwrap_or(0) as f64 / 1e6
                ),
            ),
            (
                "stored messages · facts".into(),
                format!(
                    "{} sent, {} held by the daemon · {}",
                    s.messages_sent, s.messages_stored, s.facts
                ),
            ),
            (
                "bytes on disk per message".into(),
                format!(
                    "{:.0} B (data dir {:.1} MB, of it indexes {:.1} MB) vs raw transcript {:.0} B",
                    s.bytes_per_message,
                    s.data_dir_bytes as f64 / 1e6,
                    s.index_bytes as f64 / 1e6,
                    s.raw_bytes_per_message
                ),
            ),
            (
                "store by table, per stored message".into(),
                s.tables
                    .iter()
                    .take(6)
                    .map(|(t, b)| format!("{t} {:.0} B", *b as f64 / s.messages_stored.max(1) as f64))
                    .collect::<Vec<_>>()
                    .join(", "),
            ),
            (
                "writes sharing a commit (`stats.store_groups`)".into(),
                format!(
                    "{} of {} writes, in {} commits",
                    s.group_commits.1, s.group_commits.2, s.group_commits.0
                ),
            ),
            (
                "cold start on that data".into(),
                format!(
                    "hello {:.0} ms after the start, then the first decorate of an existing memory {:.0} ms \
                     (recall {}; aligned on the {} history); after a restart and the warm-up ({:.0} ms, \
                     {} memories) the same message {:.0} ms (recall {}; RSS then {})",
                    self.cold_start.hello_ms,
                    self.cold_start.first_decorate_ms,
                    recall_steps(&self.cold_start.first_decorate_recall_ms),
                    self.cold_start.first_decorate_aligned_on,
                    self.cold_start.warm_up_ms,
                    self.cold_start.warmed_memories,
                    self.cold_start.warmed_decorate_ms,
                    recall_steps(&self.cold_start.warmed_decorate_recall_ms),
                    mb(self.cold_start.rss_kb_after)
                ),
            ),
            (
                format!("model calls outside the agent's own ({})", self.cost.provider),
                format!(
                    "{:.2} calls and {:.0} tokens per turn; {:.0} calls and {:.0} tokens per memory; in total \
                     embedder {} calls · {} tokens, judge {} calls · {} tokens, {} failed; HTTP requests \
                     that left the daemon: {}",
                    self.cost.calls_per_turn,
                    self.cost.tokens_per_turn,
                    self.cost.calls_per_memory,
                    self.cost.tokens_per_memory,
                    self.cost.daemon.embed_calls,
                    self.cost.daemon.embed_tokens,
                    self.cost.daemon.judge_calls,
                    self.cost.daemon.judge_tokens,
                    self.cost.daemon.errors,
                    self.cost.external_calls
                ),
            ),
            (
                "embedding cache (texts)".into(),
                format!(
                    "{} answered from it, {} embedded ({:.0}% hits)",
                    self.cost.embed_cache.hits,
                    self.cost.embed_cache.misses,
                    100.0 * self.cost.embed_cache.hits as f64
                        / (self.cost.embed_cache.hits + self.cost.embed_cache.misses).max(1) as f64
                ),
            ),
        ]);
        md.push_str("| measure | value |\n|---|---|\n");
        for (k, v) in rows {
            md.push_str(&format!("| {k} | {v} |\n"));
        }
        if !self.cost.endpoint.is_empty() {
            md.push_str("\nThe counting endpoint, per path and judge task:\n\n| asked | calls | prompt tokens | completion tokens |\n|---|---|---|---|\n");
            for (k, c) in &self.cost.endpoint {
                md.push_str(&format!(
                    "| {k} | {} | {} | {} |\n",
                    c.calls, c.prompt_tokens, c.completion_tokens
                ));
            }
        }
        md
    }

    /// The paced phase's rows, or one saying why it did not run.
    fn paced_rows(&self) -> Vec<(String, String)> {
        let Some(p) = &self.paced else {
            let why = self.paced_skipped.clone().unwrap_or_else(|| "–".into());
            return vec![("paced (each turn once its lane is quiet)".into(), why)];
        };
        [
            ("decorate without recall", &p.decorate_without_recall),
            ("decorate that ran recall", &p.decorate_with_recall),
            ("report", &p.report),
            ("the lanes' time per turn (`quiet`)", &p.lane_wait),
        ]
        .into_iter()
        .map(|(name, l)| (format!("paced: {name}"), self.paced_cell(p, l)))
        .collect()
    }

    /// A latency of the paced phase, with its ratio to the ping floor where the floor was
    /// measured the same way (one client).
    fn paced_cell(&self, p: &Paced, l: &Latency) -> String {
        let errors = match p.errors.len() {
            0 => String::new(),
            n => format!("; {n} refused: {}", p.errors[0]),
        };
        if self.clients == 1 && l.n > 0 && self.ping.p50_ms > 0.0 {
            format!(
                "{} ({:.1}× / {:.1}× the ping floor){errors}",
                l.cell(),
                l.p50_ms / self.ping.p50_ms,
                l.p99_ms / self.ping.p99_ms.max(1e-9)
            )
        } else {
            format!("{}{errors}", l.cell())
        }
    }
}

/// About `n` samples spread over the run, as `t s: depth`.
fn depth_series(samples: &[Sample], n: usize) -> String {
    if samples.is_empty() {
        return "–".into();
    }
    let step = samples.len().div_ceil(n).max(1);
    let mut picked: Vec<&Sample> = samples.iter().step_by(step).collect();
    if let Some(last) = samples.last() {
        if !std::ptr::eq(*picked.last().unwrap_or(&last), last) {
            picked.push(last);
        }
    }
    picked
        .iter()
        .map(|s| format!("{:.0}s {}", s.t_s, s.depth))
        .collect::<Vec<_>>()
        .join(", ")
}

/// `{embed, search, walk, total}` in ms as "total 12 ms: embed 8, search 3, walk 1".
fn recall_steps(ms: &serde_json::Value) -> String {
    let at = |k: &str| ms[k].as_f64().unwrap_or(0.0);
    if ms.is_null() {
        return "none".into();
    }
    format!(
        "{:.0} ms: embed {:.0}, search {:.0}, walk {:.0}",
        at("total"),
        at("embed"),
        at("search"),
        at("walk")
    )
}
