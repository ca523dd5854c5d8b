//! The prepared walk (the `Walk` lane job, queued when a reply ends a turn). From the exchange
//! just finished, the facts the memory's searches find for it are judged on four levels
//! (unrelated … central) against it; each carries its neighbours across its entities into the
//! same judgment, and a neighbour counts only through a source judged related or above, so a
//! bridge one step from what was discussed survives. Facts at the keep level or above are kept
//! with the reply they were prepared after. The next user message finds them ready: recall adds
//! them as one ranked list beside its own searches (the inline walk over stored vectors still
//! runs, and is all there is when the walk is not ready). One judge call per turn; nothing here
//! runs on the request path.

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};

use super::cut::truncate;
use super::recall::{edge_facts, entities, Doc, HUB_DEGREE, RRF_K, WALK_NEIGHBOURS};
use super::records::Fact;
use super::state::State;
use super::Engine;
use crate::formats::Role;
use crate::models::{CallCtx, WalkLevel};
use crate::store::{keys, Table};

/// Facts the searches propose as sources, at most.
const SOURCES: usize = 12;
/// Neighbours one source brings into the judgment, at most (its newest).
const NEIGHBOURS_PER_SOURCE: usize = 4;
/// Characters of the user message and of the reply the judge reads (each message's head).
const DIALOGUE_CHARS: usize = 800;
/// Facts a prepared walk keeps, at most.
const KEPT: usize = 16;

/// The facts judged worth showing after the reply `after_seq`, best first.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct PreparedWalk {
    /// The last message of the exchange it was prepared from: it is ready for the user
    /// message that follows that one, and for no other.
    pub after_seq: u64,
    pub facts: Vec<WalkFact>,
}

#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
pub struct WalkFact {
    pub n: u64,
    pub level: WalkLevel,
    /// Reached across an entity from this source fact (None: found by the searches).
    pub from: Option<u64>,
}

/// What the job judges: the exchange just finished.
pub(super) struct Snapshot {
    after_seq: u64,
    dialogue: String,
}

/// The last turn's user message and final reply, when the history ends with one and the
/// memory has facts to walk.
pub(super) fn snapshot(st: &State) -> Option<Snapshot> {
    if st.memory.next_fact == 0 {
        return None;
    }
    let last = st.history().last()?;
    if last.message.role != Role::Assistant || !last.message.tool_calls.is_empty() {
        return None;
    }
    let user = st.history().rev().find(|m| m.message.role == Role::User)?;
    Some(Snapshot {
        after_seq: last.seq,
        dialogue: format!(
            "user: {}\nassistant: {}",
            truncate(&user.message.text, DIALOGUE_CHARS),
            truncate(&last.message.text, DIALOGUE_CHARS)
        ),
    })
}

/// Whether `walk` was prepared from the exchange that user message `seq` follows.
pub(super) fn ready_for(st: &State, walk: &PreparedWalk, seq: u64) -> bool {
    st.history()
        .rev()
        .find(|m| m.seq < seq)
        .is_some_and(|m| m.seq == walk.after_seq)
}

/// Keeps a walk unless a newer one is already there.
pub(super) fn apply(st: &mut State, walk: PreparedWalk) {
    if st.memory.walk.as_ref().is_none_or(|w| w.after_seq <= walk.after_seq) {
        st.memory.walk = Some(walk);
    }
}

impl Engine {
    /// Searches the memory's facts for the exchange, reads them and their neighbours from the
    /// store, and runs the judge once over all of them. No lock is held.
    pub(super) fn prepare_walk(&self, memory: &str, snap: &Snapshot) -> Result<PreparedWalk, String> {
        let empty = PreparedWalk {
            after_seq: snap.after_seq,
            facts: Vec::new(),
        };
        let (Some(models), Some(ix)) = (&self.models, &self.indexes) else {
            return Ok(empty);
        };
        let ctx = CallCtx::new(memory);
        // Sources: facts found by words and by meaning for the exchange, fused by rank.
        let mut lists: Vec<Vec<u64>> = Vec::new();
        let only_facts = |hits: Vec<(u64, f32)>| -> Vec<u64> {
            hits.into_iter()
                .filter_map(|(k, _)| match Doc::of(k) {
                    Doc::Fact(n) => Some(n),
                    Doc::Passage(_) => None,
                })
                .collect()
        };
        lists.push(only_facts(
            ix.words
                .search(memory, &snap.dialogue, SOURCES * 4)
                .map_err(|e| e.to_string())?,
        ));
        if let Some(vix) = &ix.vectors {
            let v = models
                .embedder
                .embed(&ctx, &[snap.dialogue.as_str()])
                .map_err(|e| e.to_string())?;
            if let Some(v) = v.first() {
                lists.push(only_facts(
                    vix.search(memory, v, SOURCES * 4).map_err(|e| e.to_string())?,
                ));
            }
        }
        let mut fused: BTreeMap<u64, f64> = BTreeMap::new();
        for list in &lists {
            for (rank, n) in list.iter().enumerate() {
                *fused.entry(*n).or_default() += 1.0 / (RRF_K + rank as f64 + 1.0);
            }
        }
        let mut ranked: Vec<(u64, f64)> = fused.into_iter().collect();
        ranked.sort_by(|a, b| b.1.total_cmp(&a.1).then(a.0.cmp(&b.0)));

        // The sources and their neighbours, read in one transaction: (fact, text, source).
        let mut judged: Vec<(u64, String, Option<u64>)> = Vec::new();
        self.store
            .read(|r| {
                let shown = |f: &Fact| f.is_active() && !f.note.is_empty();
                let mut sources = Vec::new();
                for &(n, _) in &ranked {
                    if sources.len() == SOURCES {
                        break;
                    }
                    if let Some(f) = r.get::<Fact>(Table::Facts, &keys::seq(memory, n))?.filter(|f| shown(f)) {
                        judged.push((n, f.note.clone(), None));
                        sources.push(f);
                    }
                }
                for f in &sources {
                    let mut taken = 0;
                    for e in entities(f) {
                        let Some(around) = edge_facts(r, memory, e, HUB_DEGREE)? else {
                            continue;
                        };
                        for g in around.into_iter().take(WALK_NEIGHBOURS) {
                            if taken == NEIGHBOURS_PER_SOURCE {
                                break;
                            }
                            if judged.iter().any(|(m, ..)| *m == g) {
                                continue;
                            }
                            if let Some(g) = r.get::<Fact>(Table::Facts, &keys::seq(memory, g))?.filter(|g| shown(g)) {
                                judged.push((g.n, g.note.clone(), Some(f.n)));
                                taken += 1;
                            }
                        }
                    }
                }
                Ok(())
            })
            .map_err(|e| e.to_string())?;
        if judged.is_empty() {
            return Ok(empty);
        }
        let texts: Vec<&str> = judged.iter().map(|(_, t, _)| t.as_str()).collect();
        let levels = models
            .judge
            .walk_levels(&ctx, &snap.dialogue, &texts)
            .map_err(|e| e.to_string())?;
        let judged: Vec<(u64, Option<u64>)> = judged.into_iter().map(|(n, _, from)| (n, from)).collect();
        Ok(PreparedWalk {
            after_seq: snap.after_seq,
            facts: kept(&judged, &levels),
        })
    }
}

/// The facts to show of those judged ((fact, the source it was reached from), in the order
/// judged, with their levels): at the keep level or above, a neighbour only through a source
/// related to the exchange; best level first, then in the order judged.
fn kept(judged: &[(u64, Option<u64>)], levels: &[WalkLevel]) -> Vec<WalkFact> {
    let level_of = |n: u64| {
        judged
            .iter()
            .position(|(m, _)| *m == n)
            .and_then(|i| levels.get(i).copied())
            .unwrap_or(WalkLevel::Unrelated)
    };
    let mut facts: Vec<WalkFact> = judged
        .iter()
        .zip(levels)
        .filter(|((_, from), level)| {
            **level >= WalkLevel::Keep && from.is_none_or(|s| level_of(s) >= WalkLevel::Related)
        })
        .map(|(&(n, from), &level)| WalkFact { n, level, from })
        .collect();
    facts.sort_by_key(|f| std::cmp::Reverse(f.level));
    facts.truncate(KEPT);
    facts
}

#[cfg(test)]
mod tests {
    use super::*;
    use WalkLevel::*;

    #[test]
    fn a_neighbour_is_shown_only_through_a_related_source_and_the_best_come_first() {
        // Sources 1 (related), 2 (unrelated), 3 (keep); neighbours 10 of 1, 20 of 2, 30 of 3.
        let judged = [
            (1, None),
            (2, None),
            (3, None),
            (10, Some(1)),
            (20, Some(2)),
            (30, Some(3)),
        ];
        let levels = [Related, Unrelated, Keep, Central, Central, Keep];
        let shown: Vec<(u64, WalkLevel)> = kept(&judged, &levels).iter().map(|f| (f.n, f.level)).collect();
        // 10 is a bridge one step from a related source; 20 hangs off an unrelated one; 1 and
        // 2 are below the keep level themselves.
        assert_eq!(shown, vec![(10, Central), (3, Keep), (30, Keep)]);
    }

    #[test]
    fn a_judge_answering_fewer_levels_than_asked_shows_only_what_it_judged() {
        let judged = [(1, None), (2, None), (3, Some(1))];
        let shown = kept(&judged, &[Central]);
        assert_eq!(shown.iter().map(|f| f.n).collect::<Vec<_>>(), vec![1]);
    }
}
