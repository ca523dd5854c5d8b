//! The procedural tier (seed 002): repeated how-to patterns in the agent's own behaviour.
//!
//! At a handoff, each request of the conversation and the tools the agent called for it, in
//! order, is kept as a routine (table `routines`; our own tools left out). After consolidation,
//! a sequence of two or more tools the agent followed in at least [`MIN_CONVERSATIONS`]
//! conversations of one owner's scope becomes a procedural fact: the sequence is its
//! `subject`, and the request nearest the others by meaning is its example (the user's own
//! words: nothing is invented). A pattern seen again updates its counts.
//!
//! A newer pattern replaces an older one (seed 002: "replaced by a newer pattern") when both
//! start with the same tool, their requests are alike by meaning (`agree_cosine`), and the
//! older was not followed since the newer began: the agent changed how it does that thing.
//! No judge runs: sequences are compared exactly, requests by their stored vectors.

use std::collections::{BTreeMap, BTreeSet};

use serde_json::{json, Value};

use super::records::{AuditEntry, Domain, Kind, Routine, ScopeFact, Status, Tier};
use super::{agent_record, audit, put_fact, scope_facts};
use crate::engine::state::State;
use crate::engine::{blocks, Engine, EngineError};
use crate::formats::Role;
use crate::models::cosine;
use crate::store::{keys, Read, StoreError, Table, Writer};

/// A pattern is kept once the agent followed it in this many conversations.
pub const MIN_CONVERSATIONS: usize = 2;
/// Characters of a request kept with its routine.
pub const ASK_CHARS: usize = 300;
/// Words of the example request quoted in a procedural fact.
const EXAMPLE_WORDS: usize = 25;
/// A procedural fact's confidence: this for two conversations, and more for each further one.
const CONFIDENCE: f32 = 0.6;
const PER_CONVERSATION: f32 = 0.05;

/// The routines of a memory's history from `from_seq` on, not embedded yet: each user message
/// and the tools the assistant called until the next one (a tool called several times in a row
/// counts once), kept when two or more different tools were called. Tools named in `ours` (the
/// note and scope tools) are left out.
pub(crate) fn routines_of(st: &State, from_seq: u64, ours: &[&str]) -> Vec<Routine> {
    let mut out: Vec<Routine> = Vec::new();
    let mut current: Option<Routine> = None;
    let keep = |d: Routine, out: &mut Vec<Routine>| {
        if d.tools.iter().collect::<BTreeSet<_>>().len() >= 2 {
            out.push(d);
        }
    };
    for m in st.history().filter(|m| m.seq >= from_seq) {
        match m.message.role {
            Role::User if !m.message.text.trim().is_empty() && !blocks::is_our_block(&m.message.text) => {
                if let Some(d) = current.take() {
                    keep(d, &mut out);
                }
                current = Some(Routine {
                    memory: st.memory.id.clone(),
                    owner: st.memory.user.clone(),
                    seq: m.seq,
                    ask: m.message.text.trim().chars().take(ASK_CHARS).collect(),
                    tools: Vec::new(),
                    at: m.at,
                    model: String::new(),
                    v: Vec::new(),
                });
            }
            Role::Assistant => {
                if let Some(d) = current.as_mut() {
                    for call in m.message.tool_calls.iter().filter(|c| !ours.contains(&c.name.as_str())) {
                        if d.tools.last() != Some(&call.name) {
                            d.tools.push(call.name.clone());
                        }
                    }
                }
            }
            _ => {}
        }
    }
    if let Some(d) = current {
        keep(d, &mut out);
    }
    out
}

/// `agent` NUL `memory` NUL: the prefix of one memory's routines.
fn prefix(agent: &str, memory: &str) -> Vec<u8> {
    let mut k = keys::name(agent, memory);
    k.push(0);
    k
}

pub(super) fn put_routine(w: &mut Writer<'_>, agent: &str, r: &Routine) -> Result<(), StoreError> {
    let mut k = prefix(agent, &r.memory);
    k.extend_from_slice(&r.seq.to_be_bytes());
    w.put(Table::Routines, &k, r)
}

/// Removes a forgotten memory's routines; returns the procedural facts drawn from them, for
/// the caller to delete (a pattern still followed in other conversations is found again by
/// the next consolidation, without this one).
pub(super) fn forget_routines(w: &mut Writer<'_>, agent: &str, memory: &str) -> Result<BTreeSet<u64>, StoreError> {
    let routines: Vec<(Vec<u8>, Routine)> = w.scan_keyed(Table::Routines, &prefix(agent, memory))?;
    let drawn: BTreeSet<(Option<String>, String)> = routines
        .iter()
        .map(|(_, r)| (r.owner.clone(), sequence(&r.tools)))
        .collect();
    for (k, _) in &routines {
        w.delete(Table::Routines, k)?;
    }
    Ok(scope_facts(&*w, agent)?
        .into_iter()
        .filter(|f| f.tier == Tier::Procedural && drawn.contains(&(f.owner.clone(), f.subject.clone())))
        .map(|f| f.n)
        .collect())
}

/// Removes the routines whose owner `cleared` accepts (`clear_memories`).
pub(super) fn clear_routines(
    w: &mut Writer<'_>,
    agent: &str,
    cleared: impl Fn(Option<&str>) -> bool,
) -> Result<(), StoreError> {
    let routines: Vec<(Vec<u8>, Routine)> = w.scan_keyed(Table::Routines, &keys::memory_prefix(agent))?;
    for (k, r) in routines {
        if cleared(r.owner.as_deref()) {
            w.delete(Table::Routines, &k)?;
        }
    }
    Ok(())
}

/// A sequence of tools as a procedural fact names it.
fn sequence(tools: &[String]) -> String {
    tools.join(" → ")
}

/// A pattern found in the routines: its routines, in order of time.
struct Pattern<'a> {
    tools: &'a [String],
    routines: Vec<&'a Routine>,
}

impl Pattern<'_> {
    fn conversations(&self) -> usize {
        self.routines
            .iter()
            .map(|r| r.memory.as_str())
            .collect::<BTreeSet<_>>()
            .len()
    }
    fn first_seen(&self) -> f64 {
        self.routines.iter().map(|r| r.at).fold(f64::INFINITY, f64::min)
    }
    fn last_seen(&self) -> f64 {
        self.routines.iter().map(|r| r.at).fold(f64::NEG_INFINITY, f64::max)
    }
    /// The routine whose request is nearest the others' mean by meaning (the newest without
    /// vectors).
    fn example(&self) -> &Routine {
        let with: Vec<&&Routine> = self.routines.iter().filter(|r| !r.v.is_empty()).collect();
        if with.is_empty() || with.iter().any(|r| r.v.len() != with[0].v.len()) {
            return self.routines.last().expect("a pattern has routines");
        }
        let mut mean = vec![0f32; with[0].v.len()];
        for r in &with {
            for (m, x) in mean.iter_mut().zip(&r.v) {
                *m += x;
            }
        }
        with.into_iter()
            .max_by(|a, b| {
                cosine(&a.v, &mean)
                    .total_cmp(&cosine(&b.v, &mean))
                    .then(a.at.total_cmp(&b.at))
            })
            .expect("not empty")
    }
    fn text(&self) -> String {
        let steps = match self.tools {
            [one] => one.clone(),
            [rest @ .., last] => format!("{}, then {last}", rest.join(", then ")),
            [] => String::new(),
        };
        let ask: Vec<&str> = self.example().ask.split_whitespace().collect();
        let mut quoted = ask[..ask.len().min(EXAMPLE_WORDS)].join(" ");
        if ask.len() > EXAMPLE_WORDS {
            quoted.push_str(" …");
        }
        format!(
            "The agent handled such requests by calling {steps} ({} times in {} conversations). For example: \"{quoted}\"",
            self.routines.len(),
            self.conversations()
        )
    }
}

impl Engine {
    /// Finds the patterns of `owner`'s routines (None: the agent's ownerless ones) and keeps
    /// them as procedural facts; returns what changed. Reads and writes under the agent's lock
    /// (no model runs: the asks were embedded at the handoff).
    pub(crate) fn find_procedures(&self, agent: &str, owner: Option<&str>, now: f64) -> Result<Value, EngineError> {
        let agree = self.config.scopes.agree_cosine;
        let lock = self.agent_lock(agent);
        let _held = lock.lock().unwrap_or_else(|e| e.into_inner());
        let mut found = Vec::new();
        let mut updated = Vec::new();
        let mut replaced = Vec::new();
        self.store.write(|w| {
            found.clear();
            updated.clear();
            replaced.clear();
            let mut rec = agent_record(&*w, agent)?;
            if !self.policy_of(&rec).procedural {
                return Ok(());
            }
            let routines: Vec<Routine> = w
                .scan::<Routine>(Table::Routines, &keys::memory_prefix(agent))?
                .into_iter()
                .filter(|r| r.owner.as_deref() == owner)
                .collect();
            let mut by_tools: BTreeMap<&[String], Vec<&Routine>> = BTreeMap::new();
            for r in &routines {
                by_tools.entry(&r.tools).or_default().push(r);
            }
            let patterns: Vec<Pattern> = by_tools
                .into_iter()
                .map(|(tools, mut routines)| {
                    routines.sort_by(|a, b| a.at.total_cmp(&b.at));
                    Pattern { tools, routines }
                })
                .filter(|p| p.conversations() >= MIN_CONVERSATIONS)
                .collect();
            let held: Vec<ScopeFact> = scope_facts(&*w, agent)?
                .into_iter()
                .filter(|f| f.tier == Tier::Procedural && f.owner.as_deref() == owner)
                .collect();
            // Each pattern's fact: the one held under its sequence, refreshed, else a new one.
            let mut facts: Vec<(ScopeFact, &Pattern)> = Vec::new();
            for p in &patterns {
                let subject = sequence(p.tools);
                let example = p.example();
                let confidence =
                    (CONFIDENCE + PER_CONVERSATION * (p.conversations() - MIN_CONVERSATIONS) as f32).min(1.0);
                let fact = match held.iter().find(|f| f.subject == subject) {
                    Some(f) if !f.is_active() => continue, // replaced or archived: it stays so
                    Some(f) => {
                        let fresh = ScopeFact {
                            text: p.text(),
                            mentions: p.routines.len() as u32,
                            confidence: f.confidence.max(confidence),
                            model: example.model.clone(),
                            v: example.v.clone(),
                            ..f.clone()
                        };
                        if fresh != *f {
                            put_fact(w, agent, &fresh)?;
                            updated.push(fresh.n);
                        }
                        fresh
                    }
                    None => {
                        let f = ScopeFact {
                            n: rec.next_fact,
                            tier: Tier::Procedural,
                            kind: Kind::Fact,
                            domain: Domain::General,
                            text: p.text(),
                            subject,
                            object: String::new(),
                            owner: owner.map(str::to_owned),
                            origin: None,
                            sources: Vec::new(),
                            at: now,
                            valid_from: Some(p.first_seen()),
                            valid_to: None,
                            confidence,
                            mentions: p.routines.len() as u32,
                            uses: 0,
                            last_used: None,
                            importance: 0.5,
                            status: Status::Active,
                            model: example.model.clone(),
                            v: example.v.clone(),
                        };
                        rec.next_fact += 1;
                        put_fact(w, agent, &f)?;
                        found.push(f.n);
                        f
                    }
                };
                facts.push((fact, p));
            }
            // A newer way of doing the same thing replaces the older one.
            for (old, op) in &facts {
                let newer = facts.iter().find(|(new, np)| {
                    new.n != old.n
                        && np.tools.first() == op.tools.first()
                        && op.last_seen() < np.first_seen()
                        && !old.v.is_empty()
                        && old.v.len() == new.v.len()
                        && cosine(&old.v, &new.v) >= agree
                });
                if let Some((new, np)) = newer {
                    let current: Option<ScopeFact> = Read::get(&*w, Table::ScopeFacts, &keys::seq(agent, old.n))?;
                    if current.as_ref().is_some_and(ScopeFact::is_active) {
                        put_fact(
                            w,
                            agent,
                            &ScopeFact {
                                status: Status::Replaced { by: new.n, at: now },
                                valid_to: Some(np.first_seen()),
                                ..old.clone()
                            },
                        )?;
                        replaced.push(json!({"id": old.n, "by": new.n}));
                    }
                }
            }
            if !found.is_empty() {
                w.put(Table::Agents, &keys::memory(agent), &rec)?;
            }
            if !found.is_empty() || !replaced.is_empty() {
                audit(
                    w,
                    agent,
                    &AuditEntry {
                        at: now,
                        action: "consolidate".into(),
                        memory: None,
                        user: owner.map(str::to_owned),
                        items: found
                            .iter()
                            .copied()
                            .chain(replaced.iter().filter_map(|r| r["id"].as_u64()))
                            .collect(),
                        detail: json!({"procedures": found, "replaced": replaced}),
                    },
                )?;
            }
            Ok(())
        })?;
        Ok(json!({"found": found, "updated": updated, "replaced": replaced}))
    }
}
