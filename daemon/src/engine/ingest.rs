//! Ingest: which messages of a request are new for the memory.
//!
//! A client may resend its whole history every call, send a trimmed copy of it, or (with
//! `history: "delta"`) only new messages. The request's history is aligned with the stored,
//! active messages by fingerprint; only the new tail is stored. When the request shares a
//! stretch with the stored history and then differs, the history was edited: the stored
//! messages after the edit point are marked superseded (kept, exported, never deleted) and the
//! request's version is stored after them.

use std::borrow::Borrow;

use recalld_protocol::ops::HistoryMode;

use super::records;
use super::state::State;
use crate::formats::Message;

/// What ingesting a request will do.
#[derive(Debug, Clone)]
pub struct Plan {
    /// Index into the stored active history from which messages are superseded (an edit).
    pub supersede_from: Option<usize>,
    /// Messages of the request that are new, in order.
    pub new: Vec<Message>,
    /// How the request lined up: "first", "delta", "extends", "edit", "unrelated".
    pub aligned: &'static str,
    /// The stretch of the request that is stored history already.
    pub resent: Option<Resent>,
}

/// `incoming[incoming + k]` of a request is the stored history's `stored + k`, for k < `len`.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Resent {
    pub stored: usize,
    pub incoming: usize,
    pub len: usize,
}

/// `incoming_fp`: the fingerprints of `incoming` (computed once by the caller, who may align
/// more than once; unused with `delta`). Only the new messages are copied.
pub fn plan<M: Borrow<Message>>(
    existed: bool,
    stored_fp: &[u64],
    incoming: &[M],
    incoming_fp: &[u64],
    mode: HistoryMode,
) -> Plan {
    let make = |supersede_from, new: &[M], aligned, resent| Plan {
        supersede_from,
        new: new.iter().map(|m| m.borrow().clone()).collect(),
        aligned,
        resent,
    };
    if !existed || stored_fp.is_empty() {
        return make(None, incoming, "first", None);
    }
    if mode == HistoryMode::Delta {
        return make(None, incoming, "delta", None);
    }
    let Some(&first) = incoming_fp.first() else {
        return make(None, &[], "extends", None);
    };
    let resent = |stored, len| {
        Some(Resent {
            stored,
            incoming: 0,
            len,
        })
    };
    // Candidate places where the request's first message stands in the stored history, latest
    // first. A candidate whose run reaches the stored end means the request extends what we
    // have; otherwise the longest run marks where an edit begins.
    let mut best_edit: Option<(usize, usize)> = None;
    for start in (0..stored_fp.len()).rev().filter(|&i| stored_fp[i] == first) {
        let run = stored_fp[start..]
            .iter()
            .zip(incoming_fp)
            .take_while(|(a, b)| a == b)
            .count();
        if start + run == stored_fp.len() {
            return make(None, &incoming[run..], "extends", resent(start, run));
        }
        if best_edit.is_none_or(|(_, r)| run > r) {
            best_edit = Some((start, run));
        }
    }
    match best_edit {
        Some((start, run)) => make(Some(start + run), &incoming[run..], "edit", resent(start, run)),
        // Nothing in common: the request holds only messages we have not seen.
        None => make(None, incoming, "unrelated", None),
    }
}

/// Keeps each new version of the client's instructions on the memory (they are not history).
pub(super) fn remember_instructions(st: &mut State, instructions: &[Message], now: f64) {
    if instructions.is_empty() {
        return;
    }
    let fingerprint = super::records::fingerprint_hex(
        instructions
            .iter()
            .fold(0u64, |h, m| h.rotate_left(7) ^ m.fingerprint()),
    );
    if st.memory.latest_instructions() == Some(fingerprint.as_str()) {
        return;
    }
    let raw = instructions.iter().map(|m| m.raw.clone()).collect();
    st.memory.instructions.push(records::Instructions {
        since: now,
        fingerprint,
        raw,
    });
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::formats::Format;

    fn msgs(spec: &[(&str, &str)]) -> Vec<Message> {
        spec.iter()
            .map(|(role, text)| {
                let role = match *role {
                    "u" => Role::User,
                    "a" => Role::Assistant,
                    _ => Role::System,
                };
                Message::new(Format::ChatCompletions, role, *text)
            })
            .collect()
    }

    use crate::engine::records::{MemoryRecord, Source, StoredMessage};
    use crate::formats::Role;

    fn resent(stored: usize, incoming: usize, len: usize) -> Option<Resent> {
        Some(Resent { stored, incoming, len })
    }

    fn plan_for(mem: &MemoryRecord, st: &[StoredMessage], incoming: &[Message], mode: HistoryMode) -> Plan {
        let fingerprints: Vec<u64> = st.iter().map(|m| m.fingerprint).collect();
        let incoming_fp: Vec<u64> = incoming.iter().map(Message::fingerprint).collect();
        plan(mem.next_seq > 0, &fingerprints, incoming, &incoming_fp, mode)
    }

    fn stored(ms: &[Message]) -> (MemoryRecord, Vec<StoredMessage>) {
        let mut mem = MemoryRecord::new("m", 0.0);
        let mut out = Vec::new();
        for m in ms {
            let s = StoredMessage::new(&mem, m.clone(), 0.0, Source::Request);
            mem.next_seq += 1;
            if m.role == Role::User {
                mem.turn = s.turn;
            }
            out.push(s);
        }
        (mem, out)
    }

    #[test]
    fn full_resend_stores_only_the_tail() {
        let old = msgs(&[("u", "hi"), ("a", "hello"), ("u", "how are you")]);
        let (mem, st) = stored(&old);
        let mut incoming = old.clone();
        incoming.extend(msgs(&[("a", "fine"), ("u", "good")]));
        let p = plan_for(&mem, &st, &incoming, HistoryMode::Full);
        assert_eq!(p.aligned, "extends");
        assert_eq!(
            p.new.iter().map(|m| m.text.as_str()).collect::<Vec<_>>(),
            vec!["fine", "good"]
        );
        assert_eq!(p.supersede_from, None);
        assert_eq!(p.resent, resent(0, 0, 3));
    }

    #[test]
    fn trimmed_resend_aligns_on_the_overlap() {
        let old = msgs(&[("u", "a"), ("a", "b"), ("u", "c"), ("a", "d")]);
        let (mem, st) = stored(&old);
        let incoming = msgs(&[("u", "c"), ("a", "d"), ("u", "e")]);
        let p = plan_for(&mem, &st, &incoming, HistoryMode::Full);
        assert_eq!(p.aligned, "extends");
        assert_eq!(p.new.len(), 1);
        // The request's first two messages are the stored third and fourth.
        assert_eq!(p.resent, resent(2, 0, 2));
    }

    #[test]
    fn repeated_messages_pick_the_alignment_that_reaches_the_end() {
        let old = msgs(&[("u", "yes"), ("a", "ok"), ("u", "yes"), ("a", "ok")]);
        let (mem, st) = stored(&old);
        let incoming = msgs(&[("u", "yes"), ("a", "ok"), ("u", "next")]);
        let p = plan_for(&mem, &st, &incoming, HistoryMode::Full);
        assert_eq!(p.aligned, "extends");
        assert_eq!(p.new.iter().map(|m| m.text.as_str()).collect::<Vec<_>>(), vec!["next"]);
        assert_eq!(p.resent, resent(2, 0, 2));
    }

    #[test]
    fn an_edit_supersedes_from_the_edit_point() {
        let old = msgs(&[("u", "a"), ("a", "b"), ("u", "c"), ("a", "d")]);
        let (mem, st) = stored(&old);
        let incoming = msgs(&[("u", "a"), ("a", "b"), ("u", "C edited")]);
        let p = plan_for(&mem, &st, &incoming, HistoryMode::Full);
        assert_eq!(p.aligned, "edit");
        assert_eq!(p.supersede_from, Some(2));
        assert_eq!(p.new.len(), 1);
        assert_eq!(p.resent, resent(0, 0, 2));
    }

    #[test]
    fn delta_mode_stores_everything_sent() {
        let old = msgs(&[("u", "a"), ("a", "b")]);
        let (mem, st) = stored(&old);
        let incoming = msgs(&[("u", "a")]);
        let p = plan_for(&mem, &st, &incoming, HistoryMode::Delta);
        assert_eq!(p.new.len(), 1);
        assert_eq!(p.resent, None);
    }
}
