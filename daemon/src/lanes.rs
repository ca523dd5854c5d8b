//! Lanes: each memory's background jobs, run strictly in order (only the oldest job of a
//! memory runs), off the request path. Jobs live in the store, so a restart resumes them.
//!
//! Workers are plain threads: the work is the judge's (CPU, or blocking HTTP) and the store's.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::mpsc::{self, Receiver, RecvTimeoutError};
use std::sync::{Arc, Mutex};
use std::thread::JoinHandle;
use std::time::Duration;

use crate::engine::Engine;

pub struct Lanes {
    stop: Arc<AtomicBool>,
    workers: Vec<JoinHandle<()>>,
}

impl Lanes {
    /// Starts `workers` threads and queues every memory that already has jobs in the store.
    pub fn start(engine: Arc<Engine>, workers: usize) -> Lanes {
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
        engine.set_lane_notifier(tx);
        let rx = Arc::new(Mutex::new(rx));
        let stop = Arc::new(AtomicBool::new(false));
        let workers = (0..workers.max(1))
            .map(|i| {
                let (engine, rx, stop) = (engine.clone(), rx.clone(), stop.clone());
                std::thread::Builder::new()
                    .name(format!("recalld-lane-{i}"))
                    .spawn(move || work(&engine, &rx, &stop))
                    .expect("spawn lane worker")
            })
            .collect();
        Lanes { stop, workers }
    }

    /// Lets each worker finish the job it is running, then stops. Queued jobs stay in the store.
    pub fn stop(self) {
        self.stop.store(true, Ordering::SeqCst);
        for w in self.workers {
            let _ = w.join();
        }
    }
}

fn work(engine: &Engine, rx: &Mutex<Receiver<String>>, stop: &AtomicBool) {
    while !stop.load(Ordering::SeqCst) {
        let next = rx
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .recv_timeout(Duration::from_millis(100));
        let memory = match next {
            Ok(m) => m,
            Err(RecvTimeoutError::Timeout) => continue,
            Err(RecvTimeoutError::Disconnected) => return,
        };
        let span = tracing::debug_span!("lane", memory = %memory);
        let _enter = span.enter();
        while !stop.load(Ordering::SeqCst) {
            match engine.run_next_job(&memory) {
                Ok(true) => continue,
                Ok(false) => break,
                Err(e) => {
                    // The job stays queued; it is tried again on the next notice or restart.
                    tracing::error!(error = %e, "background job failed");
                    break;
                }
            }
        }
    }
}
