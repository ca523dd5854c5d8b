//! Consolidation: facts of one owner's scope that agree are distilled into one semantic fact
//! listing its sources; the sources are marked replaced by it, never deleted. A group is ready
//! when three or more facts agree, or facts from two or more conversations agree and one of
//! them has been used; never from a single source, never across owners. A fact that agrees
//! with a semantic fact joins it as a source; semantic facts that agree merge into a new one.
//!
//! Agreement is the judge's `relation` (restates), asked only of pairs whose cosine reaches
//! `agree_cosine`, so the judge's work grows with near pairs, not with all pairs; each pair is
//! asked once (its verdict is kept under a digest of the two texts), and at most
//! `judge_calls_per_day` times a day per agent: once spent, the pairs left wait for a later day. The text of
//! a semantic fact is its most central source's (the one nearest their mean vector): the
//! model wrote it; nothing is invented.

use std::collections::{BTreeMap, BTreeSet};

use serde_json::{json, Value};

use super::records::{AuditEntry, Kind, ScopeFact, Status, Tier};
use super::{agent_record, audit, put_fact, scope_facts};
use crate::engine::{Engine, EngineError};
use crate::models::{cosine, CallCtx, Relation};
use crate::store::{keys, Read, Table};

/// What each further agreeing source adds to a semantic fact's confidence.
const AGREEMENT: f32 = 0.1;

/// A group ready to distil: its members' numbers (episodic and semantic).
struct Group {
    members: Vec<u64>,
}

impl Engine {
    /// Consolidates the facts owned by `owner` (None: the agent's ownerless facts); returns
    /// what changed. Judges without the agent's lock, applies under it, re-checking that
    /// every member is still active.
    pub(crate) fn consolidate_owner(&self, agent: &str, owner: Option<&str>, now: f64) -> Result<Value, EngineError> {
        let Some(models) = &self.models else {
            return Ok(json!({"distilled": [], "joined": [], "note": "no judge: nothing is distilled"}));
        };
        let facts: Vec<ScopeFact> = self
            .store
            .read(|r| scope_facts(r, agent))?
            .into_iter()
            .filter(|f| f.is_active() && f.owner.as_deref() == owner && !f.v.is_empty())
            .collect();
        // Agreeing pairs, judged without a lock: remembered verdicts first, then the judge
        // while the day's budget lasts.
        let ctx = CallCtx { memory: agent };
        let day = (now / 86_400.0).floor() as i64;
        let (spent, mut verdicts) = self.store.read(|r| {
            let rec = agent_record(r, agent)?;
            let mut verdicts = std::collections::HashMap::new();
            r.visit(
                Table::Verdicts,
                &keys::memory_prefix(agent),
                &keys::memory_prefix(agent),
                |k, restates: bool| {
                    verdicts.insert(k.to_vec(), restates);
                    Ok(true)
                },
            )?;
            Ok((if rec.judge_day == day { rec.judge_calls } else { 0 }, verdicts))
        })?;
        let mut left = self.config.scopes.judge_calls_per_day.saturating_sub(spent);
        let mut new_verdicts: Vec<(Vec<u8>, bool)> = Vec::new();
        let (mut remembered, mut deferred) = (0usize, 0usize);
        let mut parent: BTreeMap<u64, u64> = facts.iter().map(|f| (f.n, f.n)).collect();
        fn root(parent: &mut BTreeMap<u64, u64>, mut n: u64) -> u64 {
            while parent[&n] != n {
                let up = parent[&parent[&n]];
                parent.insert(n, up);
                n = up;
            }
            n
        }
        let mut judged = 0usize;
        for (i, a) in facts.iter().enumerate() {
            for b in &facts[i + 1..] {
                if cosine(&a.v, &b.v) < self.config.scopes.agree_cosine
                    || root(&mut parent, a.n) == root(&mut parent, b.n)
                {
                    continue;
                }
                let key = verdict_key(agent, &b.text, &a.text);
                let restates = match verdicts.get(&key) {
                    Some(&r) => {
                        remembered += 1;
                        r
                    }
                    None if left == 0 => {
                        deferred += 1;
                        continue;
                    }
                    None => {
                        left -= 1;
                        judged += 1;
                        let r = match models.judge.relation(&ctx, &b.text, &a.text) {
                            Ok(r) => r == Relation::Restates,
                            Err(e) => {
                                self.record_verdicts(agent, day, judged - 1, &new_verdicts)?;
                                return Err(EngineError::Index(format!("judge failed during consolidation: {e}")));
                            }
                        };
                        verdicts.insert(key.clone(), r);
                        new_verdicts.push((key, r));
                        r
                    }
                };
                if restates {
                    let (ra, rb) = (root(&mut parent, a.n), root(&mut parent, b.n));
                    parent.insert(ra.max(rb), ra.min(rb));
                }
            }
        }
        let by_n: BTreeMap<u64, &ScopeFact> = facts.iter().map(|f| (f.n, f)).collect();
        let mut components: BTreeMap<u64, Vec<u64>> = BTreeMap::new();
        for f in &facts {
            let r = root(&mut parent, f.n);
            components.entry(r).or_default().push(f.n);
        }
        let groups: Vec<Group> = components
            .into_values()
            .filter(|members| members.len() >= 2)
            .filter(|members| {
                let semantic = members.iter().filter(|n| by_n[n].tier == Tier::Semantic).count();
                let episodic: Vec<&&ScopeFact> = members
                    .iter()
                    .map(|n| &by_n[n])
                    .filter(|f| f.tier == Tier::Episodic)
                    .collect();
                let memories: BTreeSet<&str> = episodic
                    .iter()
                    .filter_map(|f| f.origin.as_ref().map(|o| o.memory.as_str()))
                    .collect();
                let used = members.iter().any(|n| by_n[n].uses > 0);
                semantic >= 1 || episodic.len() >= 3 || (memories.len() >= 2 && used)
            })
            .map(|members| Group { members })
            .collect();
        self.record_verdicts(agent, day, judged, &new_verdicts)?;
        let pairs = json!({"pairs_judged": judged, "pairs_remembered": remembered, "pairs_deferred": deferred});
        if groups.is_empty() {
            return Ok(json!({"distilled": [], "joined": [], "pairs": pairs, "pairs_judged": judged}));
        }
        // Apply under the agent's lock, from what the store holds now.
        let lock = self.agent_lock(agent);
        let _held = lock.lock().unwrap_or_else(|e| e.into_inner());
        let mut distilled = Vec::new();
        let mut joined = Vec::new();
        self.store.write(|w| {
            distilled.clear();
            joined.clear();
            let mut rec = agent_record(&*w, agent)?;
            for g in &groups {
                let members: Vec<ScopeFact> = g
                    .members
                    .iter()
                    .filter_map(|n| Read::get::<ScopeFact>(&*w, Table::ScopeFacts, &keys::seq(agent, *n)).transpose())
                    .collect::<Result<_, _>>()?;
                if members.len() != g.members.len() || members.iter().any(|m| !m.is_active()) {
                    continue; // changed since judged: the next consolidation sees it
                }
                let semantic: Vec<&ScopeFact> = members.iter().filter(|m| m.tier == Tier::Semantic).collect();
                let target = if semantic.len() == 1 {
                    // Facts that agree with one semantic fact join it as sources.
                    let mut s = semantic[0].clone();
                    for m in members.iter().filter(|m| m.tier == Tier::Episodic) {
                        s.sources.push(m.n);
                        s.uses += m.uses;
                        s.mentions += m.mentions;
                        s.confidence = (s.confidence.max(m.confidence) + AGREEMENT).min(1.0);
                        s.importance = s.importance.max(m.importance);
                        joined.push(m.n);
                    }
                    put_fact(w, agent, &s)?;
                    s.n
                } else {
                    let n = rec.next_fact;
                    rec.next_fact += 1;
                    put_fact(w, agent, &distil(n, &members, now))?;
                    distilled.push(json!({"id": n, "sources": g.members}));
                    n
                };
                for m in members.into_iter().filter(|m| m.n != target) {
                    put_fact(
                        w,
                        agent,
                        &ScopeFact {
                            status: Status::Replaced { by: target, at: now },
                            ..m
                        },
                    )?;
                }
            }
            w.put(Table::Agents, &keys::memory(agent), &rec)?;
            let items: Vec<u64> = distilled
                .iter()
                .filter_map(|d| d["id"].as_u64())
                .chain(joined.iter().copied())
                .collect();
            if !items.is_empty() {
                audit(
                    w,
                    agent,
                    &AuditEntry {
                        at: now,
                        action: "consolidate".into(),
                        memory: None,
                        user: owner.map(str::to_owned),
                        items,
                        detail: json!({"distilled": distilled, "joined": joined}),
                    },
                )?;
            }
            Ok(())
        })?;
        Ok(json!({"distilled": distilled, "joined": joined, "pairs": pairs, "pairs_judged": judged}))
    }

    /// Keeps the verdicts just judged and counts the calls against the agent's day.
    fn record_verdicts(
        &self,
        agent: &str,
        day: i64,
        calls: usize,
        verdicts: &[(Vec<u8>, bool)],
    ) -> Result<(), EngineError> {
        if calls == 0 && verdicts.is_empty() {
            return Ok(());
        }
        let lock = self.agent_lock(agent);
        let _held = lock.lock().unwrap_or_else(|e| e.into_inner());
        self.store.write(|w| {
            for (k, r) in verdicts {
                w.put(Table::Verdicts, k, r)?;
            }
            let mut rec = agent_record(&*w, agent)?;
            if rec.judge_day != day {
                rec.judge_day = day;
                rec.judge_calls = 0;
            }
            rec.judge_calls += calls as u64;
            w.put(Table::Agents, &keys::memory(agent), &rec)
        })?;
        Ok(())
    }
}

/// Where the verdict on "`newer` restates `older`" is kept: the agent, then a digest of both
/// texts (so a corrected text is asked again, and no text is stored twice).
fn verdict_key(agent: &str, newer: &str, older: &str) -> Vec<u8> {
    use sha2::{Digest, Sha256};
    let digest = Sha256::new()
        .chain_update(newer.as_bytes())
        .chain_update([0u8])
        .chain_update(older.as_bytes())
        .finalize();
    let hex: String = digest[..16].iter().map(|b| format!("{b:02x}")).collect();
    keys::name(agent, &hex)
}

/// The semantic fact of a group: its most central member's words, every member a source.
fn distil(n: u64, members: &[ScopeFact], now: f64) -> ScopeFact {
    let dim = members[0].v.len();
    let mut mean = vec![0f32; dim];
    for m in members {
        for (x, y) in mean.iter_mut().zip(&m.v) {
            *x += y;
        }
    }
    let central = members
        .iter()
        .max_by(|a, b| {
            cosine(&a.v, &mean)
                .total_cmp(&cosine(&b.v, &mean))
                .then(a.at.total_cmp(&b.at))
        })
        .expect("a group has members");
    let mut kinds: BTreeMap<Kind, usize> = BTreeMap::new();
    for m in members {
        *kinds.entry(m.kind).or_default() += 1;
    }
    let kind = kinds
        .into_iter()
        .max_by_key(|(k, c)| (*c, *k == central.kind))
        .map_or(central.kind, |(k, _)| k);
    ScopeFact {
        n,
        tier: Tier::Semantic,
        kind,
        domain: central.domain,
        text: central.text.clone(),
        subject: central.subject.clone(),
        object: central.object.clone(),
        owner: central.owner.clone(),
        origin: None,
        sources: members.iter().map(|m| m.n).collect(),
        at: now,
        valid_from: members.iter().filter_map(|m| m.valid_from).reduce(f64::min),
        valid_to: None,
        // Each agreeing source beyond the first makes it surer.
        confidence: (members.iter().map(|m| m.confidence).fold(0.0, f32::max) + AGREEMENT * (members.len() - 1) as f32)
            .min(1.0),
        mentions: members.iter().map(|m| m.mentions).sum(),
        uses: members.iter().map(|m| m.uses).sum(),
        last_used: members.iter().filter_map(|m| m.last_used).reduce(f64::max),
        importance: members.iter().map(|m| m.importance).fold(0.0, f32::max),
        status: Status::Active,
        model: central.model.clone(),
        v: central.v.clone(),
    }
}
