//! Arguments and results of each op, as the wire carries them (maps with field names).
//!
//! Every field that is not required has a default, and unknown fields are ignored, so old
//! clients and new servers (and the reverse) keep talking.

use serde::{Deserialize, Serialize};
use serde_json::Value;

/// Op names. `capabilities` in `hello` lists the ones a server serves.
pub const OPS: &[&str] = &[
    "hello",
    "ping",
    "health",
    "stats",
    "decorate",
    "report",
    "export",
    "forget_memory",
    "metrics",
    "import",
    "quiet",
    "end",
    "agent",
    "list_memories",
    "search_memories",
    "observe_memory",
    "delete_memory",
    "restore",
    "consolidate",
    "sweep",
    "audit",
    "memories_used",
    "clear_memories",
    "update_memory",
    "doctor",
    "core_block",
    "hot",
    "add_document",
    "list_documents",
    "remove_document",
    "inspect",
    "memories",
];

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct HelloArgs {
    /// The lowest protocol version the client speaks.
    #[serde(default = "one")]
    pub min_version: u32,
    /// The highest protocol version the client speaks.
    #[serde(default = "one")]
    pub max_version: u32,
    /// Free text naming the client, for logs.
    #[serde(default)]
    pub client: Option<String>,
}

fn one() -> u32 {
    1
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Limits {
    pub max_frame_bytes: u64,
    pub max_memory_id_bytes: u64,
    pub max_in_flight: u64,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct HelloReply {
    /// The version both sides will speak: the highest in both ranges.
    pub protocol_version: u32,
    pub min_version: u32,
    pub max_version: u32,
    pub server: String,
    pub server_version: String,
    pub limits: Limits,
    pub capabilities: Vec<String>,
}

/// How the request's history relates to what the memory already holds.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum HistoryMode {
    /// The request holds the whole history (or a trimmed copy of it); align and store the tail.
    #[default]
    Full,
    /// The request holds only messages the memory has not seen.
    Delta,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct DecorateArgs {
    pub memory: String,
    /// A Chat Completions or Responses request, as the provider SDK takes it.
    pub request: Value,
    /// Unix time in seconds; the daemon's clock when absent.
    #[serde(default)]
    pub now: Option<f64>,
    #[serde(default)]
    pub dry_run: bool,
    /// Token ceiling for this memory; stored on the memory when given.
    #[serde(default)]
    pub ceiling: Option<u64>,
    #[serde(default)]
    pub agent: Option<String>,
    #[serde(default)]
    pub user: Option<String>,
    #[serde(default)]
    pub history: HistoryMode,
}

impl DecorateArgs {
    /// A decorate of `request` for `memory` with every other argument at its default (the
    /// daemon's clock, stored, the memory's ceiling, the whole history resent).
    pub fn new(memory: impl Into<String>, request: Value) -> DecorateArgs {
        DecorateArgs {
            memory: memory.into(),
            request,
            now: None,
            dry_run: false,
            ceiling: None,
            agent: None,
            user: None,
            history: HistoryMode::Full,
        }
    }
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct DecorateReply {
    pub request: Value,
    pub info: Value,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ReportArgs {
    pub memory: String,
    /// A `chat.completion` or Responses `response` object.
    pub response: Value,
    #[serde(default)]
    pub now: Option<f64>,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ReportReply {
    pub response: Value,
    /// True when the reply held only the note call: call the model once more.
    pub again: bool,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ExportArgs {
    pub memory: String,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ForgetMemoryArgs {
    pub memory: String,
}

/// What `forget_memory` removed: entries per store table.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ForgetMemoryReply {
    pub memory: String,
    /// Table name → entries removed (tables that held none are left out).
    pub removed: std::collections::BTreeMap<String, u64>,
    pub total: u64,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct MetricsArgs {
    /// `json` (default) or `prometheus` (the reply's `text` holds the exposition format).
    #[serde(default)]
    pub format: Option<String>,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ImportArgs {
    /// The memory to create; it must not exist.
    pub memory: String,
    /// What `export` returned (its own `memory` field is not used).
    pub export: Value,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct QuietArgs {
    pub memory: String,
    /// How long to wait at most for the memory's background jobs, in milliseconds.
    #[serde(default = "quiet_timeout_ms")]
    pub timeout_ms: u64,
}

fn quiet_timeout_ms() -> u64 {
    10_000
}

/// `end`: the conversation is over; its facts go to its agent's scope.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct EndArgs {
    pub memory: String,
    #[serde(default)]
    pub now: Option<f64>,
}

/// `agent`: an agent's memory settings; absent fields are left as they are.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct AgentArgs {
    pub agent: String,
    /// off, conversational, knowledge_worker or compliance.
    #[serde(default)]
    pub policy: Option<String>,
    /// private or shared.
    #[serde(default)]
    pub sharing: Option<String>,
    /// Days episodic facts are kept, when shorter than the policy's.
    #[serde(default)]
    pub retention_days: Option<f64>,
    /// report or live.
    #[serde(default)]
    pub sweep: Option<String>,
    /// Half-lives of facts in days per domain: `{general, emotional, educational}`.
    #[serde(default)]
    pub decay_days: Option<Value>,
    /// Weights of freshness, access and confidence in a fact's importance: `{age, access,
    /// confidence}`.
    #[serde(default)]
    pub keep_weights: Option<Value>,
    #[serde(default)]
    pub now: Option<f64>,
}

/// The scope ops' common arguments: the agent, the caller's user, and the op's own.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ScopeArgs {
    pub agent: String,
    #[serde(default)]
    pub user: Option<String>,
    #[serde(default)]
    pub now: Option<f64>,
    /// A scope fact's number (observe_memory, delete_memory, restore), or a document's
    /// (remove_document).
    #[serde(default)]
    pub id: Option<u64>,
    /// search_memories' text.
    #[serde(default)]
    pub query: Option<String>,
    /// list_memories' filters: tier (episodic, semantic), kind, status (active, archived,
    /// replaced, all).
    #[serde(default)]
    pub tier: Option<String>,
    #[serde(default)]
    pub kind: Option<String>,
    #[serde(default)]
    pub status: Option<String>,
    #[serde(default)]
    pub limit: Option<u64>,
    /// audit: entries at or after this time.
    #[serde(default)]
    pub since: Option<f64>,
    /// update_memory: the new text, kind (preference, decision, environment, outcome,
    /// open_question, fact) and importance (0 to 1).
    #[serde(default)]
    pub text: Option<String>,
    #[serde(default)]
    pub importance: Option<f32>,
    /// list_memories, search_memories: what was believed at this time.
    #[serde(default)]
    pub as_of: Option<f64>,
    /// core_block: the block's name (its text in `text`; empty text removes it). add_document:
    /// the document's name (its text in `text`; the same name replaces it).
    #[serde(default)]
    pub name: Option<String>,
}

/// `memories_used`: the scope facts a conversation was shown.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct MemoriesUsedArgs {
    pub memory: String,
}

/// `inspect`: one memory as it stands, read-only: episodes with their activation as of `at`
/// and its curve, facts, the graph, the latest decorates' decisions, the lane, and on request
/// the messages of some turns.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct InspectArgs {
    pub memory: String,
    /// Unix seconds the activations are computed at; now when absent.
    #[serde(default)]
    pub at: Option<f64>,
    /// How many of the latest decisions to return (at most 32).
    #[serde(default = "inspect_decisions")]
    pub decisions: u64,
    /// The latest episodes to list (every episode in view is listed as well).
    #[serde(default = "inspect_episodes")]
    pub episodes: u64,
    /// Points of each listed episode's activation curve (0: none).
    #[serde(default = "inspect_curve")]
    pub curve: u64,
    /// `[first, last]`: also return the messages of these turns.
    #[serde(default)]
    pub turns: Option<[u64; 2]>,
}

fn inspect_decisions() -> u64 {
    8
}

fn inspect_episodes() -> u64 {
    200
}

fn inspect_curve() -> u64 {
    48
}

/// `memories`: the caller's own memories.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct MemoriesReply {
    pub memories: Vec<MemorySummary>,
}

/// One memory in the `memories` list, from its record.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct MemorySummary {
    /// As the caller names it.
    pub memory: String,
    /// Messages stored (superseded ones and note calls included).
    pub messages: u64,
    /// User turns.
    pub turns: u64,
    pub episodes: u64,
    pub facts: u64,
    /// The last op that changed it (Unix seconds).
    pub last_at: f64,
    pub created_at: f64,
    #[serde(default)]
    pub agent: Option<String>,
    #[serde(default)]
    pub user: Option<String>,
    /// The ceiling the memory set (None: the daemon's default).
    #[serde(default)]
    pub ceiling: Option<u64>,
}
