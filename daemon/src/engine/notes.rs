//! Notes: the model's note calls taken out of requests and replies, and their facts written
//! against every episode awaiting them. Only the model writes facts.

use super::records::{EpisodeState, Fact, JobKind, Source, StoredMessage};
use super::state::State;
use super::{blocks, Engine};
use crate::formats::{self, Message, Role, ToolCall};
use std::borrow::Cow;
use std::collections::BTreeSet;

/// A note call found in a request's history or a reply.
pub(super) struct NoteCall {
    pub(super) call: ToolCall,
    /// The message that carried it, as it came.
    pub(super) message: Message,
}

/// A request's history without our blocks and note calls (see `Engine::clean_incoming`).
#[derive(Default)]
pub(super) struct Incoming<'a> {
    /// The history messages, borrowed from the request where kept whole.
    pub messages: Vec<Cow<'a, Message>>,
    /// Each message's index in the request's history when kept whole (None: rewritten).
    pub sent_at: Vec<Option<usize>>,
    /// The note calls taken out.
    pub notes: Vec<NoteCall>,
}

impl Engine {
    /// Drops our own blocks from a request's history and takes note calls (and their outputs)
    /// out of it: they are not history. Calls to the scope tools we offered (`scope_tools`:
    /// remember, recall) are taken out the same way (report already acted on them), so a
    /// client that kept the model's raw reply never sends a call without its output.
    /// A message kept whole is borrowed: a request resends its whole history each call, and
    /// only what is new gets copied (when stored).
    pub(super) fn clean_incoming<'a>(&self, history: &'a [Message], scope_tools: &[String]) -> Incoming<'a> {
        let tool = &self.config.note_tool;
        let mut note_ids = BTreeSet::new();
        let mut cleaned = Incoming::default();
        for (i, m) in history.iter().enumerate() {
            if matches!(m.role, Role::System | Role::Developer) && blocks::is_our_block(&m.text) {
                continue;
            }
            if m.role == Role::Tool && m.tool_call_id.as_ref().is_some_and(|id| note_ids.contains(id)) {
                continue;
            }
            let calls: Vec<&ToolCall> = m
                .tool_calls
                .iter()
                .filter(|c| &c.name == tool || scope_tools.contains(&c.name))
                .collect();
            if calls.is_empty() {
                cleaned.messages.push(Cow::Borrowed(m));
                cleaned.sent_at.push(Some(i));
                continue;
            }
            for c in calls {
                note_ids.insert(c.id.clone());
                if &c.name == tool {
                    cleaned.notes.push(NoteCall {
                        call: c.clone(),
                        message: m.clone(),
                    });
                }
            }
            let rest = scope_tools.iter().try_fold(m.without_tool_calls(tool), |rest, name| {
                Some(rest?.without_tool_calls(name))
            });
            if let Some(rest) = rest.flatten() {
                cleaned.messages.push(Cow::Owned(rest));
                cleaned.sent_at.push(None);
            }
        }
        cleaned
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
            let (valid_from, valid_to) = (
                f.valid_from.as_deref().and_then(parse_date),
                f.valid_to.as_deref().and_then(parse_date),
            );
            let n = st.push_fact(Fact {
                episodes: awaiting.clone(),
                note_seq,
                first_turn: if awaiting.is_empty() {
                    st.memory.turn
                } else {
                    first_turn
                },
                last_turn: if awaiting.is_empty() { st.memory.turn } else { last_turn },
                subject_aliases: f.subject_aliases,
                object_aliases: f.object_aliases,
                valid_from: valid_from.or(Some(now)),
                valid_to,
                ..Fact::new(&f.note, &f.subject, &f.object, f.milestone, now)
            });
            written.push(n);
        }
        for n in &awaiting {
            let e = st.episode_mut(*n);
            e.acknowledged = true;
            e.facts.extend(&written);
        }
        if !written.is_empty() {
            // The graph first (entities, restatements, contradictions), then the traces.
            st.push_job(JobKind::Graph { facts: written.clone() }, now);
            st.push_job(JobKind::ScoreFacts { facts: written.clone() }, now);
        }
        written.len()
    }
}

/// Unix seconds of an ISO 8601 date or date-time as a model writes it ("2026-03-14",
/// "2026-03-14T09:30", "2026-03-14 09:30:00Z"); None for anything else (the time is then unknown,
/// never guessed). Offsets other than Z are not read.
pub(crate) fn parse_date(s: &str) -> Option<f64> {
    let s = s.trim().trim_end_matches('Z');
    let (date, time) = match s.split_once(['T', ' ']) {
        Some((d, t)) => (d, Some(t)),
        None => (s, None),
    };
    let mut d = date.split('-');
    let (y, m, day): (i64, i64, i64) = (
        d.next()?.parse().ok()?,
        d.next()?.parse().ok()?,
        d.next()?.parse().ok()?,
    );
    if d.next().is_some() || !(1..=12).contains(&m) || !(1..=31).contains(&day) || !(1..=9999).contains(&y) {
        return None;
    }
    let mut secs = 0.0;
    if let Some(t) = time {
        let mut parts = t.split(':');
        let h: f64 = parts.next()?.parse().ok()?;
        let min: f64 = parts.next().map_or(Some(0.0), |p| p.parse().ok())?;
        let sec: f64 = parts.next().map_or(Some(0.0), |p| p.parse().ok())?;
        if !(0.0..24.0).contains(&h) || !(0.0..60.0).contains(&min) || !(0.0..61.0).contains(&sec) {
            return None;
        }
        secs = h * 3600.0 + min * 60.0 + sec;
    }
    Some(days_from_civil(y, m, day) as f64 * 86_400.0 + secs)
}

/// Days from 1970-01-01 to a date of the proleptic Gregorian calendar (civil-from-days,
/// inverted: [`civil_from_days`](super::passages::civil_from_days)).
pub(super) fn days_from_civil(y: i64, m: i64, day: i64) -> i64 {
    let (y, m) = if m <= 2 { (y - 1, m + 9) } else { (y, m - 3) };
    let era = y.div_euclid(400);
    let yoe = y - era * 400;
    let doy = (153 * m + 2) / 5 + day - 1;
    let doe = yoe * 365 + yoe / 4 - yoe / 100 + doy;
    era * 146_097 + doe - 719_468
}

#[cfg(test)]
mod tests {
    use super::parse_date;

    #[test]
    fn dates_as_models_write_them() {
        assert_eq!(parse_date("1970-01-01"), Some(0.0));
        assert_eq!(parse_date("2026-03-14"), Some(1_773_446_400.0));
        assert_eq!(parse_date("2026-03-14T09:30"), Some(1_773_446_400.0 + 9.5 * 3600.0));
        assert_eq!(parse_date("2024-02-29 00:00:01Z"), Some(1_709_164_801.0));
        assert_eq!(parse_date("next friday"), None);
        assert_eq!(parse_date("2026-13-01"), None);
    }
}
