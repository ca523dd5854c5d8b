//! Cutting closed history into episodes: sizes decide how many cuts, the boundary scores the
//! lane judged for each unit decide where. A cut is arithmetic over stored scores and sizes: no
//! model runs here, so it is done under the memory's lock and on the request path in
//! microseconds. The turn in progress is never cut.

use serde::Serialize;

use super::records::{Episode, EpisodeState, StoredMessage};
use super::state::State;
use super::{units, Engine};

/// Judged units before the first unscored one that a batch carries as context (the built-in
/// judge compares a unit with the two before and after it).
pub(super) const CONTEXT_UNITS: usize = 2;

/// What a cut did, for `info`: how many of the units it ranked had stored scores (the rest
/// ranked alike, so sizes alone placed the cuts near them).
#[derive(Debug, Clone, Copy, Serialize)]
pub(super) struct CutReport {
    pub units: usize,
    pub scored: usize,
    pub episodes: usize,
}

impl Engine {
    /// Cuts closed, uncut history into episodes. With `force`, any closed history is cut (a
    /// fade needs episodes); otherwise only once it reaches twice the largest episode.
    pub(super) fn cut(&self, st: &mut State, history_budget: u64, force: bool) -> Option<CutReport> {
        if !force && !self.cut_ready(st, history_budget) {
            return None;
        }
        let max = self.max_episode(history_budget);
        let min = max / 4;
        let closed = closed_uncut(st);
        if closed.is_empty() {
            return None;
        }
        let units = units::units(&closed);
        let sizes: Vec<u64> = units
            .iter()
            .map(|u| closed[u.start..u.end].iter().map(|m| m.tokens as u64).sum())
            .collect();
        let (rank, scored) = stored_rank(st, &closed, &units);
        let cuts = units::cut_points(&sizes, &rank, max, min);
        let mut bounds = vec![0];
        bounds.extend(cuts);
        bounds.push(units.len());
        let pieces: Vec<Episode> = bounds
            .windows(2)
            .map(|w| {
                let ms = &closed[units[w[0]].start..units[w[1] - 1].end];
                Episode {
                    n: 0,
                    first_seq: ms[0].seq,
                    last_seq: ms[ms.len() - 1].seq,
                    first_turn: ms[0].turn,
                    last_turn: ms[ms.len() - 1].turn,
                    at: ms[ms.len() - 1].at,
                    tokens: ms.iter().map(|m| m.tokens as u64).sum(),
                    state: EpisodeState::Live,
                    acknowledged: false,
                    facts: Vec::new(),
                    changed_at: ms[ms.len() - 1].at,
                    passaged: false,
                }
            })
            .collect();
        let report = CutReport {
            units: units.len(),
            scored,
            episodes: pieces.len(),
        };
        for e in pieces {
            st.push_episode(e);
        }
        st.prune_unit_scores();
        Some(report)
    }

    /// The history budget background cuts go by: the last decorate's, else the ceiling.
    pub(super) fn cut_budget(&self, st: &State) -> u64 {
        st.memory
            .last_budget
            .unwrap_or_else(|| st.memory.ceiling.unwrap_or(self.config.ceiling))
    }

    pub(super) fn max_episode(&self, history_budget: u64) -> u64 {
        self.config.max_episode_tokens.min(history_budget / 8).max(64)
    }

    /// Whether closed, uncut history has reached twice the largest episode.
    pub(super) fn cut_ready(&self, st: &State, history_budget: u64) -> bool {
        let total: u64 = closed_uncut(st).iter().map(|m| m.tokens as u64).sum();
        total >= 2 * self.max_episode(history_budget)
    }
}

/// The stored score of a unit, if it was judged over exactly these messages.
fn score_of<'a>(st: &'a State, closed: &[&StoredMessage], u: &units::Unit) -> Option<&'a super::records::UnitScore> {
    let (start, end) = (closed[u.start].seq, closed[u.end - 1].seq);
    st.unit_scores.get(&start).filter(|s| s.end_seq == end)
}

/// The order of the boundary before each unit: "unit i starts a concept" + "unit i−1 ends one",
/// from the scores stored for both. A boundary missing either score ranks at the median of the
/// known ones, so it is neither preferred nor avoided; with none known, sizes alone decide.
/// Also returns how many units had a score.
fn stored_rank(st: &State, closed: &[&StoredMessage], units: &[units::Unit]) -> (Vec<f64>, usize) {
    let scores: Vec<_> = units.iter().map(|u| score_of(st, closed, u)).collect();
    let scored = scores.iter().filter(|s| s.is_some()).count();
    let known: Vec<Option<f64>> = (0..units.len())
        .map(|i| match (i, scores[i], i.checked_sub(1).and_then(|p| scores[p])) {
            (0, _, _) => None,
            (_, Some(here), Some(before)) => Some((here.first + before.last) as f64),
            _ => None,
        })
        .collect();
    let mut sorted: Vec<f64> = known.iter().flatten().copied().collect();
    sorted.sort_by(f64::total_cmp);
    let neutral = sorted.get(sorted.len() / 2).copied().unwrap_or(0.0);
    (known.into_iter().map(|k| k.unwrap_or(neutral)).collect(), scored)
}

/// The next units the lane should judge: closed, uncut units without a complete score, after
/// up to [`CONTEXT_UNITS`] judged ones as context. `spans[i]` is unit i's (first, last) seq.
pub(super) struct UnitBatch {
    pub spans: Vec<(u64, u64)>,
    pub texts: Vec<String>,
    /// How many leading units are context only (their scores are kept as they are).
    pub context: usize,
}

pub(super) fn units_to_score(st: &State) -> Option<UnitBatch> {
    let closed = closed_uncut(st);
    let units = units::units(&closed);
    let first_open = units
        .iter()
        .position(|u| score_of(st, &closed, u).is_none_or(|s| !s.complete))?;
    let from = first_open.saturating_sub(CONTEXT_UNITS);
    let chosen = &units[from..];
    Some(UnitBatch {
        spans: chosen
            .iter()
            .map(|u| (closed[u.start].seq, closed[u.end - 1].seq))
            .collect(),
        texts: chosen.iter().map(|u| unit_text(&closed[u.start..u.end])).collect(),
        context: first_open - from,
    })
}

/// Whether some closed, uncut unit has no complete score yet.
pub(super) fn needs_scoring(st: &State) -> bool {
    closed_unit_spans(st).iter().any(|(start, end)| {
        st.unit_scores
            .get(start)
            .is_none_or(|s| s.end_seq != *end || !s.complete)
    })
}

/// The (first, last) seq of each closed, uncut unit.
pub(super) fn closed_unit_spans(st: &State) -> Vec<(u64, u64)> {
    let closed = closed_uncut(st);
    units::units(&closed)
        .iter()
        .map(|u| (closed[u.start].seq, closed[u.end - 1].seq))
        .collect()
}

/// The head of a unit stands for it: the built-in judge's cost grows with text length
/// (attention is quadratic), and a unit's opening says what it is about.
pub(super) fn unit_text(ms: &[&StoredMessage]) -> String {
    let joined = ms
        .iter()
        .map(|m| truncate(&m.message.text, 400))
        .collect::<Vec<_>>()
        .join("\n");
    truncate(&joined, UNIT_TEXT_CHARS)
}

/// History of closed turns that no episode holds yet.
pub(super) fn closed_uncut(st: &State) -> Vec<&StoredMessage> {
    let from = st.uncut_from();
    let current = st.memory.turn;
    st.history().filter(|m| m.seq >= from && m.turn < current).collect()
}

/// How much of a unit (or passage) the judge reads.
pub(super) const UNIT_TEXT_CHARS: usize = 600;

pub(super) fn truncate(s: &str, max: usize) -> String {
    if s.len() <= max {
        return s.to_owned();
    }
    let mut end = max;
    while !s.is_char_boundary(end) {
        end -= 1;
    }
    s[..end].to_owned()
}
