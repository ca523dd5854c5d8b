//! Watching the daemon while the load runs: lane depth (the `stats` op, from a connection of
//! its own so it never waits behind a client's request) and resident memory (`/proc`), every
//! few hundred milliseconds.

use std::path::PathBuf;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use recalld::client::Client;
use serde::Serialize;
use serde_json::json;

#[derive(Debug, Clone, Serialize)]
pub struct Sample {
    /// Seconds since the load started.
    pub t_s: f64,
    /// Jobs waiting in the lanes (`stats.lanes.depth`).
    pub depth: u64,
    pub oldest_age_s: f64,
    pub rss_kb: Option<u64>,
}

pub struct Sampler {
    stop: Arc<AtomicBool>,
    handle: JoinHandle<Result<Vec<Sample>, String>>,
}

impl Sampler {
    pub fn start(socket: PathBuf, pid: u32, every: Duration, t0: Instant) -> Result<Sampler, String> {
        let mut client = Client::connect(&socket).map_err(|e| format!("sampler: {e}"))?;
        let stop = Arc::new(AtomicBool::new(false));
        let stopping = stop.clone();
        let handle = std::thread::spawn(move || {
            let mut samples = Vec::new();
            loop {
                let at = Instant::now();
                let s = client.call("stats", json!({})).map_err(|e| format!("stats: {e}"))?;
                let lanes = &s["lanes"];
                samples.push(Sample {
                    t_s: t0.elapsed().as_secs_f64(),
                    depth: lanes["depth"].as_u64().unwrap_or(0),
                    oldest_age_s: lanes["oldest_age_s"].as_f64().unwrap_or(0.0),
                    rss_kb: rss_kb(pid),
                });
                // Checked after a sample, so the last one is taken after the caller's last step.
                if stopping.load(Ordering::Relaxed) {
                    return Ok(samples);
                }
                std::thread::sleep(every.saturating_sub(at.elapsed()));
            }
        });
        Ok(Sampler { stop, handle })
    }

    pub fn finish(self) -> Result<Vec<Sample>, String> {
        self.stop.store(true, Ordering::Relaxed);
        self.handle.join().map_err(|_| "sampler panicked".to_string())?
    }
}

/// A process's resident set (`VmRSS`), in kB; None when it cannot be read (not Linux, gone).
pub fn rss_kb(pid: u32) -> Option<u64> {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).ok()?;
    let line = status.lines().find(|l| l.starts_with("VmRSS:"))?;
    line.split_whitespace().nth(1)?.parse().ok()
}
