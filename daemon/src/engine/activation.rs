//! Activation and significance (seed 000).
//!
//! activation(episode, now) = Σ score / √max(1, minutes(now − trace.at)) over the encoding trace
//! and every counted trace; significance = Σ counted scores, never faded.

use super::records::{Fact, Trace};

fn faded(score: f64, at: f64, now: f64) -> f64 {
    let minutes = (now - at) / 60.0;
    score / minutes.max(1.0).sqrt()
}

/// Activation of every episode (indexed by episode number) in one pass over the traces: the
/// encoding trace and every counted trace, each faded by the square root of its age.
pub fn of_episodes(episodes: usize, traces: &[Trace], now: f64) -> Vec<f64> {
    let mut out = vec![0.0; episodes];
    for t in traces.iter().filter(|t| t.counted) {
        if let Some(a) = out.get_mut(t.episode as usize) {
            *a += faded(t.score, t.at, now);
        }
    }
    out
}

pub fn significance<'a>(traces: impl IntoIterator<Item = &'a Trace>) -> f64 {
    traces.into_iter().filter(|t| t.counted).map(|t| t.score).sum()
}

/// A fact's activation: its own counted traces, plus the moment it was written.
pub fn fact_activation<'a>(fact: &Fact, traces: impl IntoIterator<Item = &'a Trace>, now: f64) -> f64 {
    faded(1.0, fact.at, now)
        + traces
            .into_iter()
            .filter(|t| t.counted && t.fact == Some(fact.n))
            .map(|t| faded(t.score, t.at, now))
            .sum::<f64>()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::engine::records::TraceKind;

    fn trace(at: f64, score: f64, counted: bool) -> Trace {
        Trace {
            episode: 0,
            n: 0,
            kind: TraceKind::Fact,
            at,
            score,
            counted,
            fact: None,
        }
    }

    #[test]
    fn a_trace_counts_in_full_for_a_minute_then_fades_by_the_square_root() {
        let t = [trace(0.0, 1.0, true)];
        assert_eq!(of_episodes(1, &t, 30.0)[0], 1.0);
        assert!((of_episodes(1, &t, 4.0 * 60.0)[0] - 0.5).abs() < 1e-12);
        assert!((of_episodes(1, &t, 3600.0)[0] - 1.0 / 60f64.sqrt()).abs() < 1e-12);
    }

    #[test]
    fn only_counted_traces_count_and_significance_never_fades() {
        let t = [trace(0.0, 1.0, true), trace(0.0, 0.9, false), trace(0.0, 0.7, true)];
        assert!((significance(&t) - 1.7).abs() < 1e-12);
        assert!(of_episodes(1, &t, 1e9)[0] < 0.01);
        assert!((significance(&t) - 1.7).abs() < 1e-12);
    }
}
