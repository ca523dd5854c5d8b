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

/// CPU seconds a process has used, split by where it went: the lanes' threads (named
/// `recalld-lane-…`), the other threads of its own (recall's query embedding, the model's
/// worker pool, index commits, the main thread) and the rest: the request path, the runtime's
/// workers and its blocking pool (`tokio-rt-worker`), whose threads come and go (what an
/// exited thread used stays in the process's total, so it lands in the rest). From `/proc`.
#[derive(Debug, Clone, Copy, Default, PartialEq, Serialize)]
pub struct Cpu {
    pub total_s: f64,
    pub lanes_s: f64,
    pub other_s: f64,
}

impl Cpu {
    /// The process's own time (`/proc/PID/stat`) and its live threads' (`/proc/PID/task`).
    pub fn of(pid: u32) -> Option<Cpu> {
        let total_s = ticks(&std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?)?;
        let (mut lanes_s, mut other_s) = (0.0, 0.0);
        for task in std::fs::read_dir(format!("/proc/{pid}/task")).ok()?.flatten() {
            let Ok(stat) = std::fs::read_to_string(task.path().join("stat")) else {
                continue; // the thread exited since the listing
            };
            match comm(&stat) {
                Some(c) if c.starts_with("recalld-lane") => lanes_s += ticks(&stat).unwrap_or(0.0),
                Some("tokio-rt-worker") | None => {}
                Some(_) => other_s += ticks(&stat).unwrap_or(0.0),
            }
        }
        Some(Cpu {
            total_s,
            lanes_s,
            other_s,
        })
    }

    /// This process (the benchmark's clients and its sampler), all counted as its total.
    pub fn of_self() -> Option<Cpu> {
        let stat = std::fs::read_to_string("/proc/self/stat").ok()?;
        Some(Cpu {
            total_s: ticks(&stat)?,
            ..Cpu::default()
        })
    }

    pub fn since(self, earlier: Cpu) -> Cpu {
        Cpu {
            total_s: self.total_s - earlier.total_s,
            lanes_s: self.lanes_s - earlier.lanes_s,
            other_s: self.other_s - earlier.other_s,
        }
    }

    /// What was neither the lanes' nor the other named threads': the request path.
    pub fn request_path_s(self) -> f64 {
        (self.total_s - self.lanes_s - self.other_s).max(0.0)
    }
}

/// The thread's or process's name in a `stat` line: between the first '(' and the last ')'.
fn comm(stat: &str) -> Option<&str> {
    Some(&stat[stat.find('(')? + 1..stat.rfind(')')?])
}

/// utime + stime of a `stat` line, in seconds (fields 14 and 15, counted after the name,
/// which may hold spaces).
fn ticks(stat: &str) -> Option<f64> {
    let rest = &stat[stat.rfind(')')? + 2..];
    let mut f = rest.split_whitespace().skip(11);
    let user: u64 = f.next()?.parse().ok()?;
    let system: u64 = f.next()?.parse().ok()?;
    // SAFETY: sysconf reads a constant of the system; no memory is touched.
    let hz = unsafe { libc::sysconf(libc::_SC_CLK_TCK) }.max(1) as f64;
    Some((user + system) as f64 / hz)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reads_utime_and_stime_past_a_name_with_spaces_and_parentheses() {
        // Fields after the name: state(3) ppid pgrp session tty_nr tpgid flags minflt cminflt
        // majflt cmajflt utime(14) stime(15).
        let stat = "42 (tokio (rt) w) S 1 42 42 0 -1 4194560 10 0 0 0 250 50 0 0 20 0";
        assert_eq!(comm(stat), Some("tokio (rt) w"));
        let hz = unsafe { libc::sysconf(libc::_SC_CLK_TCK) } as f64;
        assert_eq!(ticks(stat), Some(300.0 / hz));
    }
}
