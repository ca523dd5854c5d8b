//! Memory policies (seed 002): how long each tier is kept, each tier's cap, whether unused
//! facts are archived, and the token budget of the cross-memory block.

use serde::{Deserialize, Serialize};

const DAY: f64 = 86_400.0;

#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum PolicyName {
    /// Nothing captured or recalled.
    Off,
    Conversational,
    KnowledgeWorker,
    Compliance,
}

/// A policy's numbers.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Policy {
    pub name: PolicyName,
    /// Days an episodic fact is kept before the sweep may archive it (if used too little).
    pub episodic_days: f64,
    /// Caps per tier (None: no cap).
    pub episodic_cap: Option<usize>,
    pub semantic_cap: Option<usize>,
    /// Whether facts used fewer than `min_uses` times are archived once past retention.
    pub archive_unused: bool,
    pub min_uses: u32,
    /// Days an archived fact is kept before the sweep purges it.
    pub archive_days: f64,
    /// Tokens of the cross-memory block at most.
    pub budget_tokens: u64,
    /// Whether the agent's routines are kept and its repeated how-to patterns found
    /// (`procedures`).
    pub procedural: bool,
    /// Half-lives of episodic importance per domain (the seed's 30, 90 and 180 days unless
    /// `[engine.scopes.decay_days.<policy>]` says otherwise; an agent may set its own).
    pub decay_days: super::decay::Schedule,
}

impl Policy {
    pub fn of(name: PolicyName) -> Policy {
        let base = Policy {
            name,
            episodic_days: 90.0,
            episodic_cap: Some(500),
            semantic_cap: Some(200),
            archive_unused: true,
            min_uses: 1,
            archive_days: 90.0,
            budget_tokens: 3_000,
            procedural: true,
            decay_days: super::decay::Schedule::default(),
        };
        match name {
            PolicyName::Off => Policy {
                budget_tokens: 0,
                procedural: false,
                ..base
            },
            PolicyName::Conversational => Policy {
                episodic_days: 14.0,
                episodic_cap: Some(100),
                semantic_cap: Some(50),
                budget_tokens: 1_500,
                procedural: false,
                ..base
            },
            PolicyName::KnowledgeWorker => base,
            PolicyName::Compliance => Policy {
                episodic_days: 3_650.0,
                episodic_cap: None,
                semantic_cap: None,
                archive_unused: false,
                archive_days: 3_650.0,
                budget_tokens: 2_000,
                ..base
            },
        }
    }

    pub fn captures(&self) -> bool {
        self.name != PolicyName::Off
    }

    /// Seconds an episodic fact is kept: the policy's days, shortened (never lengthened) by
    /// the agent's own retention and the organisation's.
    pub fn retention_secs(&self, agent_days: Option<f64>, org_days: Option<f64>) -> f64 {
        [Some(self.episodic_days), agent_days, org_days]
            .into_iter()
            .flatten()
            .fold(f64::INFINITY, f64::min)
            * DAY
    }

    pub fn cap(&self, tier: super::records::Tier) -> Option<usize> {
        match tier {
            super::records::Tier::Episodic => self.episodic_cap,
            super::records::Tier::Semantic => self.semantic_cap,
            super::records::Tier::Procedural => None,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_seed_numbers() {
        let c = Policy::of(PolicyName::Conversational);
        assert_eq!(
            (
                c.episodic_days,
                c.episodic_cap,
                c.semantic_cap,
                c.budget_tokens,
                c.procedural
            ),
            (14.0, Some(100), Some(50), 1_500, false)
        );
        let k = Policy::of(PolicyName::KnowledgeWorker);
        assert_eq!(
            (k.episodic_days, k.episodic_cap, k.semantic_cap, k.budget_tokens),
            (90.0, Some(500), Some(200), 3_000)
        );
        let x = Policy::of(PolicyName::Compliance);
        assert_eq!(
            (x.episodic_cap, x.semantic_cap, x.archive_unused, x.budget_tokens),
            (None, None, false, 2_000)
        );
        assert!(x.episodic_days >= 3_650.0);
        assert!(!Policy::of(PolicyName::Off).captures());
    }

    #[test]
    fn retention_only_shortens() {
        let k = Policy::of(PolicyName::KnowledgeWorker);
        assert_eq!(k.retention_secs(None, None), 90.0 * DAY);
        assert_eq!(k.retention_secs(Some(30.0), None), 30.0 * DAY);
        assert_eq!(k.retention_secs(Some(400.0), None), 90.0 * DAY);
        assert_eq!(k.retention_secs(Some(30.0), Some(7.0)), 7.0 * DAY);
    }
}
