//! The sweep: rule-based, no model calls, per agent under its policy. In order it
//! 1. deletes expired working notes (there is no working tier yet: nothing to do);
//! 2. archives episodic facts older than the retention that were used fewer times than the
//!    policy requires (unless the policy keeps unused facts);
//! 3. lowers the importance of facts that are old (past half the retention) or never used
//!    (by a tenth, at most once per sweep interval, down to 0.1);
//! 4. archives the lowest-ranked facts of a tier over its cap (rank: importance, then uses,
//!    then recency);
//! 5. purges facts archived longer than the policy's archive window;
//! 6. purges anything older than the organisation's retention.
//!
//! Until the agent's sweep is switched to live it only reports: the plan is returned and
//! audited, and nothing else changes.

use serde_json::{json, Value};

use super::records::{AuditEntry, ScopeFact, Status, Tier};
use super::{agent_record, audit, put_fact, scope_facts};
use crate::engine::{Engine, EngineError};
use crate::store::{keys, Table};

const DAY: f64 = 86_400.0;
const IMPORTANCE_STEP: f32 = 0.1;
const IMPORTANCE_FLOOR: f32 = 0.1;

/// What one sweep does to one fact.
#[derive(Debug, Clone, PartialEq)]
enum Action {
    Archive(&'static str),
    Lower(f32),
    Purge(&'static str),
}

impl Engine {
    /// Sweeps the agent's scope at `now`: the plan, applied when the agent's sweep is live.
    pub fn sweep(&self, agent: &str, now: f64) -> Result<Value, EngineError> {
        let lock = self.agent_lock(agent);
        let _held = lock.lock().unwrap_or_else(|e| e.into_inner());
        let (mut rec, facts) = self.store.read(|r| Ok((agent_record(r, agent)?, scope_facts(r, agent)?)))?;
        let policy = self.policy_of(&rec);
        let retention = policy.retention_secs(rec.retention_days, self.config.scopes.retention_days);
        let mut plan: Vec<(u64, Action)> = Vec::new();
        if policy.captures() {
            let first_sweep_since = rec.last_sweep.unwrap_or(f64::NEG_INFINITY);
            for f in &facts {
                let age = now - f.at;
                match f.status {
                    Status::Active => {
                        if f.tier == Tier::Episodic && policy.archive_unused && age > retention && f.uses < policy.min_uses {
                            plan.push((f.n, Action::Archive("past retention and unused")));
                        } else if (age > retention / 2.0 || f.uses == 0)
                            && f.importance > IMPORTANCE_FLOOR
                            && now - first_sweep_since >= self.config.scopes.sweep_hours * 3600.0 * 0.5
                        {
                            plan.push((f.n, Action::Lower((f.importance - IMPORTANCE_STEP).max(IMPORTANCE_FLOOR))));
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
                let archived: Vec<u64> = plan.iter().filter(|(_, a)| matches!(a, Action::Archive(_))).map(|(n, _)| *n).collect();
                let mut live: Vec<&ScopeFact> = facts
                    .iter()
                    .filter(|f| f.tier == tier && f.is_active() && !archived.contains(&f.n))
                    .collect();
                if live.len() <= cap {
                    continue;
                }
                // Lowest first: importance, then uses, then the oldest.
                live.sort_by(|a, b| a.importance.total_cmp(&b.importance).then(a.uses.cmp(&b.uses)).then(a.at.total_cmp(&b.at)));
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
                Action::Lower(to) => json!({"id": n, "action": "lower_importance", "to": to}),
                Action::Purge(why) => json!({"id": n, "action": "purge", "why": why}),
            })
            .collect();
        rec.last_sweep = Some(now);
        self.store.write(|w| {
            if live {
                for (n, action) in &plan {
                    let key = keys::seq(agent, *n);
                    let Some(f) = crate::store::Read::get::<ScopeFact>(&*w, Table::ScopeFacts, &key)? else { continue };
                    match action {
                        Action::Archive(why) => put_fact(w, agent, &ScopeFact {
                            status: Status::Archived { at: now, reason: (*why).into() },
                            ..f
                        })?,
                        Action::Lower(to) => put_fact(w, agent, &ScopeFact { importance: *to, ..f })?,
                        Action::Purge(_) => {
                            w.delete(Table::ScopeFacts, &key)?;
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
                detail: json!({"mode": if live { "live" } else { "report" }, "plan": report}),
            })
        })?;
        Ok(json!({"agent": agent, "mode": if live { "live" } else { "report" }, "policy": policy.name, "plan": report}))
    }

    /// Sweeps every agent whose last sweep is older than `sweep_hours` (the daemon's timer).
    pub fn sweep_due(&self, now: f64) -> Result<usize, EngineError> {
        let agents: Vec<String> = self.store.read(|r| {
            let mut out = Vec::new();
            r.visit(Table::Agents, b"", b"", |_, a: super::records::AgentRecord| {
                if a.last_sweep.is_none_or(|t| now - t >= self.config.scopes.sweep_hours * 3600.0) {
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
