//! The sweep: rule-based, no model calls, per agent under its policy. In order it
//! 1. deletes expired working notes (there is no working tier yet: nothing to do);
//! 2. archives episodic facts that faded past the retention (unless the policy keeps unused
//!    facts). Fading is a score, not an age: a fact is archived once its importance now (its
//!    decay score, `decay`: freshness on its domain's schedule, access, confidence, and its
//!    owner's learned weights) is below that of the plainest fact (general, never used, prior
//!    weight) at the end of the retention. So the policy's retention holds exactly for plain
//!    unused facts; used, confirmed, emotional or educational facts, and classes this user's
//!    signals raised, last longer; classes they lowered, less long;
//! 3. sets each active fact's stored importance to its decay score now;
//! 4. promotes an episodic fact used more than 3 times, with confidence above 0.8, older than
//!    7 days, into a durable semantic fact (its source replaced by it; semantic facts never
//!    fade out);
//! 5. archives the lowest-ranked facts of a tier over its cap (rank: importance, then uses,
//!    then the oldest);
//! 6. purges facts archived longer than the policy's archive window;
//! 7. purges anything older than the organisation's retention.
//!
//! Until the agent's sweep is switched to live it only reports: the plan is returned and
//! audited, and nothing else changes.

use serde_json::{json, Value};

use super::records::{AuditEntry, ScopeFact, Status, Tier};
use super::{agent_record, audit, put_fact, scope_facts};
use crate::engine::{Engine, EngineError};
use crate::store::{keys, Table};

const DAY: f64 = 86_400.0;
/// Importance changes smaller than this are not written.
const IMPORTANCE_STEP: f32 = 0.01;
/// Promotion: used more than this many times, surer than this, older than this many days.
const PROMOTE_USES: u32 = 3;
const PROMOTE_CONFIDENCE: f32 = 0.8;
const PROMOTE_DAYS: f64 = 7.0;

/// What one sweep does to one fact.
#[derive(Debug, Clone, PartialEq)]
enum Action {
    Archive(&'static str),
    Importance(f32),
    Promote,
    Purge(&'static str),
}

impl Engine {
    /// Sweeps the agent's scope at `now`: the plan, applied when the agent's sweep is live.
    pub fn sweep(&self, agent: &str, now: f64) -> Result<Value, EngineError> {
        let lock = self.agent_lock(agent);
        let _held = lock.lock().unwrap_or_else(|e| e.into_inner());
        let (mut rec, facts) = self
            .store
            .read(|r| Ok((agent_record(r, agent)?, scope_facts(r, agent)?)))?;
        let policy = self.policy_of(&rec);
        let retention = policy.retention_secs(rec.retention_days, self.config.scopes.retention_days);
        let mut plan: Vec<(u64, Action)> = Vec::new();
        if policy.captures() {
            let faded = faded_below(&rec, &self.schedule_of(&rec), retention, now);
            for f in &facts {
                let age = now - f.at;
                match f.status {
                    Status::Active => {
                        let importance = self.importance(&rec, f, now);
                        if f.tier == Tier::Episodic
                            && policy.archive_unused
                            && importance < faded * rec.archive_scale(f.owner.as_deref())
                        {
                            plan.push((f.n, Action::Archive("faded past retention")));
                        } else if f.tier == Tier::Episodic
                            && f.uses > PROMOTE_USES
                            && f.confidence > PROMOTE_CONFIDENCE
                            && age > PROMOTE_DAYS * DAY
                        {
                            plan.push((f.n, Action::Promote));
                        } else if (importance - f.importance).abs() >= IMPORTANCE_STEP {
                            plan.push((f.n, Action::Importance(importance)));
                        }
                    }
                    Status::Archived { at, .. } if now - at > policy.archive_days * DAY => {
                        plan.push((f.n, Action::Purge("archived past the archive window")));
                    }
                    _ => {}
                }
            }
            for tier in [Tier::Episodic, Tier::Semantic] {
                let Some(cap) = policy.cap(tier) else { continue };
                let archived: Vec<u64> = plan
                    .iter()
                    .filter(|(_, a)| matches!(a, Action::Archive(_)))
                    .map(|(n, _)| *n)
                    .collect();
                let mut live: Vec<&ScopeFact> = facts
                    .iter()
                    .filter(|f| f.tier == tier && f.is_active() && !archived.contains(&f.n))
                    .collect();
                if live.len() <= cap {
                    continue;
                }
                // Lowest first: importance now, then uses, then the oldest.
                let rank = |f: &ScopeFact| self.importance(&rec, f, now);
                live.sort_by(|a, b| {
                    rank(a)
                        .total_cmp(&rank(b))
                        .then(a.uses.cmp(&b.uses))
                        .then(a.at.total_cmp(&b.at))
                });
                let over = live.len() - cap;
                for f in &live[..over] {
                    plan.retain(|(n, _)| *n != f.n);
                    plan.push((f.n, Action::Archive("over the tier's cap")));
                }
            }
        }
        if let Some(days) = self.config.scopes.retention_days {
            for f in facts.iter().filter(|f| now - f.at > days * DAY) {
                plan.retain(|(n, _)| *n != f.n);
                plan.push((f.n, Action::Purge("past the organisation's retention")));
            }
        }
        plan.sort_by_key(|(n, _)| *n);
        let live = rec.sweep_live;
        let report: Vec<Value> = plan
            .iter()
            .map(|(n, a)| match a {
                Action::Archive(why) => json!({"id": n, "action": "archive", "why": why}),
                Action::Importance(to) => json!({"id": n, "action": "importance", "to": to}),
                Action::Promote => {
                    json!({"id": n, "action": "promote", "why": "used often, confirmed, and older than a week"})
                }
                Action::Purge(why) => json!({"id": n, "action": "purge", "why": why}),
            })
            .collect();
        rec.last_sweep = Some(now);
        let mut promoted = Vec::new();
        let mut expired_notes = 0;
        let next_fact = rec.next_fact;
        self.store.write(|w| {
            promoted.clear();
            rec.next_fact = next_fact;
            expired_notes = super::hot::drop_expired_notes(w, agent, now, live)?;
            if live {
                for (n, action) in &plan {
                    let key = keys::seq(agent, *n);
                    let Some(f) = crate::store::Read::get::<ScopeFact>(&*w, Table::ScopeFacts, &key)? else { continue };
                    match action {
                        Action::Archive(why) => put_fact(w, agent, &ScopeFact {
                            status: Status::Archived { at: now, reason: (*why).into() },
                            ..f
                        })?,
                        Action::Importance(to) => put_fact(w, agent, &ScopeFact { importance: *to, ..f })?,
                        Action::Promote => {
                            let n = rec.next_fact;
                            rec.next_fact += 1;
                            put_fact(w, agent, &ScopeFact {
                                n,
                                tier: Tier::Semantic,
                                origin: None,
                                sources: vec![f.n],
                                at: now,
                                status: Status::Active,
                                ..f.clone()
                            })?;
                            put_fact(w, agent, &ScopeFact { status: Status::Replaced { by: n, at: now }, ..f })?;
                            promoted.push(json!({"from": f.n, "to": n}));
                        }
                        Action::Purge(_) => {
                            super::delete_fact(w, agent, *n)?;
                        }
                    }
                }
            }
            w.put(Table::Agents, &keys::memory(agent), &rec)?;
            audit(w, agent, &AuditEntry {
                at: now,
                action: "sweep".into(),
                memory: None,
                user: None,
                items: plan.iter().map(|(n, _)| *n).collect(),
                detail: json!({"mode": if live { "live" } else { "report" }, "plan": report, "promoted": promoted, "expired_working_notes": expired_notes}),
            })
        })?;
        Ok(json!({
            "agent": agent, "mode": if live { "live" } else { "report" }, "policy": policy.name, "plan": report,
            "promoted": promoted, "expired_working_notes": expired_notes,
        }))
    }

    /// Sweeps every agent whose last sweep is older than `sweep_hours` (the daemon's timer).
    pub fn sweep_due(&self, now: f64) -> Result<usize, EngineError> {
        let agents: Vec<String> = self.store.read(|r| {
            let mut out = Vec::new();
            r.visit(Table::Agents, b"", b"", |_, a: super::records::AgentRecord| {
                if a.last_sweep
                    .is_none_or(|t| now - t >= self.config.scopes.sweep_hours * 3600.0)
                {
                    out.push(a.agent);
                }
                Ok(true)
            })?;
            Ok(out)
        })?;
        for a in &agents {
            self.sweep(a, now)?;
        }
        Ok(agents.len())
    }
}

/// The importance of the plainest fact (general, never used, handed over at the usual
/// confidence, the prior weight) at the end of the retention: below it, a fact has faded.
fn faded_below(rec: &super::records::AgentRecord, schedule: &super::decay::Schedule, retention: f64, now: f64) -> f32 {
    let plain = ScopeFact {
        n: 0,
        tier: Tier::Episodic,
        kind: super::records::Kind::Fact,
        domain: super::records::Domain::General,
        text: String::new(),
        subject: String::new(),
        object: String::new(),
        owner: None,
        origin: None,
        sources: Vec::new(),
        at: now - retention,
        valid_from: None,
        valid_to: None,
        confidence: super::handoff::CONFIDENCE,
        mentions: 1,
        uses: 0,
        last_used: None,
        importance: 0.0,
        status: Status::Active,
        model: String::new(),
        v: Vec::new(),
    };
    super::decay::importance(&plain, now, schedule, &rec.keep_weights(), None)
}
