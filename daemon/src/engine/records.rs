//! What the engine keeps in the store: the memory record and stored messages.

use serde::{Deserialize, Serialize};
use serde_json::{json, Value};

use crate::formats::{Message, Role};
use crate::store::{keys, Reader, StoreError, Table, Writer};

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
    /// Set when a later, edited history replaced this message: when, and from which seq on.
    #[serde(default)]
    pub superseded_at: Option<f64>,
    pub message: Message,
}

impl StoredMessage {
    /// Numbers `message` as the memory's next message; a user message opens the next turn.
    pub fn new(memory: &MemoryRecord, message: Message, at: f64, source: Source) -> StoredMessage {
        let turn = if message.role == Role::User { memory.turn + 1 } else { memory.turn };
        StoredMessage { seq: memory.next_seq, turn, at, source, fingerprint: message.fingerprint(), superseded_at: None, message }
    }

    pub fn is_active(&self) -> bool {
        self.superseded_at.is_none()
    }

    /// The export form: provenance and the message exactly as it came.
    pub fn export(&self) -> Value {
        json!({
            "seq": self.seq,
            "turn": self.turn,
            "at": self.at,
            "role": self.message.role,
            "source": self.source,
            "superseded_at": self.superseded_at,
            "message": self.message.raw,
        })
    }
}

/// The memory's messages that are not superseded, in order.
pub fn active_history(r: &Reader<'_>, memory: &str) -> Result<Vec<StoredMessage>, StoreError> {
    let all: Vec<StoredMessage> = r.scan(Table::Messages, &keys::memory_prefix(memory))?;
    Ok(all.into_iter().filter(StoredMessage::is_active).collect())
}

/// [`active_history`] inside a write transaction.
pub fn active_history_w(w: &Writer<'_>, memory: &str) -> Result<Vec<StoredMessage>, StoreError> {
    let all: Vec<StoredMessage> = w.scan(Table::Messages, &keys::memory_prefix(memory))?;
    Ok(all.into_iter().filter(StoredMessage::is_active).collect())
}
