//! The `Handoff` lane job: a conversation that ended (or went quiet) hands its new facts to its
//! agent's scope as episodic facts, each with a kind; the scope facts it was shown are checked
//! against what it said (restated: used; contradicted: replaced by the new fact); then the
//! owner's scope is consolidated. Like every lane job: copy under the memory's lock, judge
//! without it, apply under the memory's and the agent's locks, re-checking.

use std::collections::BTreeMap;

use serde_json::json;

use super::records::{AuditEntry, Kind, Origin, Routine, ScopeFact, Status, Tier};
use super::{agent_record, audit, kinds, procedures, put_fact, scope_facts};
use crate::engine::records::{Fact, Job, VectorKind, VectorRecord};
use crate::engine::state::{self, State};
use crate::engine::{Engine, EngineError};
use crate::models::{cosine, CallCtx, Relation};
use crate::store::{keys, Table};

/// Importance a new episodic fact starts at (a milestone higher).
const IMPORTANCE: f32 = 0.5;
const MILESTONE_IMPORTANCE: f32 = 0.7;
/// Confidence of a fact when it joins the scope, and what each later restatement adds.
pub(super) const CONFIDENCE: f32 = 0.6;
const CONFIRMED: f32 = 0.1;

struct Snapshot {
    agent: String,
    user: Option<String>,
    facts: Vec<Fact>,
    /// Scope facts the cross-memory block showed this conversation.
    shown: Vec<u64>,
    next_fact: u64,
    /// The turns nobody noted (after the last noted episode, not read at an earlier handoff),
    /// as "role: text" lines, for a model to read for facts.
    transcript: String,
    /// When the last of those turns was stored (extracted facts are dated by it).
    transcript_at: Option<f64>,
    /// When the first of them was (working notes saved since are read with them).
    transcript_from: Option<f64>,
    next_seq: u64,
    /// The requests since the last handoff and the tools called for each (procedural tier).
    routines: Vec<Routine>,
}

/// A fact about to join the scope: from the memory's notes, or read out of its un-noted turns.
struct Incoming {
    fact: Option<u64>,
    note: String,
    subject: String,
    object: String,
    kind: Kind,
    milestone: bool,
    at: f64,
    valid_from: Option<f64>,
    valid_to: Option<f64>,
    mentions: u32,
}

/// A new fact's judgment against a scope fact the conversation was shown.
enum Check {
    Used(u64),
    /// (shown fact, the memory fact that contradicts it)
    Contradicted(u64, u64),
}

impl Engine {
    pub(crate) fn run_handoff(&self, memory: &str, job: &Job) -> Result<bool, EngineError> {
        // Our own tools are no part of how the agent works.
        let scopes = &self.config.scopes;
        let ours = [
            self.config.note_tool.as_str(),
            scopes.remember_tool.as_str(),
            scopes.recall_tool.as_str(),
        ];
        let snap = self.peek_from(
            memory,
            |st| Some(st.memory.extracted_to),
            |st| {
                let agent = st.memory.agent.clone()?;
                let mark = st.memory.handed_off;
                let (transcript, transcript_from) = unnoted_transcript(st);
                Some(Snapshot {
                    agent,
                    user: st.memory.user.clone(),
                    facts: st
                        .facts
                        .iter()
                        .filter(|f| f.n >= mark && f.is_active())
                        .cloned()
                        .collect(),
                    // Every block of the conversation, read from the store (the state holds
                    // only the recent ones; it is saved, and the lock is held).
                    shown: self
                        .store
                        .read(|r| state::all_recalls(r, memory))
                        .unwrap_or_else(|e| {
                            tracing::warn!(memory, error = %e, "cannot read the recall blocks; the loaded ones only");
                            st.recalls.values().cloned().collect()
                        })
                        .iter()
                        .filter_map(|b| b.across.as_ref())
                        .flat_map(|a| a.items.iter().map(|i| i.n))
                        .collect::<std::collections::BTreeSet<_>>()
                        .into_iter()
                        .collect(),
                    next_fact: st.memory.next_fact,
                    transcript,
                    transcript_from,
                    transcript_at: st.history().last().map(|m| m.at),
                    next_seq: st.memory.next_seq,
                    routines: procedures::routines_of(st, st.memory.extracted_to, &ours),
                })
            },
        )?;
        // The working notes this conversation saved while those turns went on are read with
        // them (seed 002: the working tier is read alongside the transcript).
        let mut snap = snap;
        if let Some(s) = snap.as_mut().filter(|s| s.transcript_from.is_some()) {
            let from = s.transcript_from.unwrap_or(f64::INFINITY);
            let hot = self.store.read(|r| super::hot::state(r, &s.agent, s.user.as_deref()))?;
            for n in hot.notes.iter().filter(|n| n.memory == memory && n.at >= from) {
                s.transcript
                    .push_str(&format!("assistant (working note): {}\n", n.text));
            }
        }
        let (policy_captures, procedural) = match &snap {
            Some(s) => {
                let rec = self.store.read(|r| agent_record(r, &s.agent))?;
                let policy = self.policy_of(&rec);
                (policy.captures(), policy.captures() && policy.procedural)
            }
            None => (false, false),
        };
        // Judge without a lock: vectors (stored by the graph lane, else embedded now), kinds,
        // and the shown facts' fate.
        let mut vectors: BTreeMap<u64, VectorRecord> = BTreeMap::new();
        let mut checks = Vec::new();
        let mut incoming: Vec<Incoming> = Vec::new();
        let mut extracted_vectors: Vec<VectorRecord> = Vec::new();
        let mut routines: Vec<Routine> = Vec::new();
        if let (Some(s), true) = (&mut snap, procedural) {
            routines = std::mem::take(&mut s.routines);
            // The requests are embedded so that like requests are found alike.
            if let (Some(models), false) = (&self.models, routines.is_empty()) {
                let asks: Vec<&str> = routines.iter().map(|r| r.ask.as_str()).collect();
                match models.embedder.embed(&CallCtx { memory }, &asks) {
                    Ok(vs) if vs.len() == routines.len() => {
                        let model = models.embedder.id().name;
                        for (r, v) in routines.iter_mut().zip(vs) {
                            r.model = model.clone();
                            r.v = v;
                        }
                    }
                    Ok(_) => tracing::warn!(
                        memory,
                        "embedder gave the wrong number of vectors; routines kept without"
                    ),
                    Err(e) => {
                        self.store
                            .write(|w| crate::engine::state::fail_job(w, memory, job.n, &e.to_string()))?;
                        return Ok(false);
                    }
                }
            }
        }
        if let (Some(s), true) = (&snap, policy_captures) {
            incoming = s
                .facts
                .iter()
                .map(|f| Incoming {
                    fact: Some(f.n),
                    note: f.note.clone(),
                    subject: f.subject.clone(),
                    object: f.object.clone(),
                    kind: kinds::infer(&f.note, f.milestone),
                    milestone: f.milestone,
                    at: f.at,
                    valid_from: f.valid_from,
                    valid_to: f.valid_to,
                    mentions: 1 + f.restated_by.len() as u32,
                })
                .collect();
            self.store.read(|r| {
                for f in &s.facts {
                    if let Some(v) =
                        r.get::<VectorRecord>(Table::Vectors, &keys::seq2(memory, VectorKind::Fact as u64, f.n))?
                    {
                        vectors.insert(f.n, v);
                    }
                }
                Ok(())
            })?;
            if let Some(models) = &self.models {
                let model = models.embedder.id().name;
                let missing: Vec<&Fact> = s
                    .facts
                    .iter()
                    .filter(|f| vectors.get(&f.n).is_none_or(|v| v.model != model))
                    .collect();
                if !missing.is_empty() {
                    let texts: Vec<&str> = missing.iter().map(|f| f.note.as_str()).collect();
                    match models.embedder.embed(&CallCtx { memory }, &texts) {
                        Ok(vs) => {
                            for (f, v) in missing.iter().zip(vs) {
                                vectors.insert(
                                    f.n,
                                    VectorRecord {
                                        model: model.clone(),
                                        v,
                                    },
                                );
                            }
                        }
                        Err(e) => {
                            self.store
                                .write(|w| crate::engine::state::fail_job(w, memory, job.n, &e.to_string()))?;
                            return Ok(false);
                        }
                    }
                }
                // The turns nobody noted, read once by the model (the built-in judge reads
                // none); a failure leaves the job to be tried again, storing nothing.
                let read = if s.transcript.trim().is_empty() {
                    Ok(Vec::new())
                } else {
                    models.judge.extract(&CallCtx { memory }, &s.transcript)
                };
                let extracted = match read {
                    Ok(x) => x,
                    Err(e) => {
                        self.store.write(|w| {
                            crate::engine::state::fail_job(w, memory, job.n, &format!("fact extraction: {e}"))
                        })?;
                        return Ok(false);
                    }
                };
                if !extracted.is_empty() {
                    let texts: Vec<&str> = extracted.iter().map(|x| x.note.as_str()).collect();
                    match models.embedder.embed(&CallCtx { memory }, &texts) {
                        Ok(vs) => {
                            extracted_vectors = vs
                                .into_iter()
                                .map(|v| VectorRecord {
                                    model: model.clone(),
                                    v,
                                })
                                .collect()
                        }
                        Err(e) => {
                            self.store
                                .write(|w| crate::engine::state::fail_job(w, memory, job.n, &e.to_string()))?;
                            return Ok(false);
                        }
                    }
                }
                let at = s.transcript_at.unwrap_or(job.at);
                for x in extracted {
                    incoming.push(Incoming {
                        fact: None,
                        kind: serde_json::from_value(serde_json::json!(x.kind)).unwrap_or(Kind::Fact),
                        note: x.note,
                        subject: x.subject,
                        object: x.object,
                        milestone: false,
                        at,
                        valid_from: None,
                        valid_to: None,
                        mentions: 1,
                    });
                }
                let held = self.store.read(|r| scope_facts(r, &s.agent))?;
                for shown in held.iter().filter(|h| s.shown.contains(&h.n) && h.is_active()) {
                    for f in &s.facts {
                        let near = vectors.get(&f.n).is_none_or(|v| {
                            shown.v.is_empty() || cosine(&v.v, &shown.v) >= self.config.scopes.agree_cosine
                        });
                        if !near {
                            continue;
                        }
                        match models.judge.relation(&CallCtx { memory }, &f.note, &shown.text) {
                            Ok(Relation::Restates) => checks.push(Check::Used(shown.n)),
                            Ok(Relation::Contradicts) => checks.push(Check::Contradicted(shown.n, f.n)),
                            Ok(Relation::Unrelated) => {}
                            Err(e) => tracing::warn!(memory, error = %e, "judge failed; shown fact left unchecked"),
                        }
                    }
                }
            }
        }
        // (A shown fact left unchecked by a call the stop cut short.)
        if self.cut_short_by_stop(memory, job.n) {
            return Ok(false);
        }
        // Apply: the memory's lock, then the agent's.
        let read = self.read_facts_unlocked(memory)?;
        let lock = self.lock(memory);
        let _held = lock.lock().unwrap_or_else(|e| e.into_inner());
        let job_key = keys::seq(memory, job.n);
        if !self
            .store
            .read(|r| Ok(r.get::<serde::de::IgnoredAny>(Table::Jobs, &job_key)?.is_some()))?
        {
            return Ok(true); // forgotten meanwhile
        }
        let mut st = self.take_whole_state(memory, read)?;
        let now = job.at;
        let mut handed = Vec::new();
        let agent_held;
        let scope = match (&snap, policy_captures) {
            (Some(s), true) => {
                agent_held = self.agent_lock(&s.agent);
                Some((s, agent_held.lock().unwrap_or_else(|e| e.into_inner())))
            }
            _ => None,
        };
        let saved = self.store.write(|w| {
            handed.clear();
            if let Some((s, _)) = &scope {
                let mut rec = agent_record(w, &s.agent)?;
                let mut by_fact: BTreeMap<u64, u64> = BTreeMap::new();
                let mut extracted = extracted_vectors.iter();
                for f in &incoming {
                    // A noted fact retired or merged since the snapshot is not handed over.
                    let v = match f.fact {
                        Some(n) if !st.fact(n).is_some_and(|now| now.is_active()) => continue,
                        Some(n) => vectors.get(&n),
                        None => extracted.next(),
                    };
                    let sf = ScopeFact {
                        n: rec.next_fact,
                        tier: Tier::Episodic,
                        kind: f.kind,
                        domain: kinds::domain(&f.note),
                        text: f.note.clone(),
                        subject: f.subject.clone(),
                        object: f.object.clone(),
                        owner: s.user.clone(),
                        origin: Some(Origin {
                            memory: memory.to_owned(),
                            fact: f.fact,
                        }),
                        sources: Vec::new(),
                        at: f.at,
                        valid_from: f.valid_from,
                        valid_to: f.valid_to,
                        confidence: CONFIDENCE,
                        mentions: f.mentions,
                        uses: 0,
                        last_used: None,
                        importance: if f.milestone { MILESTONE_IMPORTANCE } else { IMPORTANCE },
                        status: Status::Active,
                        model: v.map(|v| v.model.clone()).unwrap_or_default(),
                        v: v.map(|v| v.v.clone()).unwrap_or_default(),
                    };
                    rec.next_fact += 1;
                    if let Some(n) = f.fact {
                        by_fact.insert(n, sf.n);
                    }
                    handed.push(sf.n);
                    put_fact(w, &s.agent, &sf)?;
                }
                let mut used = Vec::new();
                let mut replaced = Vec::new();
                for c in &checks {
                    let n = match c {
                        Check::Used(n) | Check::Contradicted(n, _) => *n,
                    };
                    let key = keys::seq(&s.agent, n);
                    let Some(mut held) = crate::store::Read::get::<ScopeFact>(w, Table::ScopeFacts, &key)? else {
                        continue;
                    };
                    if !held.is_active() {
                        continue;
                    }
                    match c {
                        // Restated by a later conversation: used, surer, and its class learns.
                        Check::Used(_) if !used.contains(&n) => {
                            held.uses += 1;
                            held.last_used = Some(now);
                            held.confidence = (held.confidence + CONFIRMED).min(1.0);
                            held.mentions += 1;
                            rec.learn(&held, true);
                            used.push(n);
                        }
                        // Contradicted: replaced, and no longer true from when the new fact is.
                        Check::Contradicted(_, f) => match by_fact.get(f) {
                            Some(&by) => {
                                let since = s.facts.iter().find(|x| x.n == *f).map(|x| x.valid_from.unwrap_or(x.at));
                                held.status = Status::Replaced { by, at: now };
                                held.valid_to = held.valid_to.or(since).or(Some(now));
                                rec.learn(&held, false);
                                replaced.push(n);
                            }
                            None => continue,
                        },
                        _ => continue,
                    }
                    put_fact(w, &s.agent, &held)?;
                }
                w.put(Table::Agents, &keys::memory(&s.agent), &rec)?;
                for r in &routines {
                    procedures::put_routine(w, &s.agent, r)?;
                }
                audit(
                    w,
                    &s.agent,
                    &AuditEntry {
                        at: now,
                        action: "handoff".into(),
                        memory: Some(memory.to_owned()),
                        user: s.user.clone(),
                        items: handed.clone(),
                        detail: json!({"used": used, "replaced": replaced, "routines": routines.len()}),
                    },
                )?;
            }
            // The mark moves with the scope's facts, so a re-run never hands a fact twice.
            st.memory.handed_off = snap.as_ref().map_or(st.memory.next_fact, |s| s.next_fact);
            st.memory.extracted_to = snap.as_ref().map_or(st.memory.next_seq, |s| s.next_seq);
            st.save(w)
        });
        drop(scope);
        saved?;
        st.mark_saved();
        self.keep(st);
        drop(_held);
        if let (Some(s), true) = (&snap, policy_captures) {
            tracing::info!(memory, agent = %s.agent, facts = handed.len(), "conversation handed to its scope");
            if let Err(e) = self.consolidate_owner(&s.agent, s.user.as_deref(), now) {
                tracing::warn!(agent = %s.agent, error = %e, "consolidation failed; tried again at the next handoff or consolidate");
            }
            if let Err(e) = self.find_procedures(&s.agent, s.user.as_deref(), now) {
                tracing::warn!(agent = %s.agent, error = %e, "finding procedures failed; tried again at the next handoff or consolidate");
            }
        }
        // The job ends after the consolidation it causes, so `quiet` covers both (a crash
        // in between consolidates again, which finds nothing new to do twice).
        let _held = lock.lock().unwrap_or_else(|e| e.into_inner());
        if !self
            .store
            .read(|r| Ok(r.get::<serde::de::IgnoredAny>(Table::Jobs, &job_key)?.is_some()))?
        {
            return Ok(true);
        }
        let mut st = self.take_state(memory, 0.0)?;
        st.finish_job(job.n, &job.job);
        self.save_and_keep(st)?;
        Ok(true)
    }
}

/// Characters of un-noted turns kept for the model to read (the latest).
const TRANSCRIPT_CHARS: usize = 24_000;

/// The turns after the last episode the model noted, not read at an earlier handoff, as
/// "role: text" lines (the latest [`TRANSCRIPT_CHARS`]), and when the first of them was stored.
fn unnoted_transcript(st: &State) -> (String, Option<f64>) {
    let noted_to = st
        .episodes
        .iter()
        .filter(|e| e.acknowledged)
        .map(|e| e.last_seq + 1)
        .max()
        .unwrap_or(0);
    let from = noted_to.max(st.memory.extracted_to);
    let first = st.history().find(|m| m.seq >= from).map(|m| m.at);
    let mut out: String = st
        .history()
        .filter(|m| m.seq >= from && !m.message.text.trim().is_empty())
        .map(|m| format!("{}: {}\n", m.message.role.as_str(), m.message.text.trim()))
        .collect();
    if out.len() > TRANSCRIPT_CHARS {
        let mut cut = out.len() - TRANSCRIPT_CHARS;
        while !out.is_char_boundary(cut) {
            cut += 1;
        }
        out = out[cut..].to_owned();
    }
    (out, first)
}
