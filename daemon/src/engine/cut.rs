//! Cutting closed history into episodes: sizes decide how many cuts, the judge's boundary
//! ranking decides where. The turn in progress is never cut.

use super::records::{Episode, EpisodeState, StoredMessage};
use super::state::State;
use super::{units, Engine};
use crate::models::CallCtx;

impl Engine {
    /// Cuts closed, uncut history into episodes. With `force`, any closed history is cut (a
    /// fade needs episodes); otherwise only once it reaches twice the largest episode.
    pub(super) fn cut(&self, st: &mut State, history_budget: u64, force: bool) {
        if !force && !self.cut_ready(st, history_budget) {
            return;
        }
        let max = self.max_episode(history_budget);
        let min = max / 4;
        let closed = closed_uncut(st);
        if closed.is_empty() {
            return;
        }
        let units = units::units(&closed);
        let sizes: Vec<u64> = units
            .iter()
            .map(|u| closed[u.start..u.end].iter().map(|m| m.tokens as u64).sum())
            .collect();
        let started = std::time::Instant::now();
        let rank = self.boundary_rank(st, &closed, &units);
        tracing::debug!(
            units = units.len(),
            micros = started.elapsed().as_micros() as u64,
            "boundaries judged"
        );
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
                }
            })
            .collect();
        for e in pieces {
            st.push_episode(e);
        }
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

    /// The order of boundaries: before unit i, "unit i starts a concept" + "unit i−1 ends one",
    /// from the judge. Without a judge, or when it fails, all boundaries rank alike and sizes
    /// alone decide (the most balanced cut).
    pub(super) fn boundary_rank(&self, st: &State, closed: &[&StoredMessage], units: &[units::Unit]) -> Vec<f64> {
        let flat = vec![0.0; units.len()];
        let Some(models) = &self.models else { return flat };
        if units.len() < 2 {
            return flat;
        }
        // The head of each unit stands for it: the built-in judge's cost grows with text length
        // (attention is quadratic), and a unit's opening says what it is about.
        let texts: Vec<String> = units
            .iter()
            .map(|u| {
                let joined = closed[u.start..u.end]
                    .iter()
                    .map(|m| truncate(&m.message.text, 400))
                    .collect::<Vec<_>>()
                    .join("\n");
                truncate(&joined, UNIT_TEXT_CHARS)
            })
            .collect();
        let refs: Vec<&str> = texts.iter().map(String::as_str).collect();
        match models.judge.boundaries(&CallCtx { memory: &st.memory.id }, &refs) {
            Ok(scores) if scores.len() == units.len() => (0..units.len())
                .map(|i| {
                    if i == 0 {
                        0.0
                    } else {
                        (scores[i].first + scores[i - 1].last) as f64
                    }
                })
                .collect(),
            Ok(_) | Err(_) => {
                tracing::warn!("judge gave no boundary scores; cutting by size");
                flat
            }
        }
    }
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
