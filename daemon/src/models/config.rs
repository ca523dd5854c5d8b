//! The `[models]` configuration table: which provider serves the embedder and the judge, and
//! their settings. Unknown keys are rejected. Defaults: both built-in.

use std::path::PathBuf;

use serde::Deserialize;

/// `[models]`: `[models.embedder]` and `[models.judge]`.
#[derive(Debug, Clone, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ModelsConfig {
    #[serde(default)]
    pub embedder: EmbedderConfig,
    #[serde(default)]
    pub judge: JudgeConfig,
}

/// Which implementation serves a model.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Provider {
    /// Local: all-MiniLM-L6-v2 for embeddings, embedding-similarity rules for the judge.
    #[default]
    Builtin,
    /// Any OpenAI-compatible HTTP server (OpenAI, vLLM, llama.cpp server, Ollama, …).
    Openai,
}

/// How the judge asks an OpenAI-compatible chat model for JSON.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum ResponseFormat {
    /// `response_format: {"type": "json_schema", ...}` (OpenAI, vLLM, llama.cpp, Ollama ≥ 0.5).
    #[default]
    JsonSchema,
    /// `response_format: {"type": "json_object"}` (older servers).
    JsonObject,
    /// No `response_format`: the prompt alone asks for JSON.
    None,
}

/// `[models.embedder]`.
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct EmbedderConfig {
    pub provider: Provider,
    /// Built-in: directory with `model.safetensors`, `tokenizer.json`, `config.json`.
    /// Default `$RECALLD_MODEL_DIR`, else `<data dir>/models/all-MiniLM-L6-v2`.
    pub path: Option<PathBuf>,
    /// Texts per forward pass (built-in) or per HTTP request (openai).
    pub batch_size: usize,
    /// OpenAI: the model name sent to `/embeddings`.
    pub model: String,
    /// OpenAI: e.g. `https://api.openai.com/v1` or `http://127.0.0.1:8080/v1`.
    pub base_url: String,
    /// OpenAI: the NAME of the environment variable holding the API key (none: no auth header).
    pub api_key_env: Option<String>,
    /// OpenAI: the vector dimension; when absent it is probed with one call at start.
    pub dim: Option<usize>,
    /// OpenAI: sent as `dimensions` (models that can shorten their vectors); off by default.
    pub send_dimensions: bool,
    pub timeout_ms: u64,
    pub max_concurrency: usize,
    /// Retries on 429, 5xx and transport errors (not on timeouts).
    pub retries: u32,
    /// Cap on the total time spent waiting between retries.
    pub max_retry_wait_ms: u64,
    /// Texts whose vectors are kept, so a text embedded again costs no model call (0: off).
    pub cache_entries: usize,
}

impl Default for EmbedderConfig {
    fn default() -> Self {
        EmbedderConfig {
            provider: Provider::Builtin,
            path: None,
            batch_size: 32,
            model: "text-embedding-3-small".into(),
            base_url: "https://api.openai.com/v1".into(),
            api_key_env: None,
            dim: None,
            send_dimensions: false,
            timeout_ms: 30_000,
            max_concurrency: 4,
            retries: 3,
            max_retry_wait_ms: 20_000,
            cache_entries: super::cache::DEFAULT_ENTRIES,
        }
    }
}

/// `[models.judge]`.
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct JudgeConfig {
    pub provider: Provider,
    /// OpenAI: the chat model name.
    pub model: String,
    pub base_url: String,
    pub api_key_env: Option<String>,
    pub response_format: ResponseFormat,
    /// Sampling temperature sent with every judgment.
    pub temperature: f32,
    pub timeout_ms: u64,
    pub max_concurrency: usize,
    pub retries: u32,
    pub max_retry_wait_ms: u64,
    /// Built-in judge thresholds (cosines); defaults calibrated on LoCoMo (docs/models.md).
    pub thresholds: Thresholds,
}

impl Default for JudgeConfig {
    fn default() -> Self {
        JudgeConfig {
            provider: Provider::Builtin,
            model: "gpt-4o-mini".into(),
            base_url: "https://api.openai.com/v1".into(),
            api_key_env: None,
            response_format: ResponseFormat::JsonSchema,
            temperature: 0.0,
            timeout_ms: 30_000,
            max_concurrency: 4,
            retries: 3,
            max_retry_wait_ms: 20_000,
            thresholds: Thresholds::default(),
        }
    }
}

/// `[models.judge.thresholds]`: the built-in judge's cosine thresholds. The defaults were
/// calibrated with all-MiniLM-L6-v2 on `bench/locomo-dev.json`; see docs/models.md.
#[derive(Debug, Clone, PartialEq, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct Thresholds {
    /// `about`: yes when the fact's score (max cosine to a passage) reaches this.
    pub about: f32,
    /// `walk_levels`: cosine to the dialogue at or above which a fact is `Related`.
    pub walk_related: f32,
    /// … `Keep`.
    pub walk_keep: f32,
    /// … `Central`.
    pub walk_central: f32,
    /// `distill`: a fact is kept when its cosine to the conversation reaches this …
    pub distill: f32,
    /// … and it is not already said there (a line at or above this cosine).
    pub distill_said: f32,
    /// `relation`: `Restates` at or above this cosine (and no conflict signal).
    pub restates: f32,
    /// `relation`: `Contradicts` needs at least this cosine, high word overlap and a differing
    /// number or negation.
    pub contradicts: f32,
    /// `relation`: the minimum word overlap (Jaccard over content words) for `Contradicts`.
    pub contradicts_overlap: f32,
    /// `boundaries`: how many neighbouring units form the context before / after a unit.
    pub boundary_window: usize,
}

impl Default for Thresholds {
    fn default() -> Self {
        Thresholds {
            about: 0.70,
            walk_related: 0.56,
            walk_keep: 0.66,
            walk_central: 0.80,
            distill: 0.67,
            distill_said: 0.95,
            restates: 0.92,
            contradicts: 0.75,
            contradicts_overlap: 0.7,
            boundary_window: 2,
        }
    }
}
