//! The budget: what of the ceiling the history may use, and where a fade lands.
//!
//! history budget = ceiling − fixed part (instructions, tools and other request fields, facts
//! block, note ask) − room for the next call (one batch of tool outputs and the reply).
//! landing = half the budget, or lower so two typical turns fit between it and the budget;
//! never below the current user turn.

use super::records::StoredMessage;
use crate::formats::Role;

/// A typical turn before the memory has any of its own.
pub const DEFAULT_TURN: u64 = 1_000;
/// A typical reply before the memory has any of its own.
pub const DEFAULT_REPLY: u64 = 2_000;
pub(super) const TURNS_FOR_TYPICAL: usize = 20;
const TURNS_FOR_TOOL_BATCH: usize = 5;

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Budget {
    pub ceiling: u64,
    pub fixed: u64,
    pub room: u64,
    pub history: u64,
    pub landing: u64,
    pub typical_turn: u64,
}

/// Per-turn sizes of closed turns (the current one excluded), oldest first, and what else we
/// need from recent history.
pub struct Recent {
    pub turn_sizes: Vec<u64>,
    pub reply_sizes: Vec<u64>,
    pub tool_batches: Vec<u64>,
}

/// Measures the memory's recent turns from its history (in order).
pub fn recent(history: &[&StoredMessage], current_turn: u64, tokens: impl Fn(&StoredMessage) -> u64) -> Recent {
    let mut turn_sizes: Vec<(u64, u64)> = Vec::new();
    let mut reply_sizes = Vec::new();
    let mut tool_batches: Vec<(u64, u64)> = Vec::new();
    let mut batch = 0u64;
    for m in history {
        let t = tokens(m);
        if m.turn == 0 || m.turn >= current_turn {
            continue;
        }
        match turn_sizes.last_mut() {
            Some((turn, size)) if *turn == m.turn => *size += t,
            _ => turn_sizes.push((m.turn, t)),
        }
        match m.message.role {
            Role::Tool => batch += t,
            _ => {
                if batch > 0 {
                    tool_batches.push((m.turn, batch));
                    batch = 0;
                }
                if m.message.role == Role::Assistant && m.message.tool_calls.is_empty() {
                    reply_sizes.push(t);
                }
            }
        }
    }
    if batch > 0 {
        tool_batches.push((current_turn.saturating_sub(1), batch));
    }
    let recent_turns = turn_sizes
        .iter()
        .rev()
        .take(TURNS_FOR_TOOL_BATCH)
        .map(|(t, _)| *t)
        .min()
        .unwrap_or(0);
    Recent {
        turn_sizes: turn_sizes
            .iter()
            .rev()
            .take(TURNS_FOR_TYPICAL)
            .map(|(_, s)| *s)
            .collect(),
        reply_sizes: reply_sizes.into_iter().rev().take(TURNS_FOR_TYPICAL).collect(),
        tool_batches: tool_batches
            .into_iter()
            .filter(|(t, _)| *t >= recent_turns)
            .map(|(_, b)| b)
            .collect(),
    }
}

fn median(xs: &[u64]) -> Option<u64> {
    if xs.is_empty() {
        return None;
    }
    let mut v = xs.to_vec();
    v.sort_unstable();
    Some(v[v.len() / 2])
}

/// Computes the budget. `current_turn` is the size of the turn in progress.
pub fn budget(ceiling: u64, fixed: u64, recent: &Recent, max_output: Option<u64>, current_turn: u64) -> Budget {
    let typical_turn = median(&recent.turn_sizes).unwrap_or(DEFAULT_TURN);
    let reply = max_output.unwrap_or_else(|| median(&recent.reply_sizes).unwrap_or(DEFAULT_REPLY));
    let room = recent.tool_batches.iter().copied().max().unwrap_or(0) + reply;
    let history = ceiling.saturating_sub(fixed).saturating_sub(room);
    let landing = (history / 2)
        .min(history.saturating_sub(2 * typical_turn))
        .max(current_turn);
    Budget {
        ceiling,
        fixed,
        room,
        history,
        landing,
        typical_turn,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn landing_is_half_the_budget_when_two_turns_fit_above_it() {
        let r = Recent {
            turn_sizes: vec![100; 5],
            reply_sizes: vec![50],
            tool_batches: vec![],
        };
        let b = budget(10_000, 1_000, &r, None, 100);
        assert_eq!(b.room, 50);
        assert_eq!(b.history, 8_950);
        assert_eq!(b.landing, 4_475);
    }

    #[test]
    fn landing_drops_so_two_typical_turns_fit() {
        let r = Recent {
            turn_sizes: vec![3_000; 5],
            reply_sizes: vec![],
            tool_batches: vec![1_000],
        };
        let b = budget(12_000, 0, &r, Some(1_000), 10);
        assert_eq!(b.history, 10_000);
        assert_eq!(b.landing, 4_000);
    }

    #[test]
    fn landing_never_below_the_current_turn() {
        let r = Recent {
            turn_sizes: vec![],
            reply_sizes: vec![],
            tool_batches: vec![],
        };
        let b = budget(4_000, 500, &r, None, 3_000);
        assert_eq!(b.landing, 3_000);
    }
}
