//! The scope's ops: ending a conversation, an agent's settings, listing, searching, observing,
//! deleting and restoring scope facts, consolidating now, and the audit log. Every op is
//! scoped: a caller names its agent (qualified by its namespace in dispatch) and its user, and
//! sees only its own private facts and shared ones; anything else is `not_found`.

use std::collections::BTreeSet;

use serde_json::{json, Value};

use super::policy::PolicyName;
use super::records::{AgentRecord, AuditEntry, ScopeFact, Sharing, Status, Tier};
use super::{agent_record, audit, put_fact, scope_facts, visible, visible_owner};
use crate::engine::records::JobKind;
use crate::engine::{Engine, EngineError};
use crate::models::CallCtx;
use crate::store::{keys, StoreError, Table, Writer};

/// Changes to an agent's settings (absent fields stay).
#[derive(Debug, Default, Clone)]
pub struct AgentChanges {
    pub policy: Option<PolicyName>,
    pub sharing: Option<Sharing>,
    pub retention_days: Option<f64>,
    pub sweep_live: Option<bool>,
    pub schedule: Option<super::decay::Schedule>,
    pub keep_weights: Option<super::decay::KeepWeights>,
}

/// What `update_memory` changes in a fact (absent fields stay).
#[derive(Debug, Default, Clone, Copy)]
pub struct Correction<'a> {
    pub text: Option<&'a str>,
    pub kind: Option<super::records::Kind>,
    pub importance: Option<f32>,
}

/// Which scope facts `list_memories` returns.
#[derive(Debug, Default, Clone)]
pub struct ListFilter {
    pub tier: Option<String>,
    pub kind: Option<String>,
    /// active (default), archived, replaced or all.
    pub status: Option<String>,
    pub limit: Option<usize>,
    /// What was believed at this time instead (status is then ignored).
    pub as_of: Option<f64>,
}

impl Engine {
    /// `end`: the conversation is over; its facts go to its agent's scope (in the lane).
    pub fn end(&self, memory: &str, now: Option<f64>) -> Result<Value, EngineError> {
        let now = super::super::now_or(now)?;
        let lock = self.lock(memory);
        let _held = lock.lock().unwrap_or_else(|e| e.into_inner());
        let mut st = self.take_state(memory, now)?;
        if !st.existed {
            return Err(EngineError::NotFound(format!("no memory {memory:?}")));
        }
        let Some(agent) = st.memory.agent.clone() else {
            return Err(EngineError::InvalidArgument(format!(
                "memory {memory:?} names no agent: only a memory decorated with `agent` has a scope to hand its facts to"
            )));
        };
        let new_facts = st.memory.next_fact.saturating_sub(st.memory.handed_off);
        st.push_job(JobKind::Handoff, now);
        self.save_and_keep(st)?;
        self.notify_lane(memory);
        Ok(json!({"memory": memory, "agent": agent, "queued": true, "facts": new_facts}))
    }

    /// Queues the handoff of every memory with an agent, new facts, and no turn for
    /// `quiet_minutes` (the daemon's timer); returns how many.
    pub fn queue_quiet_handoffs(&self, now: f64) -> Result<usize, EngineError> {
        let quiet = self.config.scopes.quiet_minutes * 60.0;
        let due: Vec<String> = self.store.read(|r| {
            let mut out = Vec::new();
            r.visit(
                Table::Memories,
                b"",
                b"",
                |_, m: crate::engine::records::MemoryRecord| {
                    if m.agent.is_some()
                        && m.handed_off < m.next_fact
                        && now - m.updated_at >= quiet
                        && !m.queued_kinds.iter().any(|k| k == "handoff")
                    {
                        out.push(m.id);
                    }
                    Ok(true)
                },
            )?;
            Ok(out)
        })?;
        for m in &due {
            self.end(m, Some(now))?;
        }
        Ok(due.len())
    }

    /// `agent`: an agent's settings, changed as asked (audited when changed).
    pub fn agent_settings(&self, agent: &str, changes: AgentChanges, now: Option<f64>) -> Result<Value, EngineError> {
        let now = super::super::now_or(now)?;
        let lock = self.agent_lock(agent);
        let _held = lock.lock().unwrap_or_else(|e| e.into_inner());
        let mut rec = self.store.read(|r| agent_record(r, agent))?;
        let before = rec.clone();
        if let Some(p) = changes.policy {
            rec.policy = Some(p);
        }
        if let Some(s) = changes.sharing {
            rec.sharing = s;
        }
        if let Some(d) = changes.retention_days {
            if !d.is_finite() || d <= 0.0 {
                return Err(EngineError::InvalidArgument(format!(
                    "retention_days must be a positive number of days, got {d}"
                )));
            }
            rec.retention_days = Some(d);
        }
        if let Some(live) = changes.sweep_live {
            rec.sweep_live = live;
        }
        if let Some(sch) = changes.schedule {
            if [sch.general, sch.emotional, sch.educational]
                .iter()
                .any(|d| !d.is_finite() || *d <= 0.0)
            {
                return Err(EngineError::InvalidArgument(
                    "decay_days must be positive numbers of days".into(),
                ));
            }
            rec.schedule = Some(sch);
        }
        if let Some(k) = changes.keep_weights {
            let all = [k.age, k.access, k.confidence];
            if all.iter().any(|w| !w.is_finite() || *w < 0.0) || all.iter().sum::<f32>() <= 0.0 {
                return Err(EngineError::InvalidArgument(
                    "keep_weights must be non-negative, not all zero".into(),
                ));
            }
            rec.keep_weights = Some(k);
        }
        if rec != before {
            self.store.write(|w| {
                w.put(Table::Agents, &keys::memory(agent), &rec)?;
                audit(w, agent, &AuditEntry {
                    at: now,
                    action: "settings".into(),
                    memory: None,
                    user: None,
                    items: Vec::new(),
                    detail: json!({"policy": rec.policy, "sharing": rec.sharing, "retention_days": rec.retention_days, "sweep_live": rec.sweep_live}),
                })
            })?;
        }
        Ok(self.agent_view(&rec))
    }

    fn agent_view(&self, rec: &AgentRecord) -> Value {
        let policy = self.policy_of(rec);
        json!({
            "agent": rec.agent,
            "policy": policy,
            "policy_set": rec.policy,
            "sharing": rec.sharing,
            "retention_days": rec.retention_days,
            "sweep": if rec.sweep_live { "live" } else { "report" },
            "last_sweep": rec.last_sweep,
            "facts": rec.next_fact,
            "decay_days": self.schedule_of(rec),
            "keep_weights": rec.keep_weights(),
            "learned_weights": rec.learned,
            "archive_scales": rec.archive_scale,
        })
    }

    /// `list_memories`: the caller's visible scope facts, filtered.
    pub fn list_scope(
        &self,
        agent: &str,
        user: Option<&str>,
        filter: ListFilter,
        now: Option<f64>,
    ) -> Result<Value, EngineError> {
        let now = super::super::now_or(now)?;
        let (rec, facts) = self
            .store
            .read(|r| Ok((agent_record(r, agent)?, scope_facts(r, agent)?)))?;
        let status = filter.status.as_deref().unwrap_or("active");
        if !["active", "archived", "replaced", "all"].contains(&status) {
            return Err(EngineError::InvalidArgument(format!(
                "status must be active, archived, replaced or all, got {status:?}"
            )));
        }
        let named = |v: Value| v.as_str().map(str::to_owned);
        let items: Vec<Value> = facts
            .iter()
            .filter(|f| visible(f, rec.sharing, user))
            .filter(|f| match filter.as_of {
                Some(t) => f.believed_at(t),
                None => matches!(
                    (status, &f.status),
                    ("all", _)
                        | ("active", Status::Active)
                        | ("archived", Status::Archived { .. })
                        | ("replaced", Status::Replaced { .. })
                ),
            })
            .filter(|f| {
                filter
                    .tier
                    .as_deref()
                    .is_none_or(|t| named(json!(f.tier)).as_deref() == Some(t))
            })
            .filter(|f| {
                filter
                    .kind
                    .as_deref()
                    .is_none_or(|k| named(json!(f.kind)).as_deref() == Some(k))
            })
            .take(filter.limit.unwrap_or(usize::MAX))
            .map(|f| {
                let mut v = f.view(now);
                v["importance_now"] = json!(self.importance(&rec, f, now));
                v
            })
            .collect();
        Ok(json!({"agent": agent, "user": user, "as_of": filter.as_of, "memories": items}))
    }

    /// `search_memories`: the caller's active visible facts ranked by meaning (words when
    /// there is no embedder); counted as used, as the seed's `recall` tool counts; audited.
    pub fn search_scope(
        &self,
        agent: &str,
        user: Option<&str>,
        query: &str,
        limit: usize,
        as_of: Option<f64>,
        now: Option<f64>,
    ) -> Result<Value, EngineError> {
        let now = super::super::now_or(now)?;
        if query.trim().is_empty() {
            return Err(EngineError::InvalidArgument("query must not be empty".into()));
        }
        let vector = match &self.models {
            Some(m) => m
                .request_embedder
                .embed(&CallCtx { memory: agent }, &[query])
                .ok()
                .and_then(|mut v| v.pop()),
            None => None,
        };
        self.search_scope_with(agent, user, query, vector, limit, as_of, now)
    }

    /// The search, with the query's vector already made (or none: by words).
    #[allow(clippy::too_many_arguments)]
    pub(crate) fn search_scope_with(
        &self,
        agent: &str,
        user: Option<&str>,
        query: &str,
        vector: Option<Vec<f32>>,
        limit: usize,
        as_of: Option<f64>,
        now: f64,
    ) -> Result<Value, EngineError> {
        let lock = self.agent_lock(agent);
        let _held = lock.lock().unwrap_or_else(|e| e.into_inner());
        let (rec, facts) = self
            .store
            .read(|r| Ok((agent_record(r, agent)?, scope_facts(r, agent)?)))?;
        let words = super::block::word_set(query);
        let mut hits: Vec<(&ScopeFact, f32)> = facts
            .iter()
            .filter(|f| as_of.map_or(f.is_active(), |t| f.believed_at(t)) && visible(f, rec.sharing, user))
            .map(|f| (f, super::block::relevance(vector.as_deref(), &words, f)))
            .filter(|(_, s)| *s >= self.config.scopes.min_relevance)
            .collect();
        hits.sort_by(|a, b| b.1.total_cmp(&a.1).then(a.0.n.cmp(&b.0.n)));
        hits.truncate(limit.max(1));
        let ids: Vec<u64> = hits.iter().map(|(f, _)| f.n).collect();
        let out: Vec<Value> = hits
            .iter()
            .map(|(f, s)| {
                let mut v = f.view(now);
                v["score"] = json!(s);
                v["uses"] = json!(f.uses + u32::from(as_of.is_none()));
                v
            })
            .collect();
        // A look back in time is not a use; a search now is (it counts in each hit's access,
        // but teaches no class: being found is not yet having mattered).
        let counted = as_of.is_none();
        self.store.write(|w| {
            if counted {
                for (f, _) in &hits {
                    put_fact(
                        w,
                        agent,
                        &ScopeFact {
                            uses: f.uses + 1,
                            last_used: Some(now),
                            ..(*f).clone()
                        },
                    )?;
                }
            }
            audit(
                w,
                agent,
                &AuditEntry {
                    at: now,
                    action: "search".into(),
                    memory: None,
                    user: user.map(str::to_owned),
                    items: ids.clone(),
                    detail: json!({"query": query, "by_meaning": vector.is_some(), "as_of": as_of}),
                },
            )
        })?;
        Ok(json!({"agent": agent, "memories": out}))
    }

    /// `observe_memory`: one visible fact, its sources and what replaced it.
    pub fn observe_scope(
        &self,
        agent: &str,
        user: Option<&str>,
        id: u64,
        now: Option<f64>,
    ) -> Result<Value, EngineError> {
        let now = super::super::now_or(now)?;
        let (rec, facts) = self
            .store
            .read(|r| Ok((agent_record(r, agent)?, scope_facts(r, agent)?)))?;
        let f = facts
            .iter()
            .find(|f| f.n == id && visible(f, rec.sharing, user))
            .ok_or_else(|| not_found(agent, id))?;
        let mut v = f.view(now);
        v["importance_now"] = json!(self.importance(&rec, f, now));
        v["decay"] = json!({
            "class": super::decay::class(f),
            "freshness": super::decay::freshness(f, now, &self.schedule_of(&rec)),
            "keep": super::decay::keep(f, now, &self.schedule_of(&rec), &rec.keep_weights()),
            "salience": super::decay::salience(f, rec.weights(f.owner.as_deref())),
            "schedule_days": self.schedule_of(&rec).days(f.domain),
            "learned_weights": rec.weights(f.owner.as_deref()),
            "archive_scale": rec.archive_scale(f.owner.as_deref()),
        });
        v["source_facts"] = facts
            .iter()
            .filter(|s| f.sources.contains(&s.n))
            .map(|s| s.view(now))
            .collect();
        if let Status::Replaced { by, .. } = f.status {
            v["replaced_by"] = facts
                .iter()
                .find(|s| s.n == by)
                .map(|s| s.view(now))
                .unwrap_or(Value::Null);
        }
        Ok(v)
    }

    /// `delete_memory`: deletes a visible fact and every fact distilled from it; facts those
    /// had replaced are active again. Returns what it removed; audited.
    pub fn delete_scope_fact(
        &self,
        agent: &str,
        user: Option<&str>,
        id: u64,
        now: Option<f64>,
    ) -> Result<Value, EngineError> {
        let now = super::super::now_or(now)?;
        let lock = self.agent_lock(agent);
        let _held = lock.lock().unwrap_or_else(|e| e.into_inner());
        let removed = self.store.write(|w| {
            let rec = agent_record(&*w, agent)?;
            let facts = scope_facts(&*w, agent)?;
            let Some(asked) = facts.iter().find(|f| f.n == id && visible(f, rec.sharing, user)) else {
                return Ok(None);
            };
            // Forgotten on purpose: its class learns it mattered less to this user; and when the
            // sweep had kept it past the retention, this user keeps facts shorter.
            let mut rec = rec.clone();
            rec.learn(asked, false);
            let retention = self
                .policy_of(&rec)
                .retention_secs(rec.retention_days, self.config.scopes.retention_days);
            if asked.is_active() && asked.tier == Tier::Episodic && now - asked.at > retention {
                rec.learn_threshold(asked.owner.as_deref(), false);
            }
            w.put(Table::Agents, &keys::memory(agent), &rec)?;
            let removed = delete_with_derived(w, agent, &facts, [id].into())?;
            audit(
                w,
                agent,
                &AuditEntry {
                    at: now,
                    action: "forget".into(),
                    memory: None,
                    user: user.map(str::to_owned),
                    items: removed.clone(),
                    detail: json!({"asked": id}),
                },
            )?;
            Ok(Some(removed))
        })?;
        let removed = removed.ok_or_else(|| not_found(agent, id))?;
        Ok(json!({"agent": agent, "removed": removed}))
    }

    /// `restore`: an archived visible fact back in use; audited.
    pub fn restore_scope_fact(
        &self,
        agent: &str,
        user: Option<&str>,
        id: u64,
        now: Option<f64>,
    ) -> Result<Value, EngineError> {
        let now = super::super::now_or(now)?;
        let lock = self.agent_lock(agent);
        let _held = lock.lock().unwrap_or_else(|e| e.into_inner());
        let (rec, fact) = self.store.read(|r| {
            Ok((
                agent_record(r, agent)?,
                r.get::<ScopeFact>(Table::ScopeFacts, &keys::seq(agent, id))?,
            ))
        })?;
        let f = fact
            .filter(|f| visible(f, rec.sharing, user))
            .ok_or_else(|| not_found(agent, id))?;
        if f.archived_at().is_none() {
            return Err(EngineError::Conflict(format!(
                "memory {id} of agent {agent:?} is not archived"
            )));
        }
        let restored = ScopeFact {
            status: Status::Active,
            ..f
        };
        self.store.write(|w| {
            // Wanted back: this user keeps facts longer than the sweep thought.
            let mut rec = agent_record(&*w, agent)?;
            rec.learn_threshold(restored.owner.as_deref(), true);
            w.put(Table::Agents, &keys::memory(agent), &rec)?;
            put_fact(w, agent, &restored)?;
            audit(
                w,
                agent,
                &AuditEntry {
                    at: now,
                    action: "restore".into(),
                    memory: None,
                    user: user.map(str::to_owned),
                    items: vec![id],
                    detail: Value::Null,
                },
            )
        })?;
        Ok(restored.view(now))
    }

    /// `consolidate`: distils the caller's facts now (and the agent's ownerless ones).
    pub fn consolidate(&self, agent: &str, user: Option<&str>, now: Option<f64>) -> Result<Value, EngineError> {
        let now = super::super::now_or(now)?;
        let mut out = json!({"agent": agent, "owners": {}});
        let mut owners = vec![None];
        if user.is_some() {
            owners.push(user);
        }
        for owner in owners {
            let mut done = self.consolidate_owner(agent, owner, now)?;
            done["procedures"] = self.find_procedures(agent, owner, now)?;
            out["owners"][owner.unwrap_or("")] = done;
        }
        Ok(out)
    }

    /// `audit`: the agent's log, oldest first; a caller naming a user sees entries about that
    /// user and about nobody in particular.
    pub fn audit_log(
        &self,
        agent: &str,
        user: Option<&str>,
        since: Option<f64>,
        limit: Option<usize>,
    ) -> Result<Value, EngineError> {
        let since = since.unwrap_or(0.0);
        let entries: Vec<AuditEntry> = self.store.read(|r| r.scan(Table::Audit, &keys::memory_prefix(agent)))?;
        let entries: Vec<&AuditEntry> = entries
            .iter()
            .filter(|e| e.at >= since)
            .filter(|e| user.is_none() || e.user.is_none() || e.user.as_deref() == user)
            .collect();
        let skip = entries.len().saturating_sub(limit.unwrap_or(usize::MAX));
        Ok(json!({"agent": agent, "entries": entries[skip..]}))
    }

    /// `memories_used`: the scope facts shown to one conversation (its cross-memory blocks),
    /// each as it stands now (`deleted` when it is gone), with the user message it preceded:
    /// what `delete_memory` can forget on the spot.
    pub fn memories_used(&self, memory: &str) -> Result<Value, EngineError> {
        let st = self.store.read(|r| crate::engine::state::State::load(r, memory, 0.0))?;
        if !st.existed {
            return Err(EngineError::NotFound(format!("no memory {memory:?}")));
        }
        let Some(agent) = st.memory.agent.clone() else {
            return Ok(json!({"memory": memory, "agent": null, "used": []}));
        };
        let facts = self.store.read(|r| scope_facts(r, &agent))?;
        let now = st.memory.updated_at;
        // Every block of the conversation (a loaded state holds only the recent ones).
        let blocks = self.store.read(|r| crate::engine::state::all_recalls(r, memory))?;
        let used: Vec<Value> = blocks
            .iter()
            .filter_map(|b| b.across.as_ref().map(|a| (b.seq, a)))
            .flat_map(|(seq, a)| a.items.iter().map(move |i| (seq, i)))
            .map(|(seq, i)| {
                let mut v = facts
                    .iter()
                    .find(|f| f.n == i.n)
                    .map_or_else(|| json!({"id": i.n, "status": {"state": "deleted"}}), |f| f.view(now));
                v["before_message"] = json!(seq);
                v["relevance"] = json!(i.relevance);
                v
            })
            .collect();
        Ok(json!({"memory": memory, "agent": agent, "user": st.memory.user, "used": used}))
    }

    /// `clear_memories`: deletes every visible fact (of one tier when asked) and what was
    /// distilled from them; audited.
    pub fn clear_scope(
        &self,
        agent: &str,
        user: Option<&str>,
        tier: Option<&str>,
        now: Option<f64>,
    ) -> Result<Value, EngineError> {
        let now = super::super::now_or(now)?;
        if let Some(t) = tier {
            if !["episodic", "semantic", "procedural"].contains(&t) {
                return Err(EngineError::InvalidArgument(format!(
                    "tier must be episodic, semantic or procedural, got {t:?}"
                )));
            }
        }
        let lock = self.agent_lock(agent);
        let _held = lock.lock().unwrap_or_else(|e| e.into_inner());
        let removed = self.store.write(|w| {
            let rec = agent_record(&*w, agent)?;
            let facts = scope_facts(&*w, agent)?;
            let doomed: BTreeSet<u64> = facts
                .iter()
                .filter(|f| visible(f, rec.sharing, user))
                .filter(|f| tier.is_none_or(|t| json!(f.tier) == json!(t)))
                .map(|f| f.n)
                .collect();
            // Cleared patterns are not found again: the routines they came from go too.
            if tier.is_none_or(|t| t == "procedural") {
                super::procedures::clear_routines(w, agent, |owner| visible_owner(owner, rec.sharing, user))?;
            }
            if doomed.is_empty() {
                return Ok(Vec::new());
            }
            let removed = delete_with_derived(w, agent, &facts, doomed)?;
            audit(
                w,
                agent,
                &AuditEntry {
                    at: now,
                    action: "forget".into(),
                    memory: None,
                    user: user.map(str::to_owned),
                    items: removed.clone(),
                    detail: json!({"cleared": tier.unwrap_or("all")}),
                },
            )?;
            Ok(removed)
        })?;
        Ok(json!({"agent": agent, "removed": removed}))
    }

    /// `update_memory`: corrects a visible fact's text, kind or importance (new text is
    /// embedded again); audited.
    pub fn update_scope_fact(
        &self,
        agent: &str,
        user: Option<&str>,
        id: u64,
        change: Correction<'_>,
        now: Option<f64>,
    ) -> Result<Value, EngineError> {
        let now = super::super::now_or(now)?;
        let Correction { text, kind, importance } = change;
        if let Some(t) = text {
            if t.trim().is_empty() || t.chars().count() > super::MAX_TEXT_CHARS {
                return Err(EngineError::InvalidArgument(format!(
                    "text must hold 1 to {} characters",
                    super::MAX_TEXT_CHARS
                )));
            }
        }
        if let Some(i) = importance {
            if !(0.0..=1.0).contains(&i) {
                return Err(EngineError::InvalidArgument(format!(
                    "importance must be within 0 and 1, got {i}"
                )));
            }
        }
        // Embedded before the lock: the model never runs under it.
        let vector = match (text, &self.models) {
            (Some(t), Some(m)) => Some((
                m.embedder.id().name,
                m.embedder
                    .embed(&CallCtx { memory: agent }, &[t])
                    .map_err(|e| EngineError::Index(format!("cannot embed the new text: {e}")))?
                    .pop()
                    .unwrap_or_default(),
            )),
            _ => None,
        };
        let lock = self.agent_lock(agent);
        let _held = lock.lock().unwrap_or_else(|e| e.into_inner());
        let (mut rec, fact) = self.store.read(|r| {
            Ok((
                agent_record(r, agent)?,
                r.get::<ScopeFact>(Table::ScopeFacts, &keys::seq(agent, id))?,
            ))
        })?;
        let mut f = fact
            .filter(|f| visible(f, rec.sharing, user))
            .ok_or_else(|| not_found(agent, id))?;
        // A person corrected it: it is sure now, and its class matters to them.
        f.confidence = 1.0;
        rec.learn(&f, true);
        if let Some(t) = text {
            f.text = t.to_owned();
            match vector {
                Some((model, v)) => {
                    f.model = model;
                    f.v = v;
                }
                None => {
                    f.model.clear();
                    f.v.clear();
                }
            }
        }
        if let Some(k) = kind {
            f.kind = k;
        }
        if let Some(i) = importance {
            f.importance = i;
        }
        self.store.write(|w| {
            put_fact(w, agent, &f)?;
            w.put(Table::Agents, &keys::memory(agent), &rec)?;
            audit(
                w,
                agent,
                &AuditEntry {
                    at: now,
                    action: "update".into(),
                    memory: None,
                    user: user.map(str::to_owned),
                    items: vec![id],
                    detail: json!({"text": text, "kind": kind, "importance": importance}),
                },
            )
        })?;
        Ok(f.view(now))
    }

    /// `doctor`: whether an agent's memory works, and what is wrong when it does not.
    pub fn doctor(&self, agent: &str, now: Option<f64>) -> Result<Value, EngineError> {
        let now = super::super::now_or(now)?;
        let (rec, facts) = self
            .store
            .read(|r| Ok((agent_record(r, agent)?, scope_facts(r, agent)?)))?;
        let policy = self.policy_of(&rec);
        let mut problems = Vec::new();
        let (embedder, judge) = match &self.models {
            None => {
                problems.push("no models: facts are neither embedded nor distilled".to_owned());
                (json!("none"), json!("none"))
            }
            Some(m) => {
                let ctx = CallCtx { memory: agent };
                let e = match m.embedder.embed(&ctx, &["ready?"]) {
                    Ok(_) => json!({"ok": true, "model": m.embedder.id().name}),
                    Err(err) => {
                        problems.push(format!("the embedder fails: {err}"));
                        json!({"ok": false, "error": err.to_string()})
                    }
                };
                let j = match m.judge.relation(&ctx, "The sky is blue.", "The sky is blue.") {
                    Ok(_) => json!({"ok": true, "name": m.judge.name()}),
                    Err(err) => {
                        problems.push(format!("the judge fails: {err}"));
                        json!({"ok": false, "error": err.to_string()})
                    }
                };
                (e, j)
            }
        };
        let unsearchable = facts.iter().filter(|f| f.is_active() && f.v.is_empty()).count();
        if unsearchable > 0 {
            problems.push(format!(
                "{unsearchable} active memories are not searchable by meaning (no vector)"
            ));
        }
        let overdue = rec
            .last_sweep
            .is_none_or(|t| now - t > 2.0 * self.config.scopes.sweep_hours * 3600.0);
        if overdue && !facts.is_empty() {
            problems.push("the sweep has not run in the last two sweep intervals".to_owned());
        }
        Ok(json!({
            "agent": agent,
            "memory": if policy.captures() { "on" } else { "off" },
            "policy": policy.name,
            "sharing": rec.sharing,
            "sweep": {"mode": if rec.sweep_live { "live" } else { "report" }, "last": rec.last_sweep, "overdue": overdue},
            "embedder": embedder,
            "judge": judge,
            "facts": {
                "active": facts.iter().filter(|f| f.is_active()).count(),
                "archived": facts.iter().filter(|f| f.archived_at().is_some()).count(),
                "not_searchable_by_meaning": unsearchable,
            },
            "ready": problems.is_empty(),
            "problems": problems,
        }))
    }

    /// Removes a forgotten memory's facts from its agent's scope, with every fact distilled
    /// from them, and its turns from its user's hot state (inside `forget_memory`'s
    /// transaction); returns how many facts and turns went.
    pub(crate) fn forget_in_scope(
        &self,
        w: &mut Writer<'_>,
        memory: &str,
        agent: &str,
        user: Option<&str>,
        now: f64,
    ) -> Result<(u64, u64), StoreError> {
        let turns = super::hot::forget_turns(w, agent, user, memory)?;
        let drawn = super::procedures::forget_routines(w, agent, memory)?;
        let facts = scope_facts(&*w, agent)?;
        let from_memory: BTreeSet<u64> = facts
            .iter()
            .filter(|f| f.origin.as_ref().is_some_and(|o| o.memory == memory))
            .map(|f| f.n)
            .chain(drawn)
            .collect();
        if from_memory.is_empty() {
            return Ok((0, turns));
        }
        let removed = delete_with_derived(w, agent, &facts, from_memory)?;
        audit(
            w,
            agent,
            &AuditEntry {
                at: now,
                action: "forget".into(),
                memory: Some(memory.to_owned()),
                user: None,
                items: removed.clone(),
                detail: json!({"why": "forget_memory", "hot_turns": turns}),
            },
        )?;
        Ok((removed.len() as u64, turns))
    }
}

/// Deletes `doomed` and, transitively, every fact that lists one of them as a source; a fact
/// replaced by a deleted one is active again (what replaced it is gone). Returns the deleted.
fn delete_with_derived(
    w: &mut Writer<'_>,
    agent: &str,
    facts: &[ScopeFact],
    mut doomed: BTreeSet<u64>,
) -> Result<Vec<u64>, StoreError> {
    loop {
        let more: Vec<u64> = facts
            .iter()
            .filter(|f| !doomed.contains(&f.n) && f.sources.iter().any(|s| doomed.contains(s)))
            .map(|f| f.n)
            .collect();
        if more.is_empty() {
            break;
        }
        doomed.extend(more);
    }
    for f in facts {
        if doomed.contains(&f.n) {
            super::delete_fact(w, agent, f.n)?;
        } else if let Status::Replaced { by, .. } = f.status {
            if doomed.contains(&by) {
                put_fact(
                    w,
                    agent,
                    &ScopeFact {
                        status: Status::Active,
                        ..f.clone()
                    },
                )?;
            }
        }
    }
    Ok(doomed.into_iter().collect())
}

fn not_found(agent: &str, id: u64) -> EngineError {
    EngineError::NotFound(format!("no memory {id} of agent {agent:?}"))
}
