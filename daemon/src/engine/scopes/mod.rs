//! Memory across conversations (seed 002): the one layer that reads across memories, and only
//! within an agent's scope and policy. The engine below it stays one memory at a time.
//!
//! A memory that names an `agent` (and maybe a `user`) hands its facts to the agent's scope
//! when it ends (`end`, or quiet for `quiet_minutes`): they become episodic scope facts,
//! labelled with a kind (`handoff`). Facts that several conversations agree on are distilled
//! into semantic facts that list their sources (`consolidate`). A new user message gets a
//! cross-memory block of the scope's relevant facts within the policy's budget (`block`). A
//! rule-based sweep archives and purges under the policy, reporting before it acts (`sweep`).
//! Every inject, search, handoff, consolidate, forget, restore and sweep is audited.
//!
//! Scope: an agent's facts are visible to the user whose conversation produced them, facts
//! with no owner to every user, and all of them when the agent's sharing is `shared`.
//! Distillation never mixes owners. Agent ids are qualified by the caller's namespace in
//! dispatch, as memory ids are, so one uid never sees another's agents.

mod block;
mod consolidate;
pub mod decay;
pub mod documents;
mod handoff;
pub mod hot;
pub mod kinds;
pub mod ops;
pub mod policy;
pub(crate) mod procedures;
pub(crate) use block::word_set;
pub mod records;
mod sweep;
pub mod tools;

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};

use serde::Deserialize;

pub use block::{AcrossItem, AcrossSection};
use policy::{Policy, PolicyName};
use records::{AgentRecord, AuditEntry, ScopeFact, Sharing};

use super::Engine;
use crate::store::{keys, Read, StoreError, Table, Writer};

/// Longest text of a scope fact, in characters (the seed's limit on a working note).
pub const MAX_TEXT_CHARS: usize = 4_000;

/// `[engine.scopes]` settings.
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct ScopesConfig {
    /// The policy of agents that set none.
    pub policy: PolicyName,
    /// Minutes without a turn after which a memory hands its facts to its agent's scope.
    pub quiet_minutes: f64,
    /// Below this cosine with the new user message a scope fact is not shown.
    pub min_relevance: f32,
    /// Two facts whose cosine is below this are never asked whether they agree.
    pub agree_cosine: f32,
    /// The organisation's retention in days, on top of every policy (None: none).
    pub retention_days: Option<f64>,
    /// Hours between sweeps of an agent.
    pub sweep_hours: f64,
    /// Judge calls consolidation may make per agent and day (UTC); once spent, the pairs
    /// left wait for a consolidation on a later day.
    pub judge_calls_per_day: u64,
    /// The tool offered to the model of a memory that names an agent, to save a working note
    /// for the user's next conversations ("" offers none).
    pub remember_tool: String,
    /// The tool offered with it to search the agent's memory on purpose ("" offers none).
    pub recall_tool: String,
    /// Half-lives per domain for the agents of a policy, where they differ from the seed's
    /// (`[engine.scopes.decay_days.conversational] general = 7.0`).
    pub decay_days: std::collections::BTreeMap<PolicyName, decay::Schedule>,
}

impl Default for ScopesConfig {
    fn default() -> Self {
        ScopesConfig {
            policy: PolicyName::KnowledgeWorker,
            quiet_minutes: 30.0,
            min_relevance: 0.3,
            agree_cosine: 0.6,
            retention_days: None,
            sweep_hours: 24.0,
            judge_calls_per_day: 1_000,
            remember_tool: "remember".into(),
            recall_tool: "recall".into(),
            decay_days: Default::default(),
        }
    }
}

/// Whether a user sees a scope fact: their own, the agent's ownerless ones, and all of them
/// when the agent shares across users.
pub(super) fn visible(f: &ScopeFact, sharing: Sharing, user: Option<&str>) -> bool {
    visible_owner(f.owner.as_deref(), sharing, user)
}

/// Whether a user sees what `owner` owns (see [`visible`]).
pub(super) fn visible_owner(owner: Option<&str>, sharing: Sharing, user: Option<&str>) -> bool {
    match (owner, sharing) {
        (None, _) | (_, Sharing::Shared) => true,
        (Some(owner), Sharing::Private) => Some(owner) == user,
    }
}

pub(super) fn agent_record(r: &impl Read, agent: &str) -> Result<AgentRecord, StoreError> {
    Ok(r.get(Table::Agents, &keys::memory(agent))?
        .unwrap_or_else(|| AgentRecord::new(agent)))
}

/// The key of one user's record under an agent ("" for no user).
pub(super) fn user_key(agent: &str, user: Option<&str>) -> Vec<u8> {
    keys::name(agent, user.unwrap_or(""))
}

/// Every fact of the agent's scope, in number order.
pub(super) fn scope_facts(r: &impl Read, agent: &str) -> Result<Vec<ScopeFact>, StoreError> {
    r.scan(Table::ScopeFacts, &keys::memory_prefix(agent))
}

/// Writes a scope fact; every write and delete of one moves the agent's scope version.
pub(super) fn put_fact(w: &mut Writer<'_>, agent: &str, f: &ScopeFact) -> Result<(), StoreError> {
    bump_version(w, agent)?;
    w.put(Table::ScopeFacts, &keys::seq(agent, f.n), f)
}

pub(super) fn delete_fact(w: &mut Writer<'_>, agent: &str, n: u64) -> Result<(), StoreError> {
    bump_version(w, agent)?;
    w.delete(Table::ScopeFacts, &keys::seq(agent, n)).map(drop)
}

/// Where an agent's scope version is kept: it changes with every scope fact written, so a
/// copy of the facts read at one version is the store's as long as the version stands.
fn version_key(agent: &str) -> Vec<u8> {
    keys::name("scope_version", agent)
}

fn bump_version(w: &mut Writer<'_>, agent: &str) -> Result<(), StoreError> {
    let v: u64 = w.get(Table::Meta, &version_key(agent))?.unwrap_or(0);
    w.put(Table::Meta, &version_key(agent), &(v + 1))
}

/// Decoded scope facts of recently read agents, each with the version it was read at: the
/// cross-memory block reads an agent's facts at every new user message, and decoding
/// thousands of facts with their vectors each time costs tens of milliseconds.
#[derive(Default)]
pub struct FactsCache {
    agents: Mutex<std::collections::HashMap<String, VersionedFacts>>,
}

/// An agent's decoded facts and the scope version they were read at.
type VersionedFacts = (u64, Arc<Vec<ScopeFact>>);

/// Agents whose facts the cache keeps at most (any one is dropped past it).
const CACHED_AGENTS: usize = 64;

impl Engine {
    /// The agent's scope facts as the store holds them now: from the cache when its version
    /// still stands, else read (with the version, in one transaction) and kept.
    pub(super) fn cached_scope_facts(&self, agent: &str) -> Result<Arc<Vec<ScopeFact>>, StoreError> {
        let version: u64 = self
            .store
            .read(|r| r.get(Table::Meta, &version_key(agent)))?
            .unwrap_or(0);
        let cache = &self.scope_facts_cache.agents;
        if let Some((v, facts)) = cache.lock().unwrap_or_else(|e| e.into_inner()).get(agent) {
            if *v == version {
                return Ok(facts.clone());
            }
        }
        let (version, facts) = self.store.read(|r| {
            let v: u64 = r.get(Table::Meta, &version_key(agent))?.unwrap_or(0);
            Ok((v, Arc::new(scope_facts(r, agent)?)))
        })?;
        let mut agents = cache.lock().unwrap_or_else(|e| e.into_inner());
        if agents.len() >= CACHED_AGENTS && !agents.contains_key(agent) {
            if let Some(k) = agents.keys().next().cloned() {
                agents.remove(&k);
            }
        }
        agents.insert(agent.to_owned(), (version, facts.clone()));
        Ok(facts)
    }
}

/// Audit keys: the time in microseconds, then a number unique within this process (started
/// from the clock, so a restart does not reuse one): entries sort by time and never collide.
static AUDIT_SEQ: AtomicU64 = AtomicU64::new(0);

pub(super) fn audit(w: &mut Writer<'_>, agent: &str, entry: &AuditEntry) -> Result<(), StoreError> {
    if AUDIT_SEQ.load(Ordering::Relaxed) == 0 {
        let start = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map(|d| d.as_nanos() as u64)
            .unwrap_or(1);
        let _ = AUDIT_SEQ.compare_exchange(0, start, Ordering::Relaxed, Ordering::Relaxed);
    }
    let n = AUDIT_SEQ.fetch_add(1, Ordering::Relaxed);
    let micros = (entry.at.max(0.0) * 1e6) as u64;
    w.put(Table::Audit, &keys::seq2(agent, micros, n), entry)
}

/// Audits what a cross-memory block showed before message `seq`: scope facts (`items`) and
/// document chunks (inside decorate's transaction).
pub(super) fn audit_inject(
    w: &mut Writer<'_>,
    agent: &str,
    memory: &str,
    user: Option<&str>,
    (seq, items, documents): (u64, &[u64], &[(u64, usize)]),
    now: f64,
) -> Result<(), StoreError> {
    audit(
        w,
        agent,
        &AuditEntry {
            at: now,
            action: "inject".into(),
            memory: Some(memory.to_owned()),
            user: user.map(str::to_owned),
            items: items.to_vec(),
            detail: serde_json::json!({"before_message": seq, "documents": documents}),
        },
    )
}

impl Engine {
    /// Held while an agent's scope facts are written (handoff, consolidation, ops, the sweep).
    /// Lock order: a memory's lock, then its agent's. Memory ids hold no NUL, so this key
    /// never names a memory.
    pub(super) fn agent_lock(&self, agent: &str) -> Arc<Mutex<()>> {
        self.lock(&format!("\0agent\0{agent}"))
    }

    pub(super) fn policy_of(&self, rec: &AgentRecord) -> Policy {
        let mut policy = Policy::of(rec.policy.unwrap_or(self.config.scopes.policy));
        if let Some(s) = self.config.scopes.decay_days.get(&policy.name) {
            policy.decay_days = *s;
        }
        policy
    }

    /// The half-lives an agent's facts fade by: its own, else its policy's.
    pub(super) fn schedule_of(&self, rec: &AgentRecord) -> decay::Schedule {
        rec.schedule.unwrap_or_else(|| self.policy_of(rec).decay_days)
    }

    /// A fact's importance now, on its agent's schedule and weights and its owner's learned
    /// class weights.
    pub(super) fn importance(&self, rec: &AgentRecord, f: &ScopeFact, now: f64) -> f32 {
        decay::importance(
            f,
            now,
            &self.schedule_of(rec),
            &rec.keep_weights(),
            rec.weights(f.owner.as_deref()),
        )
    }
}
