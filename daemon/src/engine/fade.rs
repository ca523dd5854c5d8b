//! Fading and sealing: which episodes are in view, which seal, and which leave or are
//! forgotten when the view is over budget or the memory sleeps.

use super::records::{Episode, EpisodeState, StoredMessage};
use super::state::State;
use super::{activation, tokens};

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

/// Fades to the landing: least active first until the projected view reaches it. A live
/// episode starts leaving (or seals at once when its facts exist); a sealed one is forgotten.
pub(super) fn fade(st: &mut State, landing: u64, view: u64, now: f64, ratio: Option<f64>) -> bool {
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
    let mut projected = view;
    let mut changed = false;
    for (n, _) in order {
        if projected <= landing {
            break;
        }
        let e = st.episode_mut(n);
        match e.state {
            EpisodeState::Live => {
                e.state = if e.facts.is_empty() {
                    EpisodeState::Leaving
                } else {
                    EpisodeState::Sealed
                };
                projected = projected.saturating_sub(tokens::corrected(e.tokens, ratio));
            }
            EpisodeState::Sealed => e.state = EpisodeState::Forgotten,
            _ => continue,
        }
        e.changed_at = now;
        changed = true;
    }
    changed
}
