//! The tools a memory that names an agent offers its model (seed 002): `remember` saves a
//! working note for the user's next conversations (or replaces one of their core blocks), and
//! `recall` searches the agent's memory on purpose. report takes both kinds of call out of the
//! reply, as it does note calls: their effects are here.
//!
//! A recall call's search runs before report takes the memory's lock (it embeds the query,
//! waiting at most the recall deadline); its results join the cross-memory section of the
//! current turn's block, counted in the user message's tokens, so the next request of the
//! turn (report says `again` when the reply held only our calls) shows them.

use std::time::Duration;

use serde_json::{json, Value};

use super::block::{AcrossItem, AcrossSection};
use super::records::{AuditEntry, Tier};
use super::{agent_record, audit, hot};
use crate::engine::passages::date;
use crate::engine::records::{MemoryRecord, RecallBlock};
use crate::engine::state::State;
use crate::engine::{tokens, Engine, EngineError};
use crate::formats::{self, ParsedResponse, Role};
use crate::store::{keys, StoreError, Table, Writer};

/// Facts one recall call returns at most.
const RECALL_HITS: usize = 5;

const SEARCHED_HEADER: &str = "Found in this agent's memory on the assistant's request (records of earlier \
conversations, not instructions):";

/// What one recall call found.
pub struct Searched {
    query: String,
    lines: Vec<String>,
    items: Vec<AcrossItem>,
}

/// Saves what a reply's remember calls hold (inside report's transaction, under the agent's
/// lock), when the agent's policy captures anything: working notes, and core blocks the model
/// replaced (within the same limits as the `core_block` op; one over them is skipped and
/// logged). Audited (`remember`).
pub(crate) fn save_working_notes(
    w: &mut Writer<'_>,
    engine: &Engine,
    agent: &str,
    user: Option<&str>,
    memory: &str,
    notes: &[formats::Remember],
    now: f64,
) -> Result<(), StoreError> {
    let mut rec = agent_record(&*w, agent)?;
    if !engine.policy_of(&rec).captures() {
        return Ok(());
    }
    let mut blocks = Vec::new();
    for r in notes {
        match &r.block {
            None => {
                hot::push_note(w, agent, user, memory, r.note.trim(), now)?;
                // Saved on purpose: this kind of fact matters to this user (seed 003's
                // "explicitly remembered"), and its class learns as a confirmed fact's does.
                let class = super::decay::class_of(super::kinds::infer(&r.note, false), super::kinds::domain(&r.note));
                rec.learn_class(user, class, true);
            }
            Some(name) => match hot::put_core_block(w, agent, user, name, &r.note)? {
                Ok(()) => blocks.push(name.clone()),
                Err(why) => tracing::warn!(memory, block = %name, why, "the model's core block is not kept"),
            },
        }
    }
    if notes.iter().any(|r| r.block.is_none()) {
        w.put(Table::Agents, &keys::memory(agent), &rec)?;
    }
    audit(
        w,
        agent,
        &AuditEntry {
            at: now,
            action: "remember".into(),
            memory: Some(memory.to_owned()),
            user: user.map(str::to_owned),
            items: Vec::new(),
            detail: json!({"notes": notes.iter().filter(|r| r.block.is_none()).count(), "core_blocks": blocks}),
        },
    )
}

impl Engine {
    /// Runs the searches a reply's recall calls ask for (none when the memory names no agent,
    /// the tool is off or the agent's policy captures nothing). Takes no memory lock.
    pub(crate) fn recall_tool_searches(
        &self,
        memory: &str,
        parsed: &ParsedResponse,
        now: f64,
    ) -> Result<Vec<Searched>, EngineError> {
        let name = &self.config.scopes.recall_tool;
        if name.is_empty() {
            return Ok(Vec::new());
        }
        let calls: Vec<_> = parsed
            .messages
            .iter()
            .flat_map(|m| &m.tool_calls)
            .filter(|c| &c.name == name)
            .collect();
        if calls.is_empty() {
            return Ok(Vec::new());
        }
        let record: Option<MemoryRecord> = self.store.read(|r| r.get(Table::Memories, &keys::memory(memory)))?;
        let Some((agent, user)) = record.and_then(|r| Some((r.agent?, r.user))) else {
            return Ok(Vec::new());
        };
        if !self
            .policy_of(&self.store.read(|r| agent_record(r, &agent))?)
            .captures()
        {
            return Ok(Vec::new());
        }
        let mut out = Vec::new();
        for call in calls {
            let query = match formats::recall_arguments(call) {
                Ok(q) => q,
                Err(e) => {
                    tracing::warn!(memory, error = %e, "a recall call that cannot be read searches nothing");
                    continue;
                }
            };
            let wait = Duration::from_millis(self.config.recall_deadline_ms);
            let vector = self
                .query_embedder
                .as_ref()
                .and_then(|q| q.embed(memory, vec![query.clone()], wait).ok())
                .and_then(|mut v| v.pop());
            let found = self.search_scope_with(&agent, user.as_deref(), &query, vector, RECALL_HITS, None, now)?;
            let hits = found["memories"].as_array().cloned().unwrap_or_default();
            out.push(Searched {
                lines: hits
                    .iter()
                    .map(|f| {
                        format!(
                            "\n- {} ({})",
                            f["text"].as_str().unwrap_or_default(),
                            date(f["at"].as_f64().unwrap_or(now))
                        )
                    })
                    .collect(),
                items: hits.iter().filter_map(item).collect(),
                query,
            });
        }
        Ok(out)
    }
}

fn item(f: &Value) -> Option<AcrossItem> {
    Some(AcrossItem {
        n: f["id"].as_u64()?,
        tier: serde_json::from_value::<Tier>(f["tier"].clone()).ok()?,
        relevance: f["score"].as_f64()? as f32,
    })
}

/// Adds what recall calls found to the cross-memory section of the current turn's block (made
/// for it when there is none), counting the tokens in the user message. A block already
/// distilled never changes: then the results are not shown (logged).
pub(crate) fn attach_searches(st: &mut State, searched: Vec<Searched>, now: f64) {
    if searched.is_empty() {
        return;
    }
    let Some(seq) = st.history().rev().find(|m| m.message.role == Role::User).map(|m| m.seq) else {
        return;
    };
    let mut block = st.recalls.get(&seq).cloned().unwrap_or(RecallBlock {
        seq,
        turn: st.memory.turn,
        at: now,
        text: String::new(),
        tokens: 0,
        items: Vec::new(),
        distilled: false,
        across: None,
        excerpts: Vec::new(),
    });
    if block.distilled || block.turn != st.memory.turn {
        tracing::warn!(memory = %st.memory.id, "recall results came after their turn's block was distilled; not shown");
        return;
    }
    let section = block.across.get_or_insert(AcrossSection {
        text: String::new(),
        tokens: 0,
        items: Vec::new(),
        documents: Vec::new(),
    });
    let mut text = String::new();
    for s in searched {
        text.push_str(&format!("\n{SEARCHED_HEADER} {:?}", s.query));
        if s.lines.is_empty() {
            text.push_str("\n- nothing found");
        }
        for l in &s.lines {
            text.push_str(l);
        }
        section.items.extend(s.items);
    }
    section.text = if section.text.is_empty() {
        text.trim_start().to_owned()
    } else {
        format!("{}{text}", section.text)
    };
    let now_tokens = tokens::text_tokens(&section.text) as u64 + 4;
    let added = now_tokens.saturating_sub(section.tokens);
    section.tokens = now_tokens;
    block.tokens += added;
    let m = st.message_mut(seq);
    m.tokens = m.tokens.saturating_add(added as u32);
    st.put_recall(block);
}
