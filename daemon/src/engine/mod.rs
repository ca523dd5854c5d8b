//! The engine: decorate and report, and the mechanism of one memory (seed 000).
//!
//! The engine sees neutral messages (from `formats`), never provider JSON, and keeps all state
//! in the store. Each op on a memory runs under that memory's lock, so a decorate and a report
//! of one conversation never interleave; different memories run in parallel.

mod ingest;
pub mod records;

use std::collections::HashMap;
use std::sync::{Arc, Mutex};

use recalld_protocol::ops::{DecorateArgs, DecorateReply, ReportArgs, ReportReply};
use recalld_protocol::{ErrorBody, ErrorCode};
use serde::Deserialize;
use serde_json::{json, Value};

use crate::formats::{self, FormatError};
use crate::store::{keys, Store, StoreError, Table};
use records::{MemoryRecord, Source, StoredMessage};

/// Engine settings (`[engine]` in the config file).
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct EngineConfig {
    /// Token ceiling of a request when the memory sets none.
    pub ceiling: u64,
    /// Name of the note tool added to requests.
    pub note_tool: String,
}

impl Default for EngineConfig {
    fn default() -> Self {
        EngineConfig { ceiling: 200_000, note_tool: "note".into() }
    }
}

#[derive(Debug, thiserror::Error)]
pub enum EngineError {
    #[error("{0}")]
    InvalidArgument(String),
    #[error("{0}")]
    NotFound(String),
    #[error("request: {0}")]
    Format(#[from] FormatError),
    #[error("store: {0}")]
    Store(#[from] StoreError),
}

impl EngineError {
    /// The wire form: a stable code, a message for people; internal causes are logged.
    pub fn to_wire(&self) -> ErrorBody {
        match self {
            EngineError::InvalidArgument(m) => ErrorBody::new(ErrorCode::InvalidArgument, m.clone()),
            EngineError::NotFound(m) => ErrorBody::new(ErrorCode::NotFound, m.clone()),
            EngineError::Format(e) => ErrorBody::new(ErrorCode::InvalidArgument, e.to_string()),
            EngineError::Store(e) => {
                tracing::error!(error = %e, "store failure");
                ErrorBody::new(ErrorCode::Internal, "storage failure; see the daemon log")
            }
        }
    }
}

pub struct Engine {
    store: Arc<Store>,
    config: EngineConfig,
    locks: Mutex<HashMap<String, Arc<Mutex<()>>>>,
}

/// Unix seconds now, or the caller's injected time.
fn now_or(now: Option<f64>) -> f64 {
    now.unwrap_or_else(|| {
        std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map(|d| d.as_secs_f64())
            .unwrap_or(0.0)
    })
}

impl Engine {
    pub fn new(store: Arc<Store>, config: EngineConfig) -> Engine {
        Engine { store, config, locks: Mutex::new(HashMap::new()) }
    }

    pub fn config(&self) -> &EngineConfig {
        &self.config
    }

    fn lock(&self, memory: &str) -> Arc<Mutex<()>> {
        let mut locks = self.locks.lock().unwrap_or_else(|e| e.into_inner());
        locks.entry(memory.to_owned()).or_default().clone()
    }

    /// Stores what is new in the request and returns the request to send.
    pub fn decorate(&self, args: DecorateArgs) -> Result<DecorateReply, EngineError> {
        let now = now_or(args.now);
        if !now.is_finite() || now < 0.0 {
            return Err(EngineError::InvalidArgument(format!("now must be unix seconds, got {now}")));
        }
        let parsed = formats::parse_request(&args.request)?;
        let lock = self.lock(&args.memory);
        let _held = lock.lock().unwrap_or_else(|e| e.into_inner());
        let outcome = if args.dry_run {
            self.store.read(|r| {
                let memory = r.get::<MemoryRecord>(Table::Memories, &keys::memory(&args.memory))?;
                let stored = records::active_history(r, &args.memory)?;
                Ok(ingest::plan(memory.as_ref(), &stored, &parsed.history, args.history, now))
            })?
        } else {
            self.store.write(|w| {
                let memory = w.get::<MemoryRecord>(Table::Memories, &keys::memory(&args.memory))?;
                let stored = records::active_history_w(w, &args.memory)?;
                let mut memory = memory.unwrap_or_else(|| MemoryRecord::new(&args.memory, now));
                let plan = ingest::plan(Some(&memory), &stored, &parsed.history, args.history, now);
                if let Some(c) = args.ceiling {
                    memory.ceiling = Some(c);
                }
                if args.agent.is_some() {
                    memory.agent = args.agent.clone();
                }
                if args.user.is_some() {
                    memory.user = args.user.clone();
                }
                ingest::apply(w, &mut memory, &stored, &plan, Source::Request)?;
                memory.updated_at = now;
                w.put(Table::Memories, &keys::memory(&args.memory), &memory)?;
                Ok(plan)
            })?
        };
        let info = json!({
            "format": parsed.format,
            "stored": outcome.new.len(),
            "superseded": outcome.supersede_from.map(|i| i as u64),
            "aligned_at": outcome.aligned,
            "dry_run": args.dry_run,
            "ceiling": args.ceiling.unwrap_or(self.config.ceiling),
        });
        Ok(DecorateReply { request: args.request, info })
    }

    /// Stores the reply and returns it as the client should see it.
    pub fn report(&self, args: ReportArgs) -> Result<ReportReply, EngineError> {
        let now = now_or(args.now);
        let parsed = formats::parse_response(&args.response)?;
        let lock = self.lock(&args.memory);
        let _held = lock.lock().unwrap_or_else(|e| e.into_inner());
        self.store.write(|w| {
            let mut memory = w
                .get::<MemoryRecord>(Table::Memories, &keys::memory(&args.memory))?
                .unwrap_or_else(|| MemoryRecord::new(&args.memory, now));
            for message in &parsed.messages {
                let stored = StoredMessage::new(&memory, message.clone(), now, Source::Reply);
                w.put(Table::Messages, &keys::seq(&args.memory, stored.seq), &stored)?;
                memory.next_seq += 1;
            }
            memory.updated_at = now;
            w.put(Table::Memories, &keys::memory(&args.memory), &memory)
        })?;
        Ok(ReportReply { response: args.response, again: false })
    }

    /// Everything stored for a memory.
    pub fn export(&self, memory: &str) -> Result<Value, EngineError> {
        let found = self.store.read(|r| {
            let Some(record) = r.get::<MemoryRecord>(Table::Memories, &keys::memory(memory))? else {
                return Ok(None);
            };
            let messages: Vec<StoredMessage> = r.scan(Table::Messages, &keys::memory_prefix(memory))?;
            Ok(Some((record, messages)))
        })?;
        let (record, messages) = found.ok_or_else(|| EngineError::NotFound(format!("no memory {memory:?}")))?;
        Ok(json!({
            "memory": memory,
            "record": record,
            "messages": messages.iter().map(StoredMessage::export).collect::<Vec<_>>(),
        }))
    }

    pub fn stats(&self) -> Result<Value, EngineError> {
        let (memories, messages) = self.store.read(|r| Ok((r.count(Table::Memories, b"")?, r.count(Table::Messages, b"")?)))?;
        Ok(json!({
            "memories": memories,
            "messages": messages,
            "store_bytes": self.store.size_bytes(),
        }))
    }
}
