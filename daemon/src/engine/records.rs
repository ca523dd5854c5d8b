//! What the engine keeps in the store: the memory record, stored messages, episodes, traces
//! and facts. Provenance is everywhere: episodes and facts name the message seqs they came
//! from.

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};
use serde_json::{json, Value};

use crate::formats::{Message, Role};

/// One memory (one conversation).
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct MemoryRecord {
    pub id: String,
    pub created_at: f64,
    pub updated_at: f64,
    /// Token ceiling set by the client for this memory.
    #[serde(default)]
    pub ceiling: Option<u64>,
    #[serde(default)]
    pub agent: Option<String>,
    #[serde(default)]
    pub user: Option<String>,
    /// Sequence number the next stored message gets.
    pub next_seq: u64,
    /// The current user turn (0 before the first user message).
    pub turn: u64,
    /// When the last user message arrived.
    #[serde(default)]
    pub last_user_at: Option<f64>,
    #[serde(default)]
    pub next_episode: u64,
    #[serde(default)]
    pub next_fact: u64,
    /// Provider tokens / our estimate, per model (exponential average).
    #[serde(default)]
    pub ratios: BTreeMap<String, f64>,
    /// Our estimate of the last request decorate returned, to compare with the provider's count.
    #[serde(default)]
    pub last_estimate: Option<Estimate>,
    #[serde(default)]
    pub next_job: u64,
    /// The history budget of the last decorate: background cuts size episodes by it.
    #[serde(default)]
    pub last_budget: Option<u64>,
    /// The instructions of the latest request (system/developer messages or the Responses
    /// `instructions` field), as sent; earlier versions are kept when they change.
    #[serde(default)]
    pub instructions: Vec<Instructions>,
}

/// One version of the client's instructions and when it was first seen.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
pub struct Instructions {
    pub since: f64,
    /// Hex, so every client reads it exactly (JavaScript numbers stop at 2^53).
    pub fingerprint: String,
    pub raw: Vec<Value>,
}

#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
pub struct Estimate {
    pub model: String,
    pub tokens: u64,
}

impl MemoryRecord {
    pub fn new(id: &str, now: f64) -> MemoryRecord {
        MemoryRecord {
            id: id.to_owned(),
            created_at: now,
            updated_at: now,
            ceiling: None,
            agent: None,
            user: None,
            next_seq: 0,
            turn: 0,
            last_user_at: None,
            next_episode: 0,
            next_fact: 0,
            ratios: BTreeMap::new(),
            last_estimate: None,
            next_job: 0,
            last_budget: None,
            instructions: Vec::new(),
        }
    }
}

/// Where a stored message came from.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Source {
    /// Sent by the client in a decorate request.
    Request,
    /// The model's reply, from report.
    Reply,
}

/// One message as stored: numbered, with its turn and time. Never deleted; an edited history
/// marks it superseded.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct StoredMessage {
    pub seq: u64,
    pub turn: u64,
    pub at: f64,
    pub source: Source,
    pub fingerprint: u64,
    /// Our token estimate of the message.
    #[serde(default)]
    pub tokens: u32,
    /// Set when a later, edited history replaced this message.
    #[serde(default)]
    pub superseded_at: Option<f64>,
    /// A note call (or its output) as the model sent it: kept for export, never in the view
    /// and never aligned against.
    #[serde(default)]
    pub note: bool,
    pub message: Message,
}

impl StoredMessage {
    /// Numbers `message` as the memory's next message; a user message opens the next turn.
    pub fn new(memory: &MemoryRecord, message: Message, at: f64, source: Source) -> StoredMessage {
        let turn = if message.role == Role::User {
            memory.turn + 1
        } else {
            memory.turn
        };
        StoredMessage {
            seq: memory.next_seq,
            turn,
            at,
            source,
            fingerprint: message.fingerprint(),
            tokens: super::tokens::message_tokens(&message),
            superseded_at: None,
            note: false,
            message,
        }
    }

    /// In the history: neither superseded nor a note call.
    pub fn in_history(&self) -> bool {
        self.superseded_at.is_none() && !self.note
    }

    /// The export form: provenance and the message exactly as it came.
    pub fn export(&self) -> Value {
        json!({
            "seq": self.seq,
            "turn": self.turn,
            "at": self.at,
            "role": self.message.role,
            "source": self.source,
            "tokens": self.tokens,
            "superseded_at": self.superseded_at,
            "note": self.note,
            "format": self.message.format,
            "message": self.message.raw,
        })
    }
}

/// An episode's place in the view.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum EpisodeState {
    /// Messages in view.
    Live,
    /// Still in view; its facts are asked for.
    Leaving,
    /// Messages out of view; facts in the facts block.
    Sealed,
    /// Facts out of the block too; everything kept for recall and export.
    Forgotten,
}

/// A stretch of closed history about one concept: whole units, seqs `first_seq..=last_seq`.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct Episode {
    pub n: u64,
    pub first_seq: u64,
    pub last_seq: u64,
    pub first_turn: u64,
    pub last_turn: u64,
    /// Time of its last message: when it was encoded.
    pub at: f64,
    pub tokens: u64,
    pub state: EpisodeState,
    /// The note that answered its leaving has been taken.
    #[serde(default)]
    pub acknowledged: bool,
    /// Facts written against it (fact numbers).
    #[serde(default)]
    pub facts: Vec<u64>,
    #[serde(default)]
    pub changed_at: f64,
}

/// Why a trace exists.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum TraceKind {
    /// The episode's one encoding trace, at full strength.
    Encoding,
    /// A fact judged against the episode.
    Fact,
}

/// One judgment of an episode, append-only: never edited.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
pub struct Trace {
    pub episode: u64,
    pub n: u64,
    pub kind: TraceKind,
    pub at: f64,
    /// The raw score as given.
    pub score: f64,
    /// Only a yes counts toward activation and significance.
    pub counted: bool,
    #[serde(default)]
    pub fact: Option<u64>,
}

/// A fact the model wrote in a note: one knowledge-graph triple.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct Fact {
    pub n: u64,
    pub note: String,
    pub subject: String,
    pub object: String,
    pub milestone: bool,
    pub at: f64,
    /// Episodes that were awaiting this note when it arrived.
    pub episodes: Vec<u64>,
    /// The seq of the stored note call it came from.
    pub note_seq: u64,
    /// The turn range of the episodes it was written for.
    pub first_turn: u64,
    pub last_turn: u64,
}

/// Work queued for the memory's background lane, run strictly in order.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
#[serde(tag = "kind", rename_all = "snake_case")]
pub enum JobKind {
    /// Judge new facts against the remembered episodes (traces).
    ScoreFacts { facts: Vec<u64> },
    /// Cut closed history into episodes once enough has built up.
    Cut,
}

#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
pub struct Job {
    pub n: u64,
    /// The time the work is about: traces it writes carry it.
    pub at: f64,
    pub job: JobKind,
}
