//! What the layer above single memories keeps: per agent, its settings, the facts its
//! conversations handed over (episodic) and those several of them agree on (semantic), and an
//! append-only audit log. Keys start with the agent id (qualified by the caller's namespace,
//! as memory ids are), so one agent is one key range.

use serde::{Deserialize, Serialize};

use super::policy::PolicyName;

/// An agent's memory settings and counters.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
pub struct AgentRecord {
    pub agent: String,
    /// The policy set on the agent; None: the daemon's default (`[engine.scopes] policy`).
    #[serde(default)]
    pub policy: Option<PolicyName>,
    #[serde(default)]
    pub sharing: Sharing,
    /// Days the agent keeps episodic facts, when shorter than its policy's (never longer).
    #[serde(default)]
    pub retention_days: Option<f64>,
    /// Whether the sweep changes anything; until an operator says so it only reports.
    #[serde(default)]
    pub sweep_live: bool,
    /// When the sweep last ran (report mode included).
    #[serde(default)]
    pub last_sweep: Option<f64>,
    pub next_fact: u64,
    /// Half-lives per domain, when the agent sets its own (else the defaults).
    #[serde(default)]
    pub schedule: Option<super::decay::Schedule>,
    /// Weights of freshness, access and confidence, when the agent sets its own.
    #[serde(default)]
    pub keep_weights: Option<super::decay::KeepWeights>,
    /// Per owner ("" for ownerless facts), the class weights its own signals taught.
    #[serde(default)]
    pub learned: std::collections::BTreeMap<String, super::decay::Weights>,
    /// Per owner, what its own signals taught the sweep's archive threshold (a factor on it;
    /// absent: 1).
    #[serde(default)]
    pub archive_scale: std::collections::BTreeMap<String, f32>,
    /// The number the agent's next document gets.
    #[serde(default)]
    pub next_document: u64,
    /// Bumped by every document added or removed: what the document indexes are marked with.
    #[serde(default)]
    pub documents_version: u64,
    /// The day (days since 1970, UTC) `judge_calls` counts, and the judge calls consolidation
    /// made that day (against `judge_calls_per_day`).
    #[serde(default)]
    pub judge_day: i64,
    #[serde(default)]
    pub judge_calls: u64,
}

impl AgentRecord {
    pub fn keep_weights(&self) -> super::decay::KeepWeights {
        self.keep_weights.unwrap_or_default()
    }

    /// The learned weights of an owner's facts.
    pub fn weights(&self, owner: Option<&str>) -> Option<&super::decay::Weights> {
        self.learned.get(owner.unwrap_or(""))
    }

    /// A signal about a fact of `owner`: its class's weight moves (see `decay`).
    pub fn learn(&mut self, f: &ScopeFact, positive: bool) {
        self.learn_class(f.owner.as_deref(), super::decay::class(f), positive);
    }

    /// The factor on the archive threshold of `owner`'s facts.
    pub fn archive_scale(&self, owner: Option<&str>) -> f32 {
        self.archive_scale.get(owner.unwrap_or("")).copied().unwrap_or(1.0)
    }

    /// A signal about how long `owner` keeps facts: `longer` when they restored one the sweep
    /// archived, else (they deleted by hand one the sweep had kept past the retention) shorter.
    pub fn learn_threshold(&mut self, owner: Option<&str>, longer: bool) {
        let next = super::decay::learn_scale(self.archive_scale(owner), longer);
        self.archive_scale.insert(owner.unwrap_or_default().to_owned(), next);
    }

    /// A signal about a class of `owner`'s facts.
    pub fn learn_class(&mut self, owner: Option<&str>, class: &str, positive: bool) {
        let w = self.learned.entry(owner.unwrap_or_default().to_owned()).or_default();
        super::decay::learn(w, class, positive);
    }

    pub fn new(agent: &str) -> AgentRecord {
        AgentRecord {
            agent: agent.to_owned(),
            policy: None,
            sharing: Sharing::Private,
            retention_days: None,
            sweep_live: false,
            last_sweep: None,
            next_fact: 0,
            schedule: None,
            keep_weights: None,
            learned: Default::default(),
            archive_scale: Default::default(),
            next_document: 0,
            documents_version: 0,
            judge_day: 0,
            judge_calls: 0,
        }
    }
}

/// Who a memory's facts are used for.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Sharing {
    /// Only in the conversations of the user whose conversation produced them.
    #[default]
    Private,
    /// In every user's conversations with the agent.
    Shared,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Tier {
    /// A fact one conversation's notes wrote.
    Episodic,
    /// A fact several episodic facts agreed on, listing them as its sources.
    Semantic,
    /// A how-to pattern: the same sequence of tools the agent called for a request, in
    /// several conversations (its `subject` is the sequence; see `procedures`).
    Procedural,
}

/// What a fact is about (seed 002's kinds; `fact` when none is clear).
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Kind {
    Preference,
    Decision,
    Environment,
    Outcome,
    OpenQuestion,
    Fact,
}

/// What a fact is about, for how slowly it fades (seed 003's schedules).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Domain {
    #[default]
    General,
    /// Feelings, fears, wellbeing: the context of emotional support.
    Emotional,
    /// Learning and its progress.
    Educational,
}

/// Where a scope fact stands. Nothing leaves silently: replaced and archived facts stay
/// (a purge by the sweep or a delete is the only removal, and both are audited).
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(tag = "state", rename_all = "snake_case")]
pub enum Status {
    #[default]
    Active,
    /// Distilled into (or contradicted by) fact `by`.
    Replaced { by: u64, at: f64 },
    /// Out of use (the sweep, a cap); can be restored until purged.
    Archived { at: f64, reason: String },
}

/// A fact of an agent's scope.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
pub struct ScopeFact {
    pub n: u64,
    pub tier: Tier,
    pub kind: Kind,
    #[serde(default)]
    pub domain: Domain,
    pub text: String,
    #[serde(default)]
    pub subject: String,
    #[serde(default)]
    pub object: String,
    /// The user whose conversation produced it; None: shared within the agent.
    pub owner: Option<String>,
    /// An episodic fact's conversation and its fact number there.
    #[serde(default)]
    pub origin: Option<Origin>,
    /// A semantic fact's sources (scope fact numbers).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub sources: Vec<u64>,
    /// When it was recorded in its conversation (episodic) or distilled (semantic).
    pub at: f64,
    /// When it became true, when the note said so (else when stated).
    #[serde(default)]
    pub valid_from: Option<f64>,
    /// When it stopped being true: the note said so, or a newer fact contradicted it.
    #[serde(default)]
    pub valid_to: Option<f64>,
    /// How sure we are of it, 0..1: 0.6 when handed over, +0.1 per later conversation that
    /// restated it; 1 once a person corrected it.
    #[serde(default = "default_confidence")]
    pub confidence: f32,
    /// Conversations (or restatements) that stated it.
    #[serde(default = "one")]
    pub mentions: u32,
    #[serde(default)]
    pub uses: u32,
    #[serde(default)]
    pub last_used: Option<f64>,
    /// 0..1: starts at 0.5 (0.7 for a milestone), lowered by the sweep when old or unused.
    pub importance: f32,
    pub status: Status,
    /// Embedding of `text` and its model (empty when no embedder ran).
    #[serde(default)]
    pub model: String,
    #[serde(default, with = "crate::engine::records::compact_vector")]
    pub v: Vec<f32>,
}

#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
pub struct Origin {
    pub memory: String,
    /// The fact's number in the memory; None for a fact a model read out of turns nobody
    /// noted (at the handoff).
    #[serde(default)]
    pub fact: Option<u64>,
}

fn default_confidence() -> f32 {
    0.6
}

fn one() -> u32 {
    1
}

impl ScopeFact {
    pub fn is_active(&self) -> bool {
        self.status == Status::Active
    }

    /// Whether it was believed at `t`: recorded by then, not yet replaced or archived, and true
    /// then as far as we know (bi-temporal: when we learned and retired it, when it held).
    pub fn believed_at(&self, t: f64) -> bool {
        let left = match self.status {
            Status::Active => None,
            Status::Replaced { at, .. } | Status::Archived { at, .. } => Some(at),
        };
        self.at <= t
            && left.is_none_or(|at| at > t)
            && self.valid_from.is_none_or(|v| v <= t)
            && self.valid_to.is_none_or(|v| v > t)
    }

    pub fn archived_at(&self) -> Option<f64> {
        match self.status {
            Status::Archived { at, .. } => Some(at),
            _ => None,
        }
    }

    /// The summary ops and the inspector show (no vector).
    pub fn view(&self, now: f64) -> serde_json::Value {
        serde_json::json!({
            "id": self.n, "tier": self.tier, "kind": self.kind, "text": self.text,
            "subject": self.subject, "object": self.object, "owner": self.owner,
            "origin": self.origin, "sources": self.sources, "at": self.at,
            "valid_from": self.valid_from, "valid_to": self.valid_to, "uses": self.uses, "last_used": self.last_used,
            "domain": self.domain, "confidence": self.confidence, "mentions": self.mentions,
            "age_days": ((now - self.at) / 86_400.0).max(0.0),
            "importance": self.importance, "status": self.status,
            "searchable_by_meaning": !self.v.is_empty(),
        })
    }
}

/// One line of an agent's audit log: what was done, when, for which memory and user, to
/// which scope facts.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
pub struct AuditEntry {
    pub at: f64,
    /// inject, search, handoff, consolidate, forget, restore, sweep, settings.
    pub action: String,
    #[serde(default)]
    pub memory: Option<String>,
    #[serde(default)]
    pub user: Option<String>,
    #[serde(default)]
    pub items: Vec<u64>,
    /// What else the action says (the request's user message seq, a sweep's plan, ...).
    #[serde(default)]
    pub detail: serde_json::Value,
}

/// One request of a conversation and the tools the agent called for it, in order (repeats in a
/// row once), kept at the handoff: what the procedural tier is found in.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
pub struct Routine {
    pub memory: String,
    pub owner: Option<String>,
    /// The seq of the user message that asked.
    pub seq: u64,
    /// The request's words (its first [`super::procedures::ASK_CHARS`] characters).
    pub ask: String,
    pub tools: Vec<String>,
    pub at: f64,
    /// Embedding of `ask` and its model (empty when no embedder ran).
    #[serde(default)]
    pub model: String,
    #[serde(default, with = "crate::engine::records::compact_vector")]
    pub v: Vec<f32>,
}
