//! A queue in front of the embedder for calls on the request path (recall embeds each new user
//! message). One worker thread embeds one request at a time, so a burst of decorates never runs
//! more model passes than one at once beside the lanes; a request whose caller stopped waiting
//! (its deadline passed while it queued) is dropped unembedded, so a slow model never piles up
//! work nobody will read. Before this queue, each late request's thread ran on to the end.

use std::sync::mpsc::{self, Receiver, RecvTimeoutError, Sender, SyncSender};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use super::{CallCtx, Embedder, ModelError};

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
    dropped: Arc<std::sync::atomic::AtomicU64>,
}

impl QueryEmbedder {
    /// Starts the worker; it stops when the queue is dropped.
    pub fn new(embedder: Arc<dyn Embedder>) -> QueryEmbedder {
        let (tx, rx) = mpsc::channel();
        let dropped = Arc::new(std::sync::atomic::AtomicU64::new(0));
        let counter = dropped.clone();
        std::thread::Builder::new()
            .name("recalld-query-embed".into())
            .spawn(move || work(embedder, rx, counter))
            .expect("spawning the query embedding thread");
        QueryEmbedder {
            tx: Mutex::new(tx),
            dropped,
        }
    }

    /// Embeds `texts` for `memory`, waiting at most `wait` (queueing included).
    pub fn embed(&self, memory: &str, texts: Vec<String>, wait: Duration) -> Result<Vec<Vec<f32>>, QueueError> {
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
        match answer.recv_timeout(wait) {
            Ok(result) => Ok(result?),
            Err(RecvTimeoutError::Timeout) => Err(QueueError::Late(wait)),
            Err(RecvTimeoutError::Disconnected) => Err(QueueError::Late(wait)),
        }
    }

    /// Requests dropped unembedded because their caller had stopped waiting.
    pub fn dropped(&self) -> u64 {
        self.dropped.load(std::sync::atomic::Ordering::Relaxed)
    }
}

fn work(embedder: Arc<dyn Embedder>, rx: Receiver<Request>, dropped: Arc<std::sync::atomic::AtomicU64>) {
    while let Ok(request) = rx.recv() {
        if Instant::now() >= request.deadline {
            dropped.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
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
    use crate::models::ModelId;

    /// Sleeps `delay` per call and counts calls.
    struct Slow {
        delay: Duration,
        calls: std::sync::atomic::AtomicUsize,
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
        let q = Arc::new(QueryEmbedder::new(slow.clone()));
        assert_eq!(q.embed("m", vec!["a".into(), "b".into()], Duration::from_secs(5)).unwrap().len(), 2);
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
        assert_eq!(slow.calls.load(std::sync::atomic::Ordering::SeqCst), 3, "first, one late, last");
        assert_eq!(q.dropped(), 4);
    }
}
