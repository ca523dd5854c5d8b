//! Forgetting by unimportance (seed 003): a scope fact's importance is a score, not a cliff.
//!
//! `importance = keep × salience / (salience + 1)`, where
//! - `keep = 0.5·freshness + 0.3·access + 0.2·confidence` (weights per agent), each in [0, 1]:
//!   freshness `0.5^(age / schedule)` halves every `schedule` days of its domain (30 general,
//!   90 emotional, 180 educational); access `1 − 0.5^uses` (0 uses 0, 1 use 0.5, 3 uses 0.875);
//!   confidence as stored (0.6 when handed over, +0.1 per later conversation that restated it);
//! - `salience = w × (1 + 0.5·ln mentions)`: `w` is what this user's own signals taught for the
//!   fact's class (its domain when emotional or educational, else its kind), starting from a
//!   global prior; mentions count the conversations that stated it. A fear stated twice
//!   (2.0 × 1.35 = 2.7) outranks a favourite colour stated ten times (1.0 × 2.15 = 2.15).
//!
//! Learning is bounded and multiplicative: a positive signal (a later conversation shown the
//! fact restated it, a person confirmed or corrected it by hand, or the model saved a working
//! note of that class with `remember`: explicitly remembered) multiplies the class's
//! weight by 1 + `RATE`, a negative one (contradicted, deleted by hand) by 1 − `RATE`; it stays
//! within [prior / 4, prior × 4]. Being found by a search counts in the fact's own access, not
//! in its class: found is not yet mattered.
//!
//! The sweep's archive threshold learns per user too, by the same rule on a factor that starts
//! at 1: a user who restores a fact the sweep archived keeps facts longer (× 1 − `RATE`), one
//! who deletes by hand a fact the sweep kept past the retention keeps them shorter (× 1 +
//! `RATE`); the factor stays within [1/4, 2].

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};

use super::records::{Domain, Kind, ScopeFact};

const DAY: f64 = 86_400.0;
/// How far one signal moves a class's weight.
pub const RATE: f32 = 0.25;

/// Half-lives in days per domain (a domain not named keeps the seed's).
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct Schedule {
    pub general: f64,
    pub emotional: f64,
    pub educational: f64,
}

impl Default for Schedule {
    fn default() -> Self {
        Schedule {
            general: 30.0,
            emotional: 90.0,
            educational: 180.0,
        }
    }
}

impl Schedule {
    pub fn days(&self, d: Domain) -> f64 {
        match d {
            Domain::General => self.general,
            Domain::Emotional => self.emotional,
            Domain::Educational => self.educational,
        }
    }
}

/// The weights of freshness, access and confidence in `keep`.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
pub struct KeepWeights {
    pub age: f32,
    pub access: f32,
    pub confidence: f32,
}

impl Default for KeepWeights {
    fn default() -> Self {
        KeepWeights {
            age: 0.5,
            access: 0.3,
            confidence: 0.2,
        }
    }
}

/// The class a fact's learned weight belongs to.
pub fn class(f: &ScopeFact) -> &'static str {
    class_of(f.kind, f.domain)
}

/// The class of a fact of `kind` in `domain`: its domain when emotional or educational, else
/// its kind.
pub fn class_of(kind: Kind, domain: Domain) -> &'static str {
    match domain {
        Domain::Emotional => "emotional",
        Domain::Educational => "educational",
        Domain::General => match kind {
            Kind::Preference => "preference",
            Kind::Decision => "decision",
            Kind::Environment => "environment",
            Kind::Outcome => "outcome",
            Kind::OpenQuestion => "open_question",
            Kind::Fact => "fact",
        },
    }
}

/// The global prior of a class's weight: what matters to people more than its count says.
pub fn prior(class: &str) -> f32 {
    match class {
        "emotional" => 2.0,
        "educational" => 1.5,
        "decision" => 1.2,
        "open_question" => 1.1,
        "outcome" => 0.9,
        _ => 1.0,
    }
}

/// One user's learned weights per class (absent: the prior).
pub type Weights = BTreeMap<String, f32>;

pub fn weight(w: Option<&Weights>, class: &str) -> f32 {
    w.and_then(|w| w.get(class)).copied().unwrap_or_else(|| prior(class))
}

/// Moves a class's weight after a signal (true: positive), within its bounds.
pub fn learn(w: &mut Weights, class: &str, positive: bool) {
    let p = prior(class);
    let now = weight(Some(w), class);
    let next = if positive {
        now * (1.0 + RATE)
    } else {
        now * (1.0 - RATE)
    };
    w.insert(class.to_owned(), next.clamp(p / 4.0, p * 4.0));
}

/// Moves a user's archive-threshold factor after a signal (true: keep longer), within its
/// bounds.
pub fn learn_scale(scale: f32, longer: bool) -> f32 {
    let next = if longer {
        scale * (1.0 - RATE)
    } else {
        scale * (1.0 + RATE)
    };
    next.clamp(0.25, 2.0)
}

pub fn freshness(f: &ScopeFact, now: f64, s: &Schedule) -> f32 {
    let age = ((now - f.at) / DAY).max(0.0);
    0.5f64.powf(age / s.days(f.domain).max(1e-9)) as f32
}

pub fn keep(f: &ScopeFact, now: f64, s: &Schedule, k: &KeepWeights) -> f32 {
    let access = 1.0 - 0.5f32.powi(f.uses.min(64) as i32);
    k.age * freshness(f, now, s) + k.access * access + k.confidence * f.confidence.clamp(0.0, 1.0)
}

pub fn salience(f: &ScopeFact, w: Option<&Weights>) -> f32 {
    weight(w, class(f)) * (1.0 + 0.5 * (f.mentions.max(1) as f32).ln())
}

/// The fact's importance now, in [0, 1).
pub fn importance(f: &ScopeFact, now: f64, s: &Schedule, k: &KeepWeights, w: Option<&Weights>) -> f32 {
    let sal = salience(f, w);
    keep(f, now, s, k) * sal / (sal + 1.0)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::engine::scopes::records::{Status, Tier};

    fn fact(text: &str, kind: Kind, domain: Domain, mentions: u32) -> ScopeFact {
        ScopeFact {
            n: 0,
            tier: Tier::Episodic,
            kind,
            domain,
            text: text.into(),
            subject: String::new(),
            object: String::new(),
            owner: None,
            origin: None,
            sources: vec![],
            at: 0.0,
            valid_from: None,
            valid_to: None,
            uses: 0,
            last_used: None,
            importance: 0.5,
            confidence: 0.6,
            mentions,
            status: Status::Active,
            model: String::new(),
            v: vec![],
        }
    }

    #[test]
    fn a_fear_mentioned_twice_outranks_a_colour_mentioned_ten_times() {
        let fear = fact("Alex is afraid of flying.", Kind::Fact, Domain::Emotional, 2);
        let colour = fact(
            "Alex's favourite colour is green.",
            Kind::Preference,
            Domain::General,
            10,
        );
        let (s, k) = (Schedule::default(), KeepWeights::default());
        assert!(importance(&fear, 0.0, &s, &k, None) > importance(&colour, 0.0, &s, &k, None));
        // And a month later, by more: the emotional schedule is slower.
        let month = 30.0 * DAY;
        let gap_now = importance(&fear, 0.0, &s, &k, None) - importance(&colour, 0.0, &s, &k, None);
        let gap_later = importance(&fear, month, &s, &k, None) - importance(&colour, month, &s, &k, None);
        assert!(gap_later > gap_now);
    }

    #[test]
    fn freshness_halves_on_each_domains_schedule() {
        let s = Schedule::default();
        for (d, days) in [
            (Domain::General, 30.0),
            (Domain::Emotional, 90.0),
            (Domain::Educational, 180.0),
        ] {
            let f = fact("x", Kind::Fact, d, 1);
            assert!((freshness(&f, days * DAY, &s) - 0.5).abs() < 1e-6);
            assert!((freshness(&f, 2.0 * days * DAY, &s) - 0.25).abs() < 1e-6);
        }
    }

    #[test]
    fn learning_is_bounded_and_starts_at_the_prior() {
        let mut w = Weights::new();
        assert_eq!(weight(Some(&w), "preference"), 1.0);
        learn(&mut w, "preference", true);
        assert_eq!(weight(Some(&w), "preference"), 1.25);
        for _ in 0..50 {
            learn(&mut w, "preference", true);
        }
        assert_eq!(weight(Some(&w), "preference"), 4.0);
        for _ in 0..50 {
            learn(&mut w, "preference", false);
        }
        assert_eq!(weight(Some(&w), "preference"), 0.25);
    }
}
