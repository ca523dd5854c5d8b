//! A queue in front of the embedder for calls on the request path (recall embeds each new user
//! message). One worker thread embeds one request at a time, so a burst of decorates never runs
//! more model passes than one at once beside the lanes; a request whose caller stopped waiting
//! (its deadline passed while it queued) is dropped unembedded, so a slow model never piles up
//! work nobody will read. Before this queue, each late request's thread ran on to the end.
//!
//! The request path goes first: background model calls (the lanes' embedder, and so the
//! built-in judge) wait before starting until the request-path embeddings queued or running at
//! that moment are done, up to [`MAX_YIELD`] each, so the two cores serve the caller who is
//! waiting ([`Priority`], [`Yielding`]). Requests arriving meanwhile do not extend the wait, so
//! a steady stream of them slows the lanes but never stops them. Background calls run in
//! batches of a few texts, so the request path waits for one small batch at most.

use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::mpsc::{self, Receiver, Sender, SyncSender};
use std::sync::{Arc, Condvar, Mutex};
use std::time::{Duration, Instant};

use super::{CallCtx, Embedder, ModelError, ModelId};

/// How long one background model call waits for the request path at most (so a stream of
/// requests slows the lanes down but never stops them).
pub const MAX_YIELD: Duration = Duration::from_secs(1);

/// Texts a background call embeds between two chances for the request path to go first.
const YIELD_BATCH: usize = 4;

/// The request-path embeddings begun and finished so far. A background call waits for those
/// begun before it asked, not for those begun after: under a steady stream of requests the
/// request path still goes first, and the lanes still move.
#[derive(Default)]
pub struct Priority {
    counts: Mutex<Counts>,
    turn: Condvar,
    /// Set when the daemon stops: background calls end before their next batch.
    stopping: AtomicBool,
}

#[derive(Default)]
struct Counts {
    begun: u64,
    finished: u64,
}

impl Priority {
    fn counts(&self) -> std::sync::MutexGuard<'_, Counts> {
        self.counts.lock().unwrap_or_else(|e| e.into_inner())
    }

    fn begin(&self) -> PriorityGuard<'_> {
        self.counts().begun += 1;
        PriorityGuard(self)
    }

    /// The daemon is stopping: background calls end before their next batch with
    /// [`ModelError::Stopping`] (their job stays queued and runs again at the next start), so a
    /// lane embedding a long backlog does not hold the stop for seconds.
    pub fn stop(&self) {
        self.stopping.store(true, Ordering::SeqCst);
        self.turn.notify_all();
    }

    pub fn stopping(&self) -> bool {
        self.stopping.load(Ordering::SeqCst)
    }

    /// Waits (at most [`MAX_YIELD`]) until as many request-path embeddings have finished as
    /// had begun when it was called, or the daemon stops.
    pub fn wait_turn(&self) {
        let until = Instant::now() + MAX_YIELD;
        let mut counts = self.counts();
        let ahead = counts.begun;
        while counts.finished < ahead && !self.stopping() {
            let Some(left) = until.checked_duration_since(Instant::now()) else {
                return;
            };
            counts = self
                .turn
                .wait_timeout(counts, left)
                .unwrap_or_else(|e| e.into_inner())
                .0;
        }
    }
}

struct PriorityGuard<'a>(&'a Priority);

impl Drop for PriorityGuard<'_> {
    fn drop(&mut self) {
        self.0.counts().finished += 1;
        self.0.turn.notify_all();
    }
}

/// An embedder for background work: each call first lets the request path go.
pub struct Yielding {
    inner: Arc<dyn Embedder>,
    priority: Arc<Priority>,
}

impl Yielding {
    pub fn new(inner: Arc<dyn Embedder>, priority: Arc<Priority>) -> Yielding {
        Yielding { inner, priority }
    }
}

impl Embedder for Yielding {
    fn id(&self) -> ModelId {
        self.inner.id()
    }

    /// In small batches, yielding before each: a request arriving during a long background
    /// batch (an episode's passages) waits for one small batch, not the whole of it.
    fn embed(&self, ctx: &CallCtx, texts: &[&str]) -> Result<Vec<Vec<f32>>, ModelError> {
        let mut out = Vec::with_capacity(texts.len());
        for chunk in texts.chunks(YIELD_BATCH) {
            self.priority.wait_turn();
            if self.priority.stopping() {
                return Err(ModelError::Stopping);
            }
            out.extend(self.inner.embed(ctx, chunk)?);
        }
        Ok(out)
    }
}

/// Why a queued embedding gave no vectors.
#[derive(Debug, thiserror::Error)]
pub enum QueueError {
    #[error("the embedding was not ready within {0:?}")]
    Late(Duration),
    #[error(transparent)]
    Model(#[from] ModelError),
    #[error("the embedding worker has stopped")]
    Stopped,
}

struct Request {
    memory: String,
    texts: Vec<String>,
    deadline: Instant,
    reply: SyncSender<Result<Vec<Vec<f32>>, ModelError>>,
}

/// Embeddings for callers that wait at most a deadline, one model call at a time.
pub struct QueryEmbedder {
    tx: Mutex<Sender<Request>>,
    dropped: Arc<AtomicU64>,
    priority: Arc<Priority>,
}

impl QueryEmbedder {
    /// Starts the worker; it stops when the queue is dropped. `embedder` must not yield (it is
    /// the request path); `priority` is what background calls yield to.
    pub fn new(embedder: Arc<dyn Embedder>, priority: Arc<Priority>) -> QueryEmbedder {
        let (tx, rx) = mpsc::channel();
        let dropped = Arc::new(AtomicU64::new(0));
        let counter = dropped.clone();
        std::thread::Builder::new()
            .name("recalld-query-embed".into())
            .spawn(move || {
                // It embeds a waiting caller's message (recall).
                crate::cpu::request_path_thread();
                work(embedder, rx, counter)
            })
            .expect("spawning the query embedding thread");
        QueryEmbedder {
            tx: Mutex::new(tx),
            dropped,
            priority,
        }
    }

    /// Embeds `texts` for `memory`, waiting at most `wait` (queueing included).
    pub fn embed(&self, memory: &str, texts: Vec<String>, wait: Duration) -> Result<Vec<Vec<f32>>, QueueError> {
        // Background model calls wait while this caller does.
        let _first = self.priority.begin();
        let (reply, answer) = mpsc::sync_channel(1);
        let request = Request {
            memory: memory.to_owned(),
            texts,
            deadline: Instant::now() + wait,
            reply,
        };
        self.tx
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .send(request)
            .map_err(|_| QueueError::Stopped)?;
        // Disconnected: the worker dropped the request as stale, which also means late.
        match answer.recv_timeout(wait) {
            Ok(result) => Ok(result?),
            Err(_) => Err(QueueError::Late(wait)),
        }
    }

    /// Requests dropped unembedded because their caller had stopped waiting.
    pub fn dropped(&self) -> u64 {
        self.dropped.load(Ordering::Relaxed)
    }
}

fn work(embedder: Arc<dyn Embedder>, rx: Receiver<Request>, dropped: Arc<AtomicU64>) {
    while let Ok(request) = rx.recv() {
        if Instant::now() >= request.deadline {
            dropped.fetch_add(1, Ordering::Relaxed);
            continue;
        }
        let texts: Vec<&str> = request.texts.iter().map(String::as_str).collect();
        let result = embedder.embed(&CallCtx::new(&request.memory), &texts);
        // The caller may have given up meanwhile: then nobody reads the answer.
        let _ = request.reply.try_send(result);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Sleeps `delay` per call and counts calls.
    pub(super) struct Slow {
        pub delay: Duration,
        pub calls: std::sync::atomic::AtomicUsize,
    }

    impl Embedder for Slow {
        fn id(&self) -> ModelId {
            ModelId {
                name: "slow".into(),
                dim: 2,
            }
        }
        fn embed(&self, _: &CallCtx, texts: &[&str]) -> Result<Vec<Vec<f32>>, ModelError> {
            self.calls.fetch_add(1, std::sync::atomic::Ordering::SeqCst);
            std::thread::sleep(self.delay);
            Ok(texts.iter().map(|_| vec![1.0, 0.0]).collect())
        }
    }

    #[test]
    fn answers_in_time_and_drops_what_its_caller_gave_up_on() {
        let slow = Arc::new(Slow {
            delay: Duration::from_millis(500),
            calls: Default::default(),
        });
        let q = Arc::new(QueryEmbedder::new(slow.clone(), Arc::default()));
        assert_eq!(
            q.embed("m", vec!["a".into(), "b".into()], Duration::from_secs(5))
                .unwrap()
                .len(),
            2
        );
        // Five callers at once, each waiting 50 ms: the first occupies the worker past every
        // deadline, so the other four are dropped without a model call.
        let callers: Vec<_> = (0..5)
            .map(|_| {
                let q = q.clone();
                std::thread::spawn(move || q.embed("m", vec!["x".into()], Duration::from_millis(50)))
            })
            .collect();
        for c in callers {
            assert!(matches!(c.join().unwrap(), Err(QueueError::Late(_))));
        }
        // Wait for the worker to finish the one it started.
        q.embed("m", vec!["y".into()], Duration::from_secs(5)).unwrap();
        assert_eq!(
            slow.calls.load(std::sync::atomic::Ordering::SeqCst),
            3,
            "first, one late, last"
        );
        assert_eq!(q.dropped(), 4);
    }
}

#[cfg(test)]
mod priority_tests {
    use super::*;

    #[test]
    fn background_calls_wait_while_the_request_path_embeds() {
        let priority = Arc::new(Priority::default());
        let guard = priority.begin();
        let p = priority.clone();
        let t = Instant::now();
        let waiter = std::thread::spawn(move || {
            p.wait_turn();
            t.elapsed()
        });
        std::thread::sleep(Duration::from_millis(100));
        drop(guard);
        let waited = waiter.join().unwrap();
        assert!(waited >= Duration::from_millis(100), "{waited:?}");
        assert!(
            waited < MAX_YIELD,
            "released when the request path was done: {waited:?}"
        );
        // With nobody waiting it does not wait at all.
        let t = Instant::now();
        priority.wait_turn();
        assert!(t.elapsed() < Duration::from_millis(50));
    }

    #[test]
    fn a_request_begun_after_the_background_asked_does_not_hold_it_back() {
        let priority = Arc::new(Priority::default());
        let first = priority.begin();
        let p = priority.clone();
        let t = Instant::now();
        let waiter = std::thread::spawn(move || {
            p.wait_turn();
            t.elapsed()
        });
        std::thread::sleep(Duration::from_millis(50));
        // A second request arrives while the background waits, and stays past the first.
        let second = priority.begin();
        std::thread::sleep(Duration::from_millis(50));
        drop(first);
        let waited = waiter.join().unwrap();
        assert!(
            waited >= Duration::from_millis(100) && waited < Duration::from_millis(500),
            "{waited:?}"
        );
        drop(second);
    }

    /// A stop ends a long background call before its next batch (the lane's job stays queued),
    /// and one asked after the stop makes no model call at all.
    #[test]
    fn a_stop_ends_a_background_call_at_its_next_batch() {
        let slow = Arc::new(super::tests::Slow {
            delay: Duration::from_millis(50),
            calls: Default::default(),
        });
        let priority = Arc::new(Priority::default());
        let yielding = Arc::new(Yielding::new(slow.clone(), priority.clone()));
        let y = yielding.clone();
        // 400 texts: 100 batches, five seconds of model calls.
        let long = std::thread::spawn(move || {
            let texts = vec!["text"; 400];
            let t = Instant::now();
            (y.embed(&CallCtx::new("m"), &texts), t.elapsed())
        });
        std::thread::sleep(Duration::from_millis(120));
        priority.stop();
        let (result, took) = long.join().unwrap();
        assert!(matches!(result, Err(ModelError::Stopping)), "{result:?}");
        // (Bounds loose enough for a loaded machine: the whole call takes five seconds.)
        assert!(took < Duration::from_secs(3), "ended at its next batch: {took:?}");
        let calls = slow.calls.load(Ordering::SeqCst);
        assert!(calls < 50, "cut short: {calls} of 100 batches ran");
        assert!(matches!(
            yielding.embed(&CallCtx::new("m"), &["after"]),
            Err(ModelError::Stopping)
        ));
        assert_eq!(slow.calls.load(Ordering::SeqCst), calls, "no model call after the stop");
    }
}
