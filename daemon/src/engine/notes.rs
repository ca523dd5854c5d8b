//! Notes: the model's note calls taken out of requests and replies, and their facts written
//! against every episode awaiting them. Only the model writes facts.

use super::records::{EpisodeState, Fact, JobKind, Source, StoredMessage};
use super::state::State;
use super::{blocks, Engine};
use crate::formats::{self, Message, Role, ToolCall};
use std::collections::BTreeSet;

/// A note call found in a request's history or a reply.
pub(super) struct NoteCall {
    pub(super) call: ToolCall,
    /// The message that carried it, as it came.
    pub(super) message: Message,
}

impl Engine {
    /// Drops our own blocks from a request's history and takes note calls (and their outputs)
    /// out of it: they are not history.
    pub(super) fn clean_incoming(&self, history: &[Message]) -> (Vec<Message>, Vec<NoteCall>) {
        let tool = &self.config.note_tool;
        let mut note_ids = BTreeSet::new();
        let mut notes = Vec::new();
        let mut out = Vec::new();
        for m in history {
            if matches!(m.role, Role::System | Role::Developer) && blocks::is_our_block(&m.text) {
                continue;
            }
            if m.role == Role::Tool && m.tool_call_id.as_ref().is_some_and(|id| note_ids.contains(id)) {
                continue;
            }
            let calls: Vec<&ToolCall> = m.tool_calls.iter().filter(|c| &c.name == tool).collect();
            if calls.is_empty() {
                out.push(m.clone());
                continue;
            }
            for c in calls {
                note_ids.insert(c.id.clone());
                notes.push(NoteCall {
                    call: c.clone(),
                    message: m.clone(),
                });
            }
            if let Some(rest) = m.without_tool_calls(tool) {
                out.push(rest);
            }
        }
        (out, notes)
    }

    /// Writes a note's facts against every episode awaiting them; returns how many were written.
    /// A note already taken (same call id) is skipped. The note call is stored, hidden from the
    /// view, for export.
    pub(super) fn take_note(&self, st: &mut State, note: NoteCall, now: f64, source: Source) -> usize {
        let taken = st.messages.iter().any(|m| {
            m.note
                && m.message
                    .tool_calls
                    .iter()
                    .any(|c| c.id == note.call.id && !c.id.is_empty())
        });
        if taken {
            return 0;
        }
        let mut stored = StoredMessage::new(&st.memory, note.message.clone(), now, source);
        stored.turn = st.memory.turn;
        stored.note = true;
        let note_seq = st.push_message(stored);
        let facts = match formats::note_arguments(&note.call) {
            Ok(f) => f,
            Err(e) => {
                // Unreadable: nothing is invented; the episodes stay leaving and are asked again.
                tracing::warn!(error = %e, "note call could not be read");
                return 0;
            }
        };
        let awaiting: Vec<u64> = st
            .episodes
            .iter()
            .filter(|e| e.state == EpisodeState::Leaving && !e.acknowledged)
            .map(|e| e.n)
            .collect();
        let (first_turn, last_turn) = awaiting
            .iter()
            .map(|n| (st.episodes[*n as usize].first_turn, st.episodes[*n as usize].last_turn))
            .fold((u64::MAX, 0), |(a, b), (f, l)| (a.min(f), b.max(l)));
        let mut written = Vec::new();
        for f in facts.into_iter().filter(|f| !f.note.trim().is_empty()) {
            let n = st.push_fact(Fact {
                n: 0,
                note: f.note,
                subject: f.subject,
                object: f.object,
                milestone: f.milestone,
                at: now,
                episodes: awaiting.clone(),
                note_seq,
                first_turn: if awaiting.is_empty() {
                    st.memory.turn
                } else {
                    first_turn
                },
                last_turn: if awaiting.is_empty() { st.memory.turn } else { last_turn },
            });
            written.push(n);
        }
        for n in &awaiting {
            let e = st.episode_mut(*n);
            e.acknowledged = true;
            e.facts.extend(&written);
        }
        if !written.is_empty() {
            st.push_job(JobKind::ScoreFacts { facts: written.clone() }, now);
        }
        written.len()
    }
}
