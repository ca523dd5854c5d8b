//! Units: the pieces history is cut from. A unit is a user message, or an assistant step with
//! the tool outputs that follow it, so a call is never separated from its output.

use super::records::StoredMessage;
use crate::formats::Role;

/// A unit: indices `start..end` into the slice it was made from.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Unit {
    pub start: usize,
    pub end: usize,
}

/// Splits messages (history order) into units.
pub fn units(messages: &[&StoredMessage]) -> Vec<Unit> {
    let mut out: Vec<Unit> = Vec::new();
    for (i, m) in messages.iter().enumerate() {
        let starts_unit = match m.message.role {
            Role::User | Role::System | Role::Developer => true,
            // An assistant step opens a unit unless it continues a run of tool calls whose
            // outputs have not all arrived (Responses sends one item per call).
            Role::Assistant => !(i > 0 && open_calls(&messages[out.last().map_or(0, |u| u.start)..i])),
            Role::Tool => false,
        };
        match out.last_mut() {
            Some(last) if !starts_unit => last.end = i + 1,
            _ => out.push(Unit { start: i, end: i + 1 }),
        }
    }
    out
}

/// Whether some tool call in `ms` has no output in `ms`.
fn open_calls(ms: &[&StoredMessage]) -> bool {
    ms.iter().flat_map(|m| &m.message.tool_calls).any(|c| {
        !ms.iter()
            .any(|o| o.message.role == Role::Tool && o.message.tool_call_id.as_deref() == Some(c.id.as_str()))
    })
}

/// Picks cut points in a stretch of units so every piece is at most `max` tokens, each side of
/// a cut at least `min` when possible. `rank[i]` orders the boundary before unit `i` (higher =
/// better); sizes decide how many cuts, the ranking decides where. Returns the unit indices
/// where a new piece starts (excluding 0), ascending.
pub fn cut_points(sizes: &[u64], rank: &[f64], max: u64, min: u64) -> Vec<usize> {
    let mut cuts = Vec::new();
    split(sizes, rank, 0, sizes.len(), max, min, &mut cuts);
    cuts.sort_unstable();
    cuts
}

fn split(sizes: &[u64], rank: &[f64], lo: usize, hi: usize, max: u64, min: u64, cuts: &mut Vec<usize>) {
    let total: u64 = sizes[lo..hi].iter().sum();
    if total <= max || hi - lo < 2 {
        return;
    }
    let mut left = 0u64;
    // The best-ranked boundary leaving both sides big enough; among boundaries ranked alike
    // (units not scored yet rank alike), the most balanced, so a cut by size alone halves the
    // history instead of chipping off the smallest piece allowed again and again.
    let mut best: Option<(usize, f64, u64)> = None;
    let mut fallback: Option<(usize, u64)> = None; // most balanced cut when none leaves both sides big enough
    for i in lo + 1..hi {
        left += sizes[i - 1];
        let right = total - left;
        let balance = left.min(right);
        if fallback.is_none_or(|(_, b)| balance > b) {
            fallback = Some((i, balance));
        }
        if left >= min && right >= min && best.is_none_or(|(_, r, b)| rank[i] > r || (rank[i] == r && balance > b)) {
            best = Some((i, rank[i], balance));
        }
    }
    let at = best
        .map(|(i, ..)| i)
        .or(fallback.map(|(i, _)| i))
        .expect("at least two units");
    cuts.push(at);
    split(sizes, rank, lo, at, max, min, cuts);
    split(sizes, rank, at, hi, max, min, cuts);
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn fits_means_no_cut() {
        assert!(cut_points(&[10, 10, 10], &[0.0, 0.5, 0.9], 30, 5).is_empty());
    }

    #[test]
    fn units_ranked_alike_are_cut_by_size_into_pieces_near_the_largest() {
        // 16 units of 10, at most 40 an episode, at least 10: halves, then halves again.
        let cuts = cut_points(&[10; 16], &[0.0; 16], 40, 10);
        assert_eq!(cuts, vec![4, 8, 12]);
    }

    #[test]
    fn the_best_ranked_boundary_wins_when_both_sides_are_big_enough() {
        // Boundary before unit 3 is ranked best.
        let cuts = cut_points(&[10, 10, 10, 10, 10, 10], &[0.0, 0.1, 0.2, 0.9, 0.3, 0.1], 40, 10);
        assert_eq!(cuts, vec![3]);
    }

    #[test]
    fn a_boundary_leaving_a_side_too_small_is_passed_over() {
        let cuts = cut_points(&[10, 10, 10, 10], &[0.0, 0.99, 0.1, 0.2], 30, 15);
        assert_eq!(cuts, vec![2]);
    }

    #[test]
    fn every_piece_fits_after_recursive_splits() {
        let sizes = vec![7u64; 40];
        let rank: Vec<f64> = (0..40).map(|i| ((i * 37) % 11) as f64).collect();
        let cuts = cut_points(&sizes, &rank, 50, 12);
        let mut bounds = vec![0];
        bounds.extend(&cuts);
        bounds.push(40);
        for w in bounds.windows(2) {
            assert!(sizes[w[0]..w[1]].iter().sum::<u64>() <= 50, "{cuts:?}");
        }
    }
}
