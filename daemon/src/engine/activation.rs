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
    of_episodes_where(episodes, traces, now, |_| true)
}

/// As [`of_episodes`] for the episodes `wanted` picks (by number), 0 for the others: a long
/// memory's traces are mostly of episodes forgotten long ago (about one trace per two stored
/// messages), and a caller that weighs only those in view need not fade all of them.
pub fn of_episodes_where(episodes: usize, traces: &[Trace], now: f64, wanted: impl Fn(u64) -> bool) -> Vec<f64> {
    let mut out = vec![0.0; episodes];
    for t in traces.iter().filter(|t| t.counted && wanted(t.episode)) {
        if let Some(a) = out.get_mut(t.episode as usize) {
            *a += faded(t.score, t.at, now);
        }
    }
    out
}

/// Significance of every episode (indexed by episode number): the plain sum of its counted
/// traces, encoding included, never faded.
pub fn significance_of_episodes(episodes: usize, traces: &[Trace]) -> Vec<f64> {
    let mut out = vec![0.0; episodes];
    for t in traces.iter().filter(|t| t.counted) {
        if let Some(s) = out.get_mut(t.episode as usize) {
            *s += t.score;
        }
    }
    out
}

/// Every fact's activation (indexed by fact number): the moment it was written, plus its own
/// counted traces, each faded the same way.
pub fn of_facts(facts: &[Fact], traces: &[Trace], now: f64) -> Vec<f64> {
    of_some_facts(&facts.iter().collect::<Vec<_>>(), traces, now)
}

/// The activation of each of `facts` (in their order): for a few facts of a large memory (the
/// facts block's) without a value for every fact it holds.
pub fn of_some_facts(facts: &[&Fact], traces: &[Trace], now: f64) -> Vec<f64> {
    let at: std::collections::HashMap<u64, usize> = facts.iter().enumerate().map(|(i, f)| (f.n, i)).collect();
    let mut out: Vec<f64> = facts.iter().map(|f| faded(1.0, f.at, now)).collect();
    for t in traces.iter().filter(|t| t.counted) {
        if let Some(&i) = t.fact.and_then(|f| at.get(&f)) {
            out[i] += faded(t.score, t.at, now);
        }
    }
    out
}

/// One episode's activation at each of `times` (its traces given): at each time, the counted
/// traces recorded by then, each faded as in [`of_episodes`]; a later trace does not count yet.
pub fn curve(traces: &[&Trace], times: &[f64]) -> Vec<f64> {
    times
        .iter()
        .map(|&t| {
            traces
                .iter()
                .filter(|tr| tr.counted && tr.at <= t)
                .map(|tr| faded(tr.score, tr.at, t))
                .sum()
        })
        .collect()
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
        assert!((significance_of_episodes(1, &t)[0] - 1.7).abs() < 1e-12);
        assert!(of_episodes(1, &t, 1e9)[0] < 0.01);
        assert!((significance_of_episodes(1, &t)[0] - 1.7).abs() < 1e-12);
    }

    #[test]
    fn the_episodes_wanted_get_the_activation_of_all_and_the_others_none() {
        let traces: Vec<Trace> = (0..12u64)
            .map(|i| Trace {
                episode: i % 4,
                ..trace(60.0 * i as f64, 0.5 + 0.1 * i as f64, i != 5)
            })
            .collect();
        let all = of_episodes(4, &traces, 3600.0);
        let some = of_episodes_where(4, &traces, 3600.0, |n| n % 2 == 1);
        assert_eq!(some, [0.0, all[1], 0.0, all[3]]);
        assert!(all.iter().all(|a| *a > 0.0));
    }

    #[test]
    fn a_curve_is_the_activation_at_each_time_counting_only_traces_recorded_by_then() {
        let (first, second) = (trace(0.0, 1.0, true), trace(3600.0, 0.5, true));
        let all = [first.clone(), second.clone()];
        let times = [0.0, 240.0, 3599.0, 3600.0, 7200.0];
        let c = curve(&[&first, &second, &trace(0.0, 0.9, false)], &times);
        assert_eq!(c[0], 1.0);
        assert!((c[1] - 0.5).abs() < 1e-12);
        assert!(
            (c[2] - of_episodes(1, &all[..1], 3599.0)[0]).abs() < 1e-12,
            "the second trace not yet"
        );
        for (t, a) in times.iter().zip(&c).skip(3) {
            assert!((a - of_episodes(1, &all, *t)[0]).abs() < 1e-12, "at {t}");
        }
        assert!(c[3] > c[2], "a trace renews the episode");
    }

    #[test]
    fn a_fact_renewed_by_a_counted_trace_is_more_active() {
        let fact = |n| Fact {
            n,
            first_turn: 1,
            last_turn: 1,
            ..Fact::new("", "", "", false, 0.0)
        };
        let mut t = trace(3600.0, 0.8, true);
        t.fact = Some(1);
        let mut uncounted = trace(3600.0, 0.9, false);
        uncounted.fact = Some(0);
        let a = of_facts(&[fact(0), fact(1)], &[t.clone(), uncounted.clone()], 3600.0);
        assert!((a[0] - 1.0 / 60f64.sqrt()).abs() < 1e-12);
        assert!((a[1] - (1.0 / 60f64.sqrt() + 0.8)).abs() < 1e-12);
        // The same values for some of the facts, in the order given.
        let (f0, f1) = (fact(0), fact(1));
        assert_eq!(of_some_facts(&[&f1, &f0], &[t, uncounted], 3600.0), vec![a[1], a[0]]);
    }
}
