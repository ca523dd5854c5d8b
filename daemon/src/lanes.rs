//! Lanes: each memory's background jobs, run strictly in order (only the oldest job of a
//! memory runs), off the request path. Jobs live in the store, so a restart resumes them.
//!
//! Workers are plain threads: the work is the judge's (CPU, or blocking HTTP) and the store's.
//! A memory is claimed by one worker until its queue is empty, so with several workers a
//! memory notified twice still runs each job once; different memories run in parallel.

use std::collections::HashSet;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::mpsc::{self, Receiver, RecvTimeoutError};
use std::sync::{Arc, Mutex};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use crate::engine::Engine;

pub struct Lanes {
    engine: Arc<Engine>,
    tx: mpsc::Sender<String>,
    stop: Arc<AtomicBool>,
    workers: Vec<JoinHandle<()>>,
}

/// How long a memory whose job failed waits before its lane runs again (a failed job counts an
/// attempt and is parked after a few; without this its lane would wait for the memory's next op).
const RETRY_AFTER: Duration = Duration::from_secs(1);

/// Which memories a worker is running, which of those were notified meanwhile, and which wait
/// to be tried again after a failure.
#[derive(Default)]
struct Claims {
    busy: HashSet<String>,
    again: HashSet<String>,
    retry: Vec<(Instant, String)>,
}

impl Claims {
    /// True when the caller now runs `memory`; otherwise its runner is told to look again.
    fn claim(&mut self, memory: &str) -> bool {
        if self.busy.contains(memory) {
            self.again.insert(memory.to_owned());
            false
        } else {
            self.busy.insert(memory.to_owned());
            true
        }
    }

    /// Called when the runner found the queue empty: true when it must look again (a notice
    /// came in while it ran), else the claim is released.
    fn release(&mut self, memory: &str) -> bool {
        if self.again.remove(memory) {
            true
        } else {
            self.busy.remove(memory);
            false
        }
    }
}

impl Lanes {
    /// Starts `workers` threads and queues every memory that already has jobs in the store.
    pub fn start(engine: Arc<Engine>, workers: usize, model_threads: usize) -> Lanes {
        let (tx, rx) = mpsc::channel::<String>();
        match engine.pending_jobs() {
            Ok((memories, jobs)) => {
                if jobs > 0 {
                    tracing::info!(jobs, memories = memories.len(), "resuming background jobs");
                }
                for m in memories {
                    let _ = tx.send(m);
                }
            }
            Err(e) => tracing::error!(error = %e, "cannot read queued jobs"),
        }
        engine.set_lane_notifier(tx.clone());
        let rx = Arc::new(Mutex::new(rx));
        let claims = Arc::new(Mutex::new(Claims::default()));
        let stop = Arc::new(AtomicBool::new(false));
        let workers = (0..workers.max(1))
            .map(|i| {
                let (engine, rx, claims, stop) = (engine.clone(), rx.clone(), claims.clone(), stop.clone());
                let tx = tx.clone();
                std::thread::Builder::new()
                    .name(format!("recalld-lane-{i}"))
                    .spawn(move || match background_pool(i, model_threads) {
                        // The worker runs inside its pool, so the model's parallel work does too.
                        Some(pool) => pool.install(|| work(&engine, &rx, &tx, &claims, &stop)),
                        None => work(&engine, &rx, &tx, &claims, &stop),
                    })
                    .expect("spawn lane worker")
            })
            .collect();
        Lanes {
            engine,
            tx,
            stop,
            workers,
        }
    }

    /// Tells the workers `memory` may have jobs (the engine does this itself after an op).
    pub fn notify(&self, memory: &str) {
        let _ = self.tx.send(memory.to_owned());
    }

    /// Lets each worker finish the job it is running, then stops; a job still in its model
    /// calls is cut short at their next batch and left queued, not counted as failed (a lane
    /// embedding a backlog of a thousand passages held a stop for 9.6 s). Queued jobs stay in
    /// the store.
    pub fn stop(self) {
        self.stop.store(true, Ordering::SeqCst);
        // A job in its model calls ends at their next batch and stays queued as it was.
        self.engine.stop_background();
        for w in self.workers {
            let _ = w.join();
        }
    }
}

/// The threads a lane worker's model calls run on: `threads` of them (0: half the cores, at
/// least one), at a lower CPU priority (nice 10). The request path's model work (recall's query)
/// runs on the default pool at normal priority, so background judging never takes every core
/// from a caller who is waiting. None when the pool cannot be built (then the default pool).
fn background_pool(worker: usize, threads: usize) -> Option<rayon::ThreadPool> {
    let cores = std::thread::available_parallelism().map(|n| n.get()).unwrap_or(2);
    let threads = if threads == 0 { (cores / 2).max(1) } else { threads };
    rayon::ThreadPoolBuilder::new()
        .num_threads(threads)
        .thread_name(move |k| format!("recalld-lane-{worker}-model-{k}"))
        .start_handler(|_| crate::cpu::background_thread())
        .build()
        .map_err(|e| tracing::warn!(error = %e, "no background thread pool; lanes share the default one"))
        .ok()
}

fn work(
    engine: &Engine,
    rx: &Mutex<Receiver<String>>,
    tx: &mpsc::Sender<String>,
    claims: &Mutex<Claims>,
    stop: &AtomicBool,
) {
    let claims = || claims.lock().unwrap_or_else(|e| e.into_inner());
    while !stop.load(Ordering::SeqCst) {
        {
            let mut c = claims();
            let now = Instant::now();
            c.retry.retain(|(at, memory)| {
                let due = *at <= now;
                if due {
                    let _ = tx.send(memory.clone());
                }
                !due
            });
        }
        let next = rx
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .recv_timeout(Duration::from_millis(100));
        let memory = match next {
            Ok(m) => m,
            Err(RecvTimeoutError::Timeout) => continue,
            Err(RecvTimeoutError::Disconnected) => return,
        };
        if !claims().claim(&memory) {
            continue; // its runner will look again before letting go
        }
        let span = tracing::debug_span!("lane", memory = %memory);
        let _enter = span.enter();
        loop {
            let left = drain(engine, &memory, stop);
            if stop.load(Ordering::SeqCst) {
                break;
            }
            let mut c = claims();
            if left && !c.again.contains(&memory) {
                c.retry.push((Instant::now() + RETRY_AFTER, memory.clone()));
            }
            if !c.release(&memory) {
                break;
            }
        }
    }
}

/// Runs the memory's jobs, oldest first, until none is left (or a job fails, or we stop).
/// True when jobs are left that can still run (one failed): the caller tries again later.
fn drain(engine: &Engine, memory: &str, stop: &AtomicBool) -> bool {
    while !stop.load(Ordering::SeqCst) {
        match engine.run_next_job(memory) {
            Ok(true) => continue,
            Ok(false) => break,
            Err(e) if stop.load(Ordering::SeqCst) => {
                // Most likely cut short by the stop (`Engine::stop_background`).
                tracing::info!(error = %e, "background job left for the next start");
                break;
            }
            Err(e) => {
                // The job stays queued; it is tried again on the next notice or restart.
                tracing::error!(error = %e, "background job failed");
                break;
            }
        }
    }
    !stop.load(Ordering::SeqCst) && engine.has_waiting_job(memory).unwrap_or(true)
}
