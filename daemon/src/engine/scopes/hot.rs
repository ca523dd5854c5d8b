//! The hot tier (seed 003): per agent and user, the last turns across that user's conversations
//! with the agent, and core blocks: short, named, editable texts ("persona", "user", ...) that
//! are always in the cross-memory block, and working notes: what the model saved with the
//! `remember` tool for the user's next conversations, kept 24 hours (seed 002's working tier).
//! One small record per user, read at every new user message and written in the same
//! transaction as the turn that changes it.

use std::collections::{BTreeMap, VecDeque};

use serde::{Deserialize, Serialize};
use serde_json::{json, Value};

use super::records::AuditEntry;
use super::{audit, user_key};
use crate::engine::{Engine, EngineError};
use crate::store::{Read, StoreError, Table, Writer};

/// Turns the hot tier keeps per user.
pub const HOT_TURNS: usize = 20;
/// Characters of a turn it keeps (the start).
const TURN_CHARS: usize = 400;
/// Longest core block, in characters; and how many a user may have.
pub const CORE_CHARS: usize = 2_000;
pub const CORE_BLOCKS: usize = 8;
/// How long a working note lives, and how many a user keeps (the newest).
pub const WORKING_HOURS: f64 = 24.0;
pub const WORKING_NOTES: usize = 20;

/// One user's hot state with an agent.
#[derive(Debug, Clone, Default, Serialize, Deserialize, PartialEq)]
pub struct UserState {
    pub turns: VecDeque<HotTurn>,
    /// name → text.
    pub core: BTreeMap<String, String>,
    /// Working notes, oldest first; expired ones are dropped at the next write or sweep.
    #[serde(default)]
    pub notes: Vec<WorkingNote>,
}

#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
pub struct WorkingNote {
    /// The conversation whose model saved it.
    pub memory: String,
    pub text: String,
    pub at: f64,
    pub expires: f64,
}

impl UserState {
    /// The working notes still alive at `now`.
    pub fn live_notes(&self, now: f64) -> impl Iterator<Item = &WorkingNote> {
        self.notes.iter().filter(move |n| n.expires > now)
    }
}

#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
pub struct HotTurn {
    pub memory: String,
    pub role: String,
    pub text: String,
    pub at: f64,
}

pub fn state(r: &impl Read, agent: &str, user: Option<&str>) -> Result<UserState, StoreError> {
    Ok(r.get(Table::Hot, &user_key(agent, user))?.unwrap_or_default())
}

/// Adds a turn to the user's hot state (inside the turn's own transaction).
pub fn push_turn(w: &mut Writer<'_>, agent: &str, user: Option<&str>, turn: HotTurn) -> Result<(), StoreError> {
    let mut st = state(&*w, agent, user)?;
    let mut turn = turn;
    if turn.text.chars().count() > TURN_CHARS {
        turn.text = turn.text.chars().take(TURN_CHARS).collect::<String>() + "…";
    }
    st.turns.push_back(turn);
    while st.turns.len() > HOT_TURNS {
        st.turns.pop_front();
    }
    w.put(Table::Hot, &user_key(agent, user), &st)
}

/// Saves a working note (inside the reply's own transaction); expired and surplus notes go.
pub fn push_note(
    w: &mut Writer<'_>,
    agent: &str,
    user: Option<&str>,
    memory: &str,
    text: &str,
    now: f64,
) -> Result<(), StoreError> {
    let mut st = state(&*w, agent, user)?;
    st.notes.retain(|n| n.expires > now);
    st.notes.push(WorkingNote {
        memory: memory.to_owned(),
        text: text.chars().take(super::MAX_TEXT_CHARS).collect(),
        at: now,
        expires: now + WORKING_HOURS * 3_600.0,
    });
    if st.notes.len() > WORKING_NOTES {
        let over = st.notes.len() - WORKING_NOTES;
        st.notes.drain(..over);
    }
    w.put(Table::Hot, &user_key(agent, user), &st)
}

/// The expired working notes of every user of an agent, dropped when `apply` (the sweep, live);
/// returns how many.
pub fn drop_expired_notes(w: &mut Writer<'_>, agent: &str, now: f64, apply: bool) -> Result<usize, StoreError> {
    let prefix = crate::store::keys::memory_prefix(agent);
    let mut dropped = 0;
    for (k, mut st) in w.scan_keyed::<UserState>(Table::Hot, &prefix)? {
        let before = st.notes.len();
        st.notes.retain(|n| n.expires > now);
        if st.notes.len() != before {
            dropped += before - st.notes.len();
            if apply {
                w.put(Table::Hot, &k, &st)?;
            }
        }
    }
    Ok(dropped)
}

/// Removes a forgotten conversation's turns and working notes from its user's hot state;
/// returns how many.
pub fn forget_turns(w: &mut Writer<'_>, agent: &str, user: Option<&str>, memory: &str) -> Result<u64, StoreError> {
    let mut st = state(&*w, agent, user)?;
    let before = st.turns.len() + st.notes.len();
    st.turns.retain(|t| t.memory != memory);
    st.notes.retain(|n| n.memory != memory);
    let removed = (before - st.turns.len() - st.notes.len()) as u64;
    if removed > 0 {
        w.put(Table::Hot, &user_key(agent, user), &st)?;
    }
    Ok(removed)
}

/// Sets (or, with empty text, removes) a user's core block; `Err` says which limit it breaks
/// (nothing is written then).
pub fn put_core_block(
    w: &mut Writer<'_>,
    agent: &str,
    user: Option<&str>,
    name: &str,
    text: &str,
) -> Result<Result<(), String>, StoreError> {
    let (name, text) = (name.trim(), text.trim());
    if name.is_empty() || name.chars().count() > 64 {
        return Ok(Err("a core block's name must hold 1 to 64 characters".into()));
    }
    if text.chars().count() > CORE_CHARS {
        return Ok(Err(format!("a core block holds at most {CORE_CHARS} characters")));
    }
    let mut st = state(&*w, agent, user)?;
    if text.is_empty() {
        st.core.remove(name);
    } else {
        if !st.core.contains_key(name) && st.core.len() >= CORE_BLOCKS {
            return Ok(Err(format!("a user has at most {CORE_BLOCKS} core blocks")));
        }
        st.core.insert(name.to_owned(), text.to_owned());
    }
    w.put(Table::Hot, &user_key(agent, user), &st)?;
    Ok(Ok(()))
}

impl Engine {
    /// `core_block`: sets (or, with empty text, removes) a named core block of a user; audited.
    pub fn set_core_block(
        &self,
        agent: &str,
        user: Option<&str>,
        name: &str,
        text: &str,
        now: Option<f64>,
    ) -> Result<Value, EngineError> {
        let now = super::super::now_or(now)?;
        let name = name.trim();
        let lock = self.agent_lock(agent);
        let _held = lock.lock().unwrap_or_else(|e| e.into_inner());
        let st = self.store.write(|w| {
            if let Err(why) = put_core_block(w, agent, user, name, text)? {
                return Ok(Err(why));
            }
            audit(
                w,
                agent,
                &AuditEntry {
                    at: now,
                    action: "core_block".into(),
                    memory: None,
                    user: user.map(str::to_owned),
                    items: Vec::new(),
                    detail: json!({"name": name, "removed": text.trim().is_empty()}),
                },
            )?;
            Ok(Ok(state(&*w, agent, user)?))
        })?;
        let st = st.map_err(EngineError::InvalidArgument)?;
        Ok(json!({"agent": agent, "user": user, "core": st.core}))
    }

    /// `hot`: a user's hot state (recent turns across conversations, core blocks).
    pub fn hot_state(&self, agent: &str, user: Option<&str>) -> Result<Value, EngineError> {
        let st = self.store.read(|r| state(r, agent, user))?;
        Ok(json!({"agent": agent, "user": user, "turns": st.turns, "core": st.core, "notes": st.notes}))
    }
}
