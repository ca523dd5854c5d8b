//! Warming after a start: the model's first pass, then the most recently used memories' states
//! and search indexes, so the first decorate after a restart does not pay for loading them
//! (at 100k stored messages that first decorate took 249 ms, most of it the model's first
//! pass, the state's load and the indexes' first opening). It runs beside the socket, at the
//! lanes' lower priority, a memory at a time under its lock: a request that comes first simply
//! loads the memory itself, and the warm-up then finds it cached.

use std::sync::atomic::Ordering;
use std::time::{Duration, Instant};

use serde_json::{json, Value};

use super::records::MemoryRecord;
use super::{Engine, EngineError};
use crate::store::Table;

/// The model is given this long for its first pass.
const MODEL_WAIT: Duration = Duration::from_secs(30);

/// What the warm-up did, for `stats`.
#[derive(Default)]
pub(super) struct Warmth {
    pub started: std::sync::atomic::AtomicBool,
    pub done: std::sync::atomic::AtomicBool,
    pub memories: std::sync::atomic::AtomicUsize,
    pub ms: std::sync::atomic::AtomicU64,
}

impl Warmth {
    pub(super) fn stats(&self) -> Value {
        json!({
            "started": self.started.load(Ordering::Relaxed),
            "done": self.done.load(Ordering::Relaxed),
            "memories": self.memories.load(Ordering::Relaxed),
            "ms": self.ms.load(Ordering::Relaxed),
        })
    }
}

impl Engine {
    /// Warms the model (`local_model`: a remote endpoint is not called for it), then up to
    /// `warm_memories` of the most recently updated memories (their states into the cache,
    /// their recall indexes opened and searched once). Returns how many memories it warmed.
    /// Errors are logged and skip the memory.
    pub fn warm(&self, local_model: bool) -> usize {
        let started = Instant::now();
        self.warmth.started.store(true, Ordering::Relaxed);
        // One pass through the request path's embedder: weights paged in, buffers and
        // threads made. Its vector also searches each memory's vector index below.
        let probe = self
            .query_embedder
            .as_ref()
            .filter(|_| local_model)
            .and_then(|q| q.embed("", vec!["what did we talk about".into()], MODEL_WAIT).ok())
            .and_then(|mut v| v.pop());
        // No more than the cache keeps: a later one would push an earlier one out.
        let n = self.config.warm_memories.min(self.config.cached_memories);
        let memories = match self.recent_memories(n) {
            Ok(m) => m,
            Err(e) => {
                tracing::warn!(error = %e, "cannot list memories to warm");
                Vec::new()
            }
        };
        let mut warmed = 0;
        for memory in &memories {
            match self.warm_memory(memory, probe.as_deref()) {
                Ok(()) => {
                    warmed += 1;
                    self.warmth.memories.store(warmed, Ordering::Relaxed);
                }
                Err(e) => tracing::warn!(memory = %memory, error = %e, "cannot warm a memory"),
            }
        }
        let ms = started.elapsed().as_millis() as u64;
        self.warmth.ms.store(ms, Ordering::Relaxed);
        self.warmth.done.store(true, Ordering::Relaxed);
        tracing::info!(
            memories = warmed,
            ms,
            "warmed the model and the most recently used memories"
        );
        warmed
    }

    /// The ids of the `n` most recently updated memories, newest first.
    fn recent_memories(&self, n: usize) -> Result<Vec<String>, EngineError> {
        if n == 0 {
            return Ok(Vec::new());
        }
        let mut all: Vec<(f64, String)> = self.store.read(|r| {
            let mut out = Vec::new();
            r.visit(Table::Memories, b"", b"", |_, m: MemoryRecord| {
                out.push((m.updated_at, m.id));
                Ok(true)
            })?;
            Ok(out)
        })?;
        all.sort_by(|a, b| b.0.total_cmp(&a.0));
        Ok(all.into_iter().take(n).map(|(_, id)| id).collect())
    }

    /// The memory's state into the cache (as a decorate loads it) and its recall indexes open (searched once, so their
    /// files' pages are read too). Indexes the start found ahead of the store or gone are left
    /// to their rebuild; ones only missing the newest documents are searched as recall would.
    fn warm_memory(&self, memory: &str, probe: Option<&[f32]>) -> Result<(), EngineError> {
        self.cache_state(memory)?;
        // Indexes never written (or deleted, to be rebuilt) are not opened: that would create
        // them empty.
        let Some(ix) = self
            .indexes
            .as_ref()
            .filter(|ix| self.indexes_searchable(memory) && ix.marks(memory).is_some())
        else {
            return Ok(());
        };
        let index = |e: crate::index::IndexError| EngineError::Index(e.to_string());
        ix.words.search(memory, "what did we talk about", 1).map_err(index)?;
        if let (Some(vectors), Some(v)) = (&ix.vectors, probe) {
            vectors.search(memory, v, 1).map_err(index)?;
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use std::sync::Arc;

    use recalld_protocol::ops::DecorateArgs;
    use serde_json::json;

    use super::*;
    use crate::engine::EngineConfig;
    use crate::store::{Store, StoreOptions};

    fn cached(engine: &Engine) -> Vec<String> {
        let mut ids: Vec<String> = engine.cache.lock().unwrap().states.keys().cloned().collect();
        ids.sort();
        ids
    }

    #[test]
    fn the_most_recently_updated_memories_are_loaded_after_a_start() {
        let dir = tempfile::tempdir().unwrap();
        let store = Arc::new(Store::open(dir.path(), &StoreOptions::default()).unwrap());
        let config = EngineConfig {
            warm_memories: 2,
            ..EngineConfig::default()
        };
        let first = Engine::new(store.clone(), None, config.clone());
        // Updated in the order b, c, a: the two most recent are a and c.
        for (memory, now) in [("b", 100.0), ("c", 200.0), ("a", 300.0)] {
            first
                .decorate(DecorateArgs {
                    now: Some(now),
                    ..DecorateArgs::new(
                        memory,
                        json!({"messages": [{"role": "user", "content": format!("hello from {memory}")}]}),
                    )
                })
                .unwrap();
        }
        drop(first);

        let restarted = Engine::new(store, None, config);
        assert!(cached(&restarted).is_empty());
        assert_eq!(restarted.warmth.stats()["done"], false);
        assert_eq!(restarted.warm(true), 2);
        assert_eq!(cached(&restarted), ["a", "c"]);
        let stats = restarted.warmth.stats();
        assert_eq!(
            (
                stats["started"].clone(),
                stats["done"].clone(),
                stats["memories"].clone()
            ),
            (json!(true), json!(true), json!(2))
        );
        // The warmed state is the one a decorate would have loaded: the memory goes on from it.
        let st = restarted.peek("a", |st| st.memory.next_seq).unwrap();
        assert_eq!(st, 1);
    }
}
