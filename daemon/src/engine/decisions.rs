//! Decisions: what each decorate decided, kept per memory for `inspect` (table `decisions`).
//! A diagnostic log, not history: a decorate adds its record in its own transaction and deletes
//! the one [`DECISIONS_KEPT`] older, so a memory holds the latest few and never grows.

use serde::Deserialize;
use serde_json::Value;

use super::records::{Decision, DecisionCut, DecisionItem, DecisionRecall, EpisodeState, RecallMs, DECISIONS_KEPT};
use super::state::State;
use crate::store::{keys, Reader, StoreError, Table, Writer};

/// Episode states before a decorate moved any, to tell which left the view in it.
pub(super) struct Before(Vec<EpisodeState>);

impl Before {
    pub(super) fn of(st: &State) -> Before {
        Before(st.episodes.iter().map(|e| e.state).collect())
    }
}

/// Which episodes a decorate moved: (left the view, started leaving, forgotten). An episode
/// cut in this decorate was in view before it (as uncut history).
pub(super) fn moved(before: &Before, st: &State) -> (Vec<u64>, Vec<u64>, Vec<u64>) {
    use EpisodeState::*;
    let (mut faded, mut leaving, mut forgotten) = (Vec::new(), Vec::new(), Vec::new());
    for e in &st.episodes {
        let was = before.0.get(e.n as usize).copied().unwrap_or(Live);
        match (was, e.state) {
            (Live | Leaving, Sealed | Forgotten) => faded.push(e.n),
            (Live, Leaving) => leaving.push(e.n),
            (Sealed, Forgotten) => forgotten.push(e.n),
            _ => {}
        }
    }
    (faded, leaving, forgotten)
}

/// The episodes whose messages the request held: live and leaving ones not held back.
pub(super) fn in_view(st: &State, hidden: &[u64], hidden_for_recall: &[u64]) -> Vec<u64> {
    st.episodes
        .iter()
        .filter(|e| matches!(e.state, EpisodeState::Live | EpisodeState::Leaving))
        .map(|e| e.n)
        .filter(|n| !hidden.contains(n) && !hidden_for_recall.contains(n))
        .collect()
}

/// The cut `info.cut` reports, as kept.
pub(super) fn cut_of(units: usize, scored: usize, episodes: usize) -> DecisionCut {
    DecisionCut {
        units: units as u64,
        scored: scored as u64,
        episodes: episodes as u64,
    }
}

/// Recall's part of `info.recall` (null, or holding only the cross-memory block, when recall
/// did not search this memory), without the items' seqs.
pub(super) fn recall_of(info: &Value) -> Option<DecisionRecall> {
    let ms = info.get("ms")?;
    Some(DecisionRecall {
        tokens: info["tokens"].as_u64().unwrap_or(0),
        best_cosine: info["best_cosine"].as_f64().map(|c| c as f32),
        relevant: info["relevant"].as_bool().unwrap_or(false),
        // Null when nothing was kept in the block.
        items: Vec::<DecisionItem>::deserialize(&info["items"]).unwrap_or_default(),
        ms: RecallMs::deserialize(ms).unwrap_or_default(),
    })
}

/// Adds a decision and deletes the one [`DECISIONS_KEPT`] older (every older one went the same
/// way), in the caller's transaction.
pub(super) fn put(w: &mut Writer<'_>, memory: &str, d: &Decision) -> Result<(), StoreError> {
    w.put(Table::Decisions, &keys::seq(memory, d.n), d)?;
    if let Some(old) = d.n.checked_sub(DECISIONS_KEPT) {
        w.delete(Table::Decisions, &keys::seq(memory, old))?;
    }
    Ok(())
}

/// The latest `k` decisions of a memory, oldest first, and how many it keeps (at most
/// [`DECISIONS_KEPT`], so reading them all costs little).
pub(super) fn latest(r: &Reader<'_>, memory: &str, k: usize) -> Result<(Vec<Decision>, u64), StoreError> {
    let mut all: Vec<Decision> = r.scan(Table::Decisions, &keys::memory_prefix(memory))?;
    let kept = all.len() as u64;
    let from = all.len().saturating_sub(k);
    Ok((all.split_off(from), kept))
}
