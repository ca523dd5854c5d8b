//! Vectors of texts embedded lately, kept so the same text is not embedded twice. The lanes
//! embed the same words again and again: a closed unit is context for the next units' boundary
//! scores, an episode's units are judged against every new fact written near them, a recall
//! block's passages and facts again when it is distilled. With the built-in model each
//! embedding is CPU time (about 0.7 ms a token here); with an endpoint, a paid call.
//!
//! Two generations stand in for least-recently-used: lookups search both, a hit in the older
//! moves to the newer while the newer has room, and when the newer is full the older is dropped
//! whole. Keys are a 128-bit hash of the text (two SipHash keys), so a collision is not a
//! practical concern.

use std::collections::hash_map::DefaultHasher;
use std::collections::HashMap;
use std::hash::{Hash, Hasher};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};

use serde::{Deserialize, Serialize};

use super::{CallCtx, Embedder, ModelError, ModelId};

/// Texts kept by default: with 384-dimension vectors, about 12 MB.
pub const DEFAULT_ENTRIES: usize = 8_192;

type Key = (u64, u64);

fn key(text: &str) -> Key {
    let mut a = DefaultHasher::new();
    text.hash(&mut a);
    let mut b = DefaultHasher::new();
    (text.len(), 0x9e37_79b9_7f4a_7c15u64).hash(&mut b);
    text.hash(&mut b);
    (a.finish(), b.finish())
}

#[derive(Default)]
struct Generations {
    newer: HashMap<Key, Arc<[f32]>>,
    older: HashMap<Key, Arc<[f32]>>,
}

impl Generations {
    fn get(&mut self, k: &Key, half: usize) -> Option<Arc<[f32]>> {
        if let Some(v) = self.newer.get(k) {
            return Some(v.clone());
        }
        let v = self.older.get(k)?.clone();
        // Moved up while the newer generation has room, so the two stay bounded.
        if self.newer.len() < half {
            self.older.remove(k);
            self.newer.insert(*k, v.clone());
        }
        Some(v)
    }

    fn put(&mut self, k: Key, v: Arc<[f32]>, half: usize) {
        if self.newer.len() >= half {
            self.older = std::mem::take(&mut self.newer);
        }
        self.newer.insert(k, v);
    }
}

/// What the cache saved, for `stats`.
#[derive(Debug, Clone, Copy, Default, PartialEq, Serialize, Deserialize)]
pub struct CacheCounts {
    /// Texts answered from the cache.
    pub hits: u64,
    /// Texts the model embedded.
    pub misses: u64,
}

/// An embedder that remembers the vectors of the last texts it embedded.
pub struct Cached {
    inner: Arc<dyn Embedder>,
    kept: Mutex<Generations>,
    /// Entries per generation (so at most twice this are kept).
    half: usize,
    hits: AtomicU64,
    misses: AtomicU64,
}

impl Cached {
    /// Keeps about `entries` texts; 0 turns the cache off (every text goes to the model).
    pub fn new(inner: Arc<dyn Embedder>, entries: usize) -> Cached {
        Cached {
            inner,
            kept: Mutex::default(),
            half: entries / 2,
            hits: AtomicU64::new(0),
            misses: AtomicU64::new(0),
        }
    }

    pub fn counts(&self) -> CacheCounts {
        CacheCounts {
            hits: self.hits.load(Ordering::Relaxed),
            misses: self.misses.load(Ordering::Relaxed),
        }
    }

    fn kept(&self) -> std::sync::MutexGuard<'_, Generations> {
        self.kept.lock().unwrap_or_else(|e| e.into_inner())
    }
}

impl Embedder for Cached {
    fn id(&self) -> ModelId {
        self.inner.id()
    }

    /// The texts not kept go to the model in one call (each distinct text once); the rest are
    /// answered from the cache, in the caller's order.
    fn embed(&self, ctx: &CallCtx, texts: &[&str]) -> Result<Vec<Vec<f32>>, ModelError> {
        if self.half == 0 {
            return self.inner.embed(ctx, texts);
        }
        let keys: Vec<Key> = texts.iter().map(|t| key(t)).collect();
        let mut found: Vec<Option<Arc<[f32]>>> = {
            let mut kept = self.kept();
            keys.iter().map(|k| kept.get(k, self.half)).collect()
        };
        // Each missing text once, even when the call names it twice.
        let mut missing: Vec<usize> = Vec::new();
        let mut first_of: HashMap<Key, usize> = HashMap::new();
        for (i, k) in keys.iter().enumerate() {
            if found[i].is_none() && !first_of.contains_key(k) {
                first_of.insert(*k, missing.len());
                missing.push(i);
            }
        }
        self.hits
            .fetch_add((texts.len() - missing.len()) as u64, Ordering::Relaxed);
        self.misses.fetch_add(missing.len() as u64, Ordering::Relaxed);
        if !missing.is_empty() {
            let asked: Vec<&str> = missing.iter().map(|&i| texts[i]).collect();
            let vectors = self.inner.embed(ctx, &asked)?;
            if vectors.len() != asked.len() {
                return Err(ModelError::Inference(format!(
                    "the embedder gave {} vectors for {} texts",
                    vectors.len(),
                    asked.len()
                )));
            }
            let vectors: Vec<Arc<[f32]>> = vectors.into_iter().map(Arc::from).collect();
            let mut kept = self.kept();
            for (&i, v) in missing.iter().zip(&vectors) {
                kept.put(keys[i], v.clone(), self.half);
            }
            for (i, k) in keys.iter().enumerate() {
                if found[i].is_none() {
                    found[i] = Some(vectors[first_of[k]].clone());
                }
            }
        }
        Ok(found
            .into_iter()
            .map(|v| v.map(|v| v.to_vec()).unwrap_or_default())
            .collect())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::atomic::AtomicUsize;

    /// A vector per text from its length; counts the texts it was asked.
    #[derive(Default)]
    struct Counting(AtomicUsize);

    impl Embedder for Counting {
        fn id(&self) -> ModelId {
            ModelId {
                name: "counting".into(),
                dim: 2,
            }
        }
        fn embed(&self, _: &CallCtx, texts: &[&str]) -> Result<Vec<Vec<f32>>, ModelError> {
            self.0.fetch_add(texts.len(), Ordering::SeqCst);
            Ok(texts.iter().map(|t| vec![t.len() as f32, 1.0]).collect())
        }
    }

    #[test]
    fn a_text_is_embedded_once_and_answers_keep_the_callers_order() {
        let model = Arc::new(Counting::default());
        let cache = Cached::new(model.clone(), 100);
        let ctx = CallCtx::new("m");
        let first = cache.embed(&ctx, &["a", "bbb", "a"]).unwrap();
        assert_eq!(first, vec![vec![1.0, 1.0], vec![3.0, 1.0], vec![1.0, 1.0]]);
        assert_eq!(model.0.load(Ordering::SeqCst), 2, "the repeated text went once");
        let second = cache.embed(&ctx, &["cc", "bbb", "a"]).unwrap();
        assert_eq!(second, vec![vec![2.0, 1.0], vec![3.0, 1.0], vec![1.0, 1.0]]);
        assert_eq!(model.0.load(Ordering::SeqCst), 3, "only the new text went to the model");
        assert_eq!(cache.counts(), CacheCounts { hits: 3, misses: 3 });
    }

    #[test]
    fn the_oldest_generation_is_dropped_and_a_used_text_survives_it() {
        let model = Arc::new(Counting::default());
        let cache = Cached::new(model.clone(), 4); // two per generation
        let ctx = CallCtx::new("m");
        cache.embed(&ctx, &["a", "bb"]).unwrap(); // newer: a, bb
        cache.embed(&ctx, &["ccc"]).unwrap(); // older: a, bb; newer: ccc
        cache.embed(&ctx, &["a"]).unwrap(); // a moves up: newer ccc, a
        cache.embed(&ctx, &["dddd"]).unwrap(); // older: ccc, a; bb dropped
        let before = model.0.load(Ordering::SeqCst);
        cache.embed(&ctx, &["a", "ccc", "dddd"]).unwrap();
        assert_eq!(model.0.load(Ordering::SeqCst), before, "all three kept");
        cache.embed(&ctx, &["bb"]).unwrap();
        assert_eq!(model.0.load(Ordering::SeqCst), before + 1, "bb was dropped");
    }

    #[test]
    fn zero_entries_turns_it_off() {
        let model = Arc::new(Counting::default());
        let cache = Cached::new(model.clone(), 0);
        let ctx = CallCtx::new("m");
        cache.embed(&ctx, &["a"]).unwrap();
        cache.embed(&ctx, &["a"]).unwrap();
        assert_eq!(model.0.load(Ordering::SeqCst), 2);
    }
}
