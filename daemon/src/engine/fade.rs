//! Fading and sealing: which episodes are in view, which seal, and which leave or are
//! forgotten when the view is over budget or the memory sleeps.

use super::records::{Episode, EpisodeState, StoredMessage};
use super::state::State;
use super::{activation, assemble, blocks, tokens};
use std::collections::HashMap;

/// A history message is in view unless its episode is sealed or forgotten.
pub(super) fn in_view(st: &State, m: &StoredMessage) -> bool {
    st.episode_of(m.seq)
        .is_none_or(|e| matches!(e.state, EpisodeState::Live | EpisodeState::Leaving))
}

/// Acknowledged leaving episodes whose last turn is over seal: out of view, facts in the block.
pub(super) fn seal_acknowledged(st: &mut State, now: f64) {
    let turn = st.memory.turn;
    let ready: Vec<u64> = st
        .episodes
        .iter()
        .filter(|e| e.state == EpisodeState::Leaving && e.acknowledged && e.last_turn < turn)
        .map(|e| e.n)
        .collect();
    for n in ready {
        let e = st.episode_mut(n);
        e.state = EpisodeState::Sealed;
        e.changed_at = now;
    }
}

/// The facts block back within its room after episodes sealed between fades (the fade that made
/// them leave could not count their facts: they were not written yet): the least active sealed
/// episodes are forgotten, nothing else moves.
pub(super) fn keep_facts_room(st: &mut State, facts_room: u64, now: f64) -> bool {
    fade(st, 0, 0, facts_room, now, None)
}

/// Fades to the landing: least active first until the projected view reaches it and the facts
/// block holds at most `facts_room` tokens. A live episode starts leaving (or seals at once
/// when its facts exist) while the view is over; a sealed one is forgotten, its facts leaving
/// the block (they stay recallable).
pub(super) fn fade(st: &mut State, landing: u64, view: u64, facts_room: u64, now: f64, ratio: Option<f64>) -> bool {
    let fading = |e: &Episode| matches!(e.state, EpisodeState::Live | EpisodeState::Sealed);
    let act = activation::of_episodes_where(st.episodes.len(), &st.traces, now, |n| {
        st.episodes.get(n as usize).is_some_and(fading)
    });
    let mut order: Vec<(u64, f64)> = st
        .episodes
        .iter()
        .filter(|e| fading(e))
        .map(|e| (e.n, act[e.n as usize]))
        .collect();
    order.sort_by(|a, b| a.1.total_cmp(&b.1).then(a.0.cmp(&b.0)));
    let mut block = BlockSizes::of(st);
    let mut projected = view;
    let mut changed = false;
    for (n, _) in order {
        let view_over = projected > landing;
        if !view_over && block.total() <= facts_room {
            break;
        }
        let e = st.episode_mut(n);
        match e.state {
            EpisodeState::Live if view_over => {
                let sealed = !e.facts.is_empty();
                e.state = if sealed {
                    EpisodeState::Sealed
                } else {
                    EpisodeState::Leaving
                };
                e.changed_at = now;
                projected = projected.saturating_sub(tokens::corrected(e.tokens, ratio));
                if sealed {
                    // Its facts join the block.
                    block = BlockSizes::of(st);
                }
            }
            EpisodeState::Sealed => {
                e.state = EpisodeState::Forgotten;
                e.changed_at = now;
                block.forget(n);
            }
            _ => continue,
        }
        changed = true;
    }
    changed
}

/// The facts block's size in tokens as a request's measure counts it (line by line: its
/// header, a line per fact, the milestones' heading while one is shown), and what forgetting each
/// sealed episode takes out of it: a fact leaves with the last sealed episode it was written for.
struct BlockSizes {
    /// The facts' lines.
    lines: u64,
    /// Facts shown, and milestones among them.
    shown: usize,
    milestones: usize,
    /// Per fact shown: its line's tokens, how many sealed episodes keep it shown, and whether it
    /// is a milestone.
    facts: Vec<(u64, usize, bool)>,
    /// Per sealed episode: the facts (indexes into `facts`) it keeps shown.
    kept_by: HashMap<u64, Vec<usize>>,
    /// The header's line and the milestones' heading, counted once (the fade asks for the total
    /// after every episode it forgets).
    header: u64,
    milestones_heading: u64,
}

/// A line's tokens in a block, as the measure counts it (with its newline).
fn line_cost(line: &str) -> u64 {
    u64::from(tokens::line_tokens(&format!("{line}\n")))
}

impl BlockSizes {
    fn of(st: &State) -> BlockSizes {
        let mut sizes = BlockSizes {
            lines: 0,
            shown: 0,
            milestones: 0,
            facts: Vec::new(),
            kept_by: HashMap::new(),
            header: line_cost(blocks::FACTS_HEADER),
            milestones_heading: line_cost(blocks::MILESTONES_HEADING),
        };
        for f in super::recall::facts_in_block(st)
            .into_iter()
            .filter(|f| !f.note.is_empty())
        {
            let mut sealed: Vec<u64> = f
                .all_episodes()
                .filter(|&e| {
                    st.episodes
                        .get(e as usize)
                        .is_some_and(|e| e.state == EpisodeState::Sealed)
                })
                .collect();
            sealed.sort_unstable();
            sealed.dedup();
            let size = line_cost(&blocks::fact_line(f, assemble::entity_names(st, f)));
            for &e in &sealed {
                sizes.kept_by.entry(e).or_default().push(sizes.facts.len());
            }
            sizes.facts.push((size, sealed.len(), f.milestone));
            sizes.lines += size;
            sizes.shown += 1;
            sizes.milestones += usize::from(f.milestone);
        }
        sizes
    }

    /// The block's tokens (none without a fact).
    fn total(&self) -> u64 {
        if self.shown == 0 {
            return 0;
        }
        let milestones = if self.milestones > 0 {
            self.milestones_heading
        } else {
            0
        };
        // The 4 a message costs, as the measure counts it.
        self.header + self.lines + milestones + 4
    }

    fn forget(&mut self, episode: u64) {
        for i in self.kept_by.remove(&episode).unwrap_or_default() {
            let (size, keepers, milestone) = &mut self.facts[i];
            *keepers -= 1;
            if *keepers == 0 {
                self.lines -= *size;
                self.shown -= 1;
                self.milestones -= usize::from(*milestone);
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::engine::records::{Fact, TraceKind};

    /// Episodes 0–3 sealed with two facts each (episode 1 the least active, then 0, 3, 2), 4 live
    /// (activation `live`, and two facts of its own when `live_facts`).
    fn sealed_four(live: f64, live_facts: bool) -> (tempfile::TempDir, State) {
        let dir = tempfile::tempdir().unwrap();
        let store = crate::store::Store::open(dir.path(), &Default::default()).unwrap();
        let mut st = store.read(|r| State::load(r, "m", 0.0)).unwrap();
        for k in 0..5u64 {
            let state = if k == 4 {
                EpisodeState::Live
            } else {
                EpisodeState::Sealed
            };
            st.push_episode(Episode {
                acknowledged: true,
                ..Episode::spanning((2 * k, 2 * k + 1), (k + 1, k + 1), 100, state)
            });
            let strength = [2.0, 1.0, 4.0, 3.0, live][k as usize];
            st.push_trace(k, TraceKind::Encoding, 0.0, strength, true, None);
        }
        for k in 0..if live_facts { 5 } else { 4 } {
            for i in 0..2 {
                let mut f = Fact::new(&format!("fact {i} of episode {k}, said plainly"), "", "", false, 0.0);
                f.episodes = vec![k];
                let n = st.push_fact(f);
                st.episode_mut(k).facts.push(n);
            }
        }
        (dir, st)
    }

    fn states(st: &State) -> Vec<EpisodeState> {
        st.episodes.iter().map(|e| e.state).collect()
    }

    #[test]
    fn a_fade_forgets_the_least_active_sealed_episodes_until_the_facts_block_fits_its_room() {
        use EpisodeState::*;
        let (_dir, mut st) = sealed_four(5.0, false);
        // Room for the header and `k` of the eight lines (all the same size).
        let sizes = BlockSizes::of(&st);
        let room = |k: u64| sizes.total() - sizes.lines + k * sizes.lines / 8;
        // The view is under its landing: only the block's room makes the fade forget, and it
        // leaves the live episode alone. Room for half the facts: the two least active go.
        assert!(fade(&mut st, 1_000, 500, room(4), 60.0, None));
        assert_eq!(states(&st), vec![Forgotten, Forgotten, Sealed, Sealed, Live]);
        assert_eq!(BlockSizes::of(&st).total(), room(4));
        // Room for all of it: nothing changes.
        let (_dir, mut st) = sealed_four(5.0, false);
        assert!(!fade(&mut st, 1_000, 500, room(8), 60.0, None));
        assert_eq!(states(&st), vec![Sealed, Sealed, Sealed, Sealed, Live]);
        // Between fades the room is kept the same way, whatever the view.
        assert!(keep_facts_room(&mut st, room(2), 60.0));
        assert_eq!(states(&st), vec![Forgotten, Forgotten, Sealed, Forgotten, Live]);
    }

    #[test]
    fn a_fact_leaves_the_block_with_the_last_sealed_episode_it_was_written_for() {
        let (_dir, mut st) = sealed_four(5.0, false);
        // Fact 0 restated for episode 2 as well: forgetting episode 0 leaves it shown.
        st.fact_mut(0).episodes.push(2);
        let mut sizes = BlockSizes::of(&st);
        let whole = sizes.total();
        let line = |st: &State, n: u64| {
            let f = st.fact(n).unwrap();
            line_cost(&blocks::fact_line(f, assemble::entity_names(st, f)))
        };
        sizes.forget(0);
        assert_eq!(sizes.total(), whole - line(&st, 1));
        sizes.forget(2);
        assert_eq!(
            sizes.total(),
            whole - line(&st, 0) - line(&st, 1) - line(&st, 4) - line(&st, 5)
        );
        // Counted as a request's measure counts the block (its last line has no newline).
        sizes.forget(1);
        sizes.forget(3);
        assert_eq!(sizes.total(), 0);
        let (_dir, st) = sealed_four(5.0, false);
        let text = blocks::facts_block(
            &super::super::recall::facts_in_block(&st)
                .into_iter()
                .map(|f| (f, assemble::entity_names(&st, f)))
                .collect::<Vec<_>>(),
        )
        .unwrap();
        let measured = u64::from(tokens::PieceCounts::default().count(&text)) + 4;
        assert!(
            BlockSizes::of(&st).total() == measured || BlockSizes::of(&st).total() == measured + 1,
            "{} against {measured}",
            BlockSizes::of(&st).total()
        );
    }

    #[test]
    fn a_live_episode_the_fade_seals_brings_its_facts_into_the_block_and_its_room() {
        use EpisodeState::*;
        // Live episode 4 (its facts written) is less active than sealed 3 and 2: the order is
        // 1, 0, 4, 3, 2. The view is 50 over its landing, so 1 and 0 go before 4 seals and brings
        // the view under it; the block then holds the facts of 2, 3 and 4, one episode's too
        // many for its room, and the least active of those still sealed, 3, is forgotten.
        let (_dir, mut st) = sealed_four(2.5, true);
        let sizes = BlockSizes::of(&st);
        let (line, rest) = (sizes.lines / 8, sizes.total() - sizes.lines);
        assert!(fade(&mut st, 1_000, 1_050, rest + 4 * line, 60.0, None));
        assert_eq!(states(&st), vec![Forgotten, Forgotten, Sealed, Forgotten, Sealed]);
    }
}
