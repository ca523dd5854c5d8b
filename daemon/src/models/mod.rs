//! Models: the embedder and the judge behind traits, built-in (local weights, no network) and
//! OpenAI-compatible (HTTP). The only module that loads weights or speaks HTTP.
//!
//! Both traits are **blocking**: callers run them on `tokio::task::spawn_blocking` or on the
//! background lane threads. Both are object-safe (`Arc<dyn Embedder>`, `Arc<dyn Judge>`).
//! A judge that fails returns a typed [`ModelError`]; it never invents a result, so the caller
//! can degrade (cut by size only, fall back to search hits).
//!
//! Codemap:
//! - `config`: the `[models]` table ([`ModelsConfig`]).
//! - `usage`: per-memory and total call/token counters behind [`Models::stats`].
//! - `minilm`: the built-in embedder (all-MiniLM-L6-v2 in candle).
//! - `rules`: the built-in judge (embedding similarity plus documented rules).
//! - `openai`: the OpenAI-compatible embedder and judge (blocking HTTP with ureq).

mod bert;
pub mod cache;
mod config;
mod minilm;
mod openai;
pub mod queue;
mod rules;
mod usage;

use std::path::{Path, PathBuf};
use std::sync::Arc;

use serde::{Deserialize, Serialize};

pub use config::{EmbedderConfig, JudgeConfig, ModelsConfig, Provider, ResponseFormat, Thresholds};
pub use minilm::MiniLm;
pub use openai::{OpenAiEmbedder, OpenAiJudge};
pub use rules::{boundary_scores, RulesJudge};
pub use usage::{Counts, Usage};

/// Which embedding model produced a vector; stored with the data so a change is detected.
#[derive(Debug, Clone, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub struct ModelId {
    pub name: String,
    pub dim: usize,
}

/// Per-call context: which memory the call is for (usage is counted per memory).
#[derive(Debug, Clone, Copy)]
pub struct CallCtx<'a> {
    pub memory: &'a str,
}

impl<'a> CallCtx<'a> {
    pub const fn new(memory: &'a str) -> Self {
        CallCtx { memory }
    }
}

/// How likely a unit is the first / the last of a concept; higher = more likely.
/// Only the order of the scores is meaningful (the engine ranks candidate cuts by them).
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
pub struct BoundaryScore {
    pub first: f32,
    pub last: f32,
}

/// The four walk levels of a candidate fact against the recent dialogue.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum WalkLevel {
    Unrelated = 0,
    Related = 1,
    Keep = 2,
    Central = 3,
}

impl WalkLevel {
    pub fn from_u8(v: u8) -> Option<WalkLevel> {
        match v {
            0 => Some(WalkLevel::Unrelated),
            1 => Some(WalkLevel::Related),
            2 => Some(WalkLevel::Keep),
            3 => Some(WalkLevel::Central),
            _ => None,
        }
    }
}

/// How a new fact relates to a held one.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Relation {
    Unrelated,
    Restates,
    Contradicts,
}

/// Everything that can go wrong in this module. Messages are lowercase, no trailing period.
#[derive(Debug, thiserror::Error)]
pub enum ModelError {
    /// The built-in model's files are not on disk.
    #[error(
        "built-in embedding model not found in {dir} (missing {missing}); fetch it with: scripts/fetch-model.sh {dir}"
    )]
    MissingModel { dir: PathBuf, missing: String },
    /// The files are there but do not load or do not behave like the expected model.
    #[error("bad model: {0}")]
    BadModel(String),
    /// The `[models]` configuration cannot work.
    #[error("models config: {0}")]
    Config(String),
    /// The provider answered with an error status (after any retries).
    #[error("http {status} from {url}: {message}")]
    Http { status: u16, url: String, message: String },
    /// The request did not reach the provider or the connection broke (after any retries).
    #[error("transport error talking to {url}: {message}")]
    Transport { url: String, message: String },
    /// The provider did not answer within the configured timeout.
    #[error("timed out after {after_ms} ms waiting for {url}")]
    Timeout { url: String, after_ms: u64 },
    /// The provider's output could not be used (bad JSON, wrong shape), also after the retry.
    #[error("malformed model output: {0}")]
    Malformed(String),
    /// Local inference failed.
    #[error("inference failed: {0}")]
    Inference(String),
    /// The daemon is stopping: a background call ended before its next batch.
    #[error("the daemon is stopping")]
    Stopping,
}

impl ModelError {
    /// A stable short code for logs and wire errors.
    pub fn code(&self) -> &'static str {
        match self {
            ModelError::MissingModel { .. } => "model_missing",
            ModelError::BadModel(_) => "model_bad",
            ModelError::Config(_) => "model_config",
            ModelError::Http { .. } => "model_http",
            ModelError::Transport { .. } => "model_transport",
            ModelError::Timeout { .. } => "model_timeout",
            ModelError::Malformed(_) => "model_malformed",
            ModelError::Inference(_) => "model_inference",
            ModelError::Stopping => "model_stopping",
        }
    }

    /// Whether trying the same call again later might succeed.
    pub fn retryable(&self) -> bool {
        matches!(
            self,
            ModelError::Http { .. } | ModelError::Transport { .. } | ModelError::Timeout { .. }
        )
    }
}

/// Texts → unit vectors. Blocking; object-safe.
pub trait Embedder: Send + Sync {
    /// The model's name and dimension (stored with the vectors).
    fn id(&self) -> ModelId;
    /// One L2-normalised vector of `id().dim` floats per text, in order.
    fn embed(&self, ctx: &CallCtx, texts: &[&str]) -> Result<Vec<Vec<f32>>, ModelError>;
}

/// The judgment model. Blocking; object-safe. Every method returns exactly one answer per
/// input item, or an error (never a made-up answer).
pub trait Judge: Send + Sync {
    /// A short name for logs and stats (e.g. `builtin-rules` or the chat model's name).
    fn name(&self) -> String;
    /// Units in order (text of each unit); a score per unit; higher = more likely a concept
    /// starts (`first`) or ends (`last`) at that unit.
    fn boundaries(&self, ctx: &CallCtx, units: &[&str]) -> Result<Vec<BoundaryScore>, ModelError>;
    /// Is this fact about that episode? A score in [0, 1] and the yes/no decision.
    fn about(&self, ctx: &CallCtx, fact: &str, episode_passages: &[&str]) -> Result<(f32, bool), ModelError>;
    /// [`about`](Judge::about) for one fact against several episodes (each given by its
    /// passages), an answer per episode in order. A model judge asks once for all of them.
    fn about_each(&self, ctx: &CallCtx, fact: &str, episodes: &[Vec<&str>]) -> Result<Vec<(f32, bool)>, ModelError> {
        episodes
            .iter()
            .map(|passages| self.about(ctx, fact, passages))
            .collect()
    }
    /// The level of each candidate fact against the recent dialogue, in order.
    fn walk_levels(&self, ctx: &CallCtx, dialogue: &str, facts: &[&str]) -> Result<Vec<WalkLevel>, ModelError>;
    /// Which recall-block facts mattered to the conversation around them: the indices kept,
    /// ascending.
    fn distill(&self, ctx: &CallCtx, facts: &[&str], conversation: &str) -> Result<Vec<usize>, ModelError>;
    /// How a new fact relates to a held one; conservative: `Contradicts` only on strong evidence.
    fn relation(&self, ctx: &CallCtx, new_fact: &str, held_fact: &str) -> Result<Relation, ModelError>;
    /// [`relation`](Judge::relation) of one new fact to several held ones, an answer per held
    /// fact in order. A model judge asks once for all of them.
    fn relation_each(&self, ctx: &CallCtx, new_fact: &str, held_facts: &[&str]) -> Result<Vec<Relation>, ModelError> {
        held_facts
            .iter()
            .map(|held| self.relation(ctx, new_fact, held))
            .collect()
    }
    /// Whether each new name names the held entity it is paired with, an answer per pair in
    /// order. Asked only for names whose embeddings are close to a held entity's but below the
    /// cosine that decides alone (and that the graph's guard does not keep apart). A model judge
    /// asks once for all; the built-in judge never merges on such evidence and says no.
    fn same_entity_each(&self, _ctx: &CallCtx, pairs: &[NamePair<'_>]) -> Result<Vec<bool>, ModelError> {
        Ok(vec![false; pairs.len()])
    }
    /// Facts worth keeping across conversations in `transcript` (turns of a conversation that
    /// nobody noted), each with a kind; empty when nothing is. Only a model reads a
    /// conversation for facts: the built-in judge finds none, and nothing is ever made up.
    fn extract(&self, _ctx: &CallCtx, _transcript: &str) -> Result<Vec<Extracted>, ModelError> {
        Ok(Vec::new())
    }
}

/// A new name and a held entity it may name, for [`Judge::same_entity_each`].
#[derive(Debug, Clone, Copy)]
pub struct NamePair<'a> {
    /// The name as the new fact writes it.
    pub name: &'a str,
    /// The new fact's sentence (what the name is said of).
    pub fact: &'a str,
    /// The held entity's names, canonical first.
    pub held: &'a [String],
}

/// A fact a model read out of un-noted turns of a conversation.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Extracted {
    pub note: String,
    pub subject: String,
    pub object: String,
    /// preference, decision, environment, outcome, open_question or fact.
    pub kind: String,
}

/// The kinds a fact may have (seed 002, `fact` when none fits).
pub const FACT_KINDS: [&str; 6] = [
    "preference",
    "decision",
    "environment",
    "outcome",
    "open_question",
    "fact",
];

/// The loaded models and their usage counters.
#[derive(Clone)]
pub struct Models {
    /// For background work: each call first lets a waiting request-path embedding go.
    pub embedder: Arc<dyn Embedder>,
    pub judge: Arc<dyn Judge>,
    pub usage: Arc<Usage>,
    /// The same model for the request path (recall's query), which never waits, and what the
    /// background calls yield to while it runs.
    pub request_embedder: Arc<dyn Embedder>,
    pub priority: Arc<queue::Priority>,
    /// In front of the model for both paths: what it saved.
    pub cache: Arc<cache::Cached>,
}

/// The default directory of the built-in model: `$RECALLD_MODEL_DIR` if set, else
/// `<data_dir>/models/all-MiniLM-L6-v2`.
pub fn default_model_dir(data_dir: &Path) -> PathBuf {
    match std::env::var_os("RECALLD_MODEL_DIR") {
        Some(d) if !d.is_empty() => PathBuf::from(d),
        _ => data_dir.join("models").join(minilm::MODEL_DIR_NAME),
    }
}

impl Models {
    /// Load the configured providers. `data_dir` is the daemon's data directory (the built-in
    /// model defaults to `<data_dir>/models/all-MiniLM-L6-v2`). Fails early and clearly: missing
    /// model files name the command that fetches them; an unset API key env var is named.
    pub fn load(cfg: &ModelsConfig, data_dir: &Path) -> Result<Models, ModelError> {
        let usage = Arc::new(Usage::default());
        let model: Arc<dyn Embedder> = match cfg.embedder.provider {
            Provider::Builtin => {
                let dir = cfg.embedder.path.clone().unwrap_or_else(|| default_model_dir(data_dir));
                Arc::new(MiniLm::load(&dir, cfg.embedder.batch_size, usage.clone())?)
            }
            Provider::Openai => Arc::new(OpenAiEmbedder::new(&cfg.embedder, usage.clone())?),
        };
        let judge = |embedder: Arc<dyn Embedder>| -> Result<Arc<dyn Judge>, ModelError> {
            Ok(match cfg.judge.provider {
                Provider::Builtin => Arc::new(RulesJudge::new(embedder, cfg.judge.thresholds.clone(), usage.clone())),
                Provider::Openai => Arc::new(OpenAiJudge::new(&cfg.judge, usage.clone())?),
            })
        };
        Models::assemble(model, cfg.embedder.cache_entries, judge, usage.clone())
    }

    /// The models around an embedder: the cache in front of it, shared by the request path
    /// and the background's yielding embedder, which `judge` is built on.
    pub fn assemble(
        model: Arc<dyn Embedder>,
        cache_entries: usize,
        judge: impl FnOnce(Arc<dyn Embedder>) -> Result<Arc<dyn Judge>, ModelError>,
        usage: Arc<Usage>,
    ) -> Result<Models, ModelError> {
        let cache = Arc::new(cache::Cached::new(model, cache_entries));
        let request_embedder: Arc<dyn Embedder> = cache.clone();
        let priority = Arc::new(queue::Priority::default());
        let embedder: Arc<dyn Embedder> = Arc::new(queue::Yielding::new(request_embedder.clone(), priority.clone()));
        Ok(Models {
            judge: judge(embedder.clone())?,
            embedder,
            usage,
            request_embedder,
            priority,
            cache,
        })
    }

    /// Test and benchmark models: `judge` over `model`, with the default cache.
    pub fn with(model: Arc<dyn Embedder>, judge: Arc<dyn Judge>) -> Models {
        Models::assemble(model, cache::DEFAULT_ENTRIES, |_| Ok(judge), Arc::new(Usage::default()))
            .expect("nothing to load")
    }

    /// Usage so far: `{"embedder": {...}, "judge": "...", "total": {...}, "memories": {mem: {...}}}`,
    /// counts of calls and tokens for embedding and judging.
    pub fn stats(&self) -> serde_json::Value {
        let mut v = self.usage.snapshot();
        if let Some(obj) = v.as_object_mut() {
            obj.insert(
                "embedder".into(),
                serde_json::to_value(self.embedder.id()).unwrap_or_default(),
            );
            obj.insert("judge".into(), serde_json::Value::String(self.judge.name()));
            obj.insert(
                "embed_cache".into(),
                serde_json::to_value(self.cache.counts()).unwrap_or_default(),
            );
        }
        v
    }
}

/// Cosine of two vectors (plain dot product over the norms; 0 when either is zero).
pub fn cosine(a: &[f32], b: &[f32]) -> f32 {
    let (mut dot, mut na, mut nb) = (0f32, 0f32, 0f32);
    for (x, y) in a.iter().zip(b) {
        dot += x * y;
        na += x * x;
        nb += y * y;
    }
    if na == 0.0 || nb == 0.0 {
        0.0
    } else {
        dot / (na.sqrt() * nb.sqrt())
    }
}
