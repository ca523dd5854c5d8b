//! Background jobs of one memory (run by `lanes`): judging new facts against the remembered
//! episodes, judging the boundary scores of closed units, cutting long history, placing facts
//! in the graph, cutting sealed episodes into passages and indexing them, distilling recall
//! blocks.
//!
//! Every job follows one rule, so decorate and report never wait on a model: copy what the job
//! judges out of the memory's state under its lock (microseconds, from the cached state when
//! there is one), judge without the lock, then apply under the lock, re-checking that what was
//! judged is still there, and remove the job in the same transaction as its results.

use std::collections::{BTreeMap, BTreeSet};
use std::sync::atomic::{AtomicU64, Ordering};

use super::cut::{self, UnitBatch, CONTEXT_UNITS};
use super::records::{
    EpisodeState, Fact, Job, JobKind, Passage, StoredMessage, TraceKind, UnitScore, VectorKind, VectorRecord,
};
use super::state::{self, State};
use super::{distill, graph, indexing, scopes, units, walk, Engine, EngineError};
use crate::models::{BoundaryScore, CallCtx};
use crate::store::{keys, Reader, StoreError, Table};

/// What the lanes have done since start (for `stats`): throughput is visible, never guessed.
#[derive(Default)]
pub(super) struct LaneCounters {
    jobs_run: AtomicU64,
    units_judged: AtomicU64,
    fact_judgments: AtomicU64,
    facts_placed: AtomicU64,
    failures: AtomicU64,
    judge_micros: AtomicU64,
    /// Per job kind: runs and wall time (judging and applying), so a slow lane says which work
    /// it is slow at.
    by_kind: std::sync::Mutex<std::collections::BTreeMap<&'static str, (u64, u64)>>,
}

impl LaneCounters {
    pub(super) fn snapshot(&self) -> serde_json::Value {
        serde_json::json!({
            "jobs_run": self.jobs_run.load(Ordering::Relaxed),
            "units_judged": self.units_judged.load(Ordering::Relaxed),
            "fact_judgments": self.fact_judgments.load(Ordering::Relaxed),
            "facts_placed": self.facts_placed.load(Ordering::Relaxed),
            "failures": self.failures.load(Ordering::Relaxed),
            "judge_seconds": self.judge_micros.load(Ordering::Relaxed) as f64 / 1e6,
            "by_kind": self
                .by_kind
                .lock()
                .unwrap_or_else(|e| e.into_inner())
                .iter()
                .map(|(k, (runs, micros))| (k.to_string(), serde_json::json!({"runs": runs, "seconds": *micros as f64 / 1e6})))
                .collect::<serde_json::Map<_, _>>(),
        })
    }

    fn record(&self, kind: &'static str, micros: u64) {
        let mut by_kind = self.by_kind.lock().unwrap_or_else(|e| e.into_inner());
        let e = by_kind.entry(kind).or_default();
        e.0 += 1;
        e.1 += micros;
    }
}

/// What a job judges, copied out of the state.
enum Snapshot {
    /// Each new fact's text and the episodes it is judged against, and those episodes'
    /// passages.
    Facts {
        facts: Vec<(u64, String, Vec<u64>)>,
        episodes: BTreeMap<u64, Vec<String>>,
    },
    Units(UnitBatch),
    /// Facts to place in the graph (the planner reads the store itself; see `graph`).
    Graph(Vec<u64>),
    Reembed,
    /// Passages of episodes not cut yet and the texts to embed them from (possibly none: the
    /// job then only indexes).
    Passages(indexing::Drafts),
    Distill(distill::Snapshot),
    Walk(walk::Snapshot),
    /// The job judges nothing (a cut is arithmetic).
    Nothing,
    /// What the job judges could not be read (the job fails and is tried again).
    Unreadable(String),
}

/// A judgment, ready to apply.
enum Judged {
    /// (episode, score, yes, fact) per answer.
    Traces(Vec<(u64, f64, bool, u64)>),
    Units {
        batch: UnitBatch,
        scores: Vec<BoundaryScore>,
    },
    Graph(graph::Plan),
    /// New embeddings, and whether more are left for another job.
    Vectors(Vec<(VectorKind, u64, VectorRecord)>, bool),
    /// Passages with their vectors (model name, one per passage) when there is an embedder,
    /// and the episodes they were cut from.
    Passages(
        Vec<Passage>,
        Option<indexing::ModelVectors>,
        Vec<u64>,
        Option<Vec<state::Mention>>,
    ),
    /// The indices of a recall block's items to keep.
    Distilled {
        seq: u64,
        keep: Vec<usize>,
    },
    Walk(walk::PreparedWalk),
    /// The model failed: the job stays queued, counted as a failed attempt.
    Failed(String),
    Nothing,
}

/// Vectors re-embedded per `Reembed` job (more are queued as another job).
const REEMBED_BATCH: usize = 256;
/// Episodes a new fact is judged against at most (beside those it was written for): the ones
/// sharing the most words with it, among the `max_episodes_judged` most recent. On the load
/// bench's agent traffic, judging every recent episode made these judgments 88% of the judge's
/// calls (1,842 of 2,087, `recalld-bench load --cost`).
const EPISODES_PER_FACT: usize = 6;

impl Engine {
    /// Whether the memory has a job that is not parked.
    pub fn has_waiting_job(&self, memory: &str) -> Result<bool, EngineError> {
        Ok(self.store.read(|r| state::oldest_job(r, memory))?.is_some())
    }

    /// Runs the oldest queued job of `memory`, if any; returns whether one ran. Only one lane
    /// worker runs a memory's jobs at a time (see `lanes`), so a job is applied once.
    pub fn run_next_job(&self, memory: &str) -> Result<bool, EngineError> {
        // Jobs read and write the memory's indexes (the graph resolves names through them):
        // ones the start found behind the store are caught up first.
        self.settle_indexes(memory)?;
        let Some(job) = self.store.read(|r| state::oldest_job(r, memory))? else {
            return Ok(false);
        };
        let started = std::time::Instant::now();
        let kind = job.job.name();
        let ran = self.run_job(memory, job);
        self.lane_counters.record(kind, started.elapsed().as_micros() as u64);
        ran
    }

    fn run_job(&self, memory: &str, job: Job) -> Result<bool, EngineError> {
        if job.job == JobKind::Handoff {
            // It writes the agent's scope as well as the memory: its own snapshot and apply.
            return self.run_handoff(memory, &job);
        }
        let snapshot = self.peek(memory, |st| self.snapshot(st, &job.job))?;
        let started = std::time::Instant::now();
        let judged = self.judge_snapshot(memory, snapshot);
        if self.cut_short_by_stop(memory, job.n) {
            return Ok(false);
        }
        let c = &self.lane_counters;
        c.judge_micros
            .fetch_add(started.elapsed().as_micros() as u64, Ordering::Relaxed);
        match &judged {
            Judged::Traces(t) => c.fact_judgments.fetch_add(t.len() as u64, Ordering::Relaxed),
            Judged::Units { batch, .. } => c.units_judged.fetch_add(batch.spans.len() as u64, Ordering::Relaxed),
            Judged::Graph(p) => c.facts_placed.fetch_add(p.placed_count() as u64, Ordering::Relaxed),
            Judged::Failed(error) => {
                // Counted against the job; it is tried again on the next notice, parked after
                // a few failures (kept with its error, shown in `stats`), never dropped.
                tracing::warn!(memory, job = job.n, %error, "background job failed");
                self.store.write(|w| state::fail_job(w, memory, job.n, error))?;
                c.failures.fetch_add(1, Ordering::Relaxed);
                return Ok(false);
            }
            Judged::Vectors(..)
            | Judged::Passages(..)
            | Judged::Distilled { .. }
            | Judged::Walk(_)
            | Judged::Nothing => 0,
        };
        let read = self.read_facts_unlocked(memory)?;
        let lock = self.lock(memory);
        let held = lock.lock().unwrap_or_else(|e| e.into_inner());
        // The memory may have been forgotten while the job judged: then nothing is applied
        // (saving would bring it back).
        let job_key = keys::seq(memory, job.n);
        if !self
            .store
            .read(|r| Ok(r.get::<serde::de::IgnoredAny>(Table::Jobs, &job_key)?.is_some()))?
        {
            return Ok(true);
        }
        let mut st = self.take_whole_state(memory, read)?;
        match judged {
            Judged::Traces(traces) => {
                let episodes = st.episodes.len() as u64;
                for (episode, score, yes, fact) in traces {
                    if episode < episodes && fact < st.memory.next_fact {
                        st.push_trace(episode, TraceKind::Fact, job.at, score, yes, Some(fact));
                    }
                }
            }
            Judged::Units { batch, scores } => apply_unit_scores(&mut st, &batch, &scores),
            Judged::Graph(plan) => {
                if !graph::apply(&mut st, plan, job.at) {
                    // The graph moved since the plan was made: plan again, from what holds now.
                    self.keep(st);
                    return Ok(true);
                }
            }
            Judged::Vectors(vectors, more) => {
                for (kind, n, v) in vectors {
                    st.put_vector(kind, n, v);
                }
                if more {
                    st.push_job(JobKind::Reembed, job.at);
                } else if self.indexes.is_some() {
                    // Every vector is the new model's now: the vector index is built again.
                    self.drop_indexes(memory);
                    st.push_job(JobKind::Index, job.at);
                }
            }
            Judged::Passages(passages, vectors, episodes, mentions) => {
                if !episodes.is_empty() && !indexing::apply_passages(&mut st, passages, vectors, episodes) {
                    self.keep(st);
                    return Ok(true);
                }
                if let Some(rows) = mentions {
                    st.backfill_mentions(rows);
                }
            }
            Judged::Distilled { seq, keep } => {
                // The block's message is resized with it, wherever it lies (an older one is
                // read and written alone).
                self.store.read(|r| st.load_recall(r, seq))?;
                if let Some((before, after)) = distill::apply(&mut st, seq, &keep) {
                    self.store.read(|r| st.resize_older(r, seq, before, after))?;
                }
            }
            Judged::Walk(prepared) => walk::apply(&mut st, prepared),
            Judged::Failed(_) | Judged::Nothing => {}
        }
        if job.job == JobKind::Cut {
            let budget = self.cut_budget(&st);
            self.cut(&mut st, budget, false);
            // The new episodes' passages, so a block that holds one back can show it.
            self.queue_indexing(&mut st, job.at);
        }
        if job.job == JobKind::Index {
            // Passages are stored first; the indexes (derived data) are written after the
            // store, without the lock; the job is removed only then, so `quiet` returning means
            // searches see everything. A failure leaves the marks behind, and the next index
            // job (or the check at start) adds what is missing.
            self.save_and_keep(st)?;
            drop(held);
            if let Err(e) = self.update_indexes(memory) {
                tracing::warn!(memory, error = %e, "search indexes not updated");
            }
            let _held = lock.lock().unwrap_or_else(|e| e.into_inner());
            if !self
                .store
                .read(|r| Ok(r.get::<serde::de::IgnoredAny>(Table::Jobs, &job_key)?.is_some()))?
            {
                return Ok(true); // forgotten meanwhile
            }
            let mut st = self.take_state(memory, 0.0)?;
            st.finish_job(job.n, &job.job);
            if st.needs_passages() {
                st.push_job(JobKind::Index, job.at);
            }
            self.save_and_keep(st)?;
        } else {
            st.finish_job(job.n, &job.job);
            self.save_and_keep(st)?;
            if let JobKind::Graph { facts } = &job.job {
                drop(held);
                if let Err(e) = self.index_graph(memory, facts) {
                    tracing::warn!(memory, error = %e, "the graph's vectors not indexed");
                }
            }
        }
        c.jobs_run.fetch_add(1, Ordering::Relaxed);
        Ok(true)
    }

    fn snapshot(&self, st: &State, job: &JobKind) -> Snapshot {
        match job {
            JobKind::ScoreFacts { facts } => self
                .store
                .read(|r| self.facts_snapshot(st, r, facts))
                .unwrap_or_else(|e| Snapshot::Unreadable(e.to_string())),
            JobKind::ScoreUnits => cut::units_to_score(st).map_or(Snapshot::Nothing, Snapshot::Units),
            JobKind::Graph { facts } => Snapshot::Graph(facts.clone()),
            JobKind::Reembed => Snapshot::Reembed,
            JobKind::Cut => Snapshot::Nothing,
            JobKind::Index => match self
                .store
                .read(|r| indexing::passage_drafts(st, r, self.config.passage_tokens))
            {
                Ok(drafts) => Snapshot::Passages(drafts),
                Err(e) => Snapshot::Unreadable(e.to_string()),
            },
            JobKind::Distill { seq } => match self.distill_snapshot(st, *seq) {
                Ok(snap) => snap.map_or(Snapshot::Nothing, Snapshot::Distill),
                Err(e) => Snapshot::Unreadable(e.to_string()),
            },
            JobKind::Walk => walk::snapshot(st).map_or(Snapshot::Nothing, Snapshot::Walk),
            JobKind::Handoff => Snapshot::Nothing,
        }
    }

    /// A fact judgment's snapshot: the recent remembered episodes, each judged only for the
    /// facts that share words with it (and the episodes a fact was written for): a fact is
    /// about few episodes, and each judgment is a model call.
    fn facts_snapshot(&self, st: &State, r: &Reader<'_>, facts: &[u64]) -> Result<Snapshot, StoreError> {
        let pool: Vec<(u64, Vec<String>, BTreeSet<String>)> = judged_pool(st, &self.config)
            .map(|e| -> Result<_, StoreError> {
                let texts = episode_passages(st, r, e.n)?;
                let words = scopes::word_set(&texts.join("\n"));
                Ok((e.n, texts, words))
            })
            .collect::<Result<_, _>>()?;
        let words: Vec<(u64, &BTreeSet<String>)> = pool.iter().map(|(e, _, w)| (*e, w)).collect();
        let facts: Vec<(u64, String, Vec<u64>)> = facts
            .iter()
            .filter_map(|&n| st.fact(n).filter(|f| f.is_active()))
            .map(|f| {
                let own: BTreeSet<u64> = f.all_episodes().collect();
                (
                    f.n,
                    f.note.clone(),
                    episodes_to_judge(&scopes::word_set(&f.note), &own, &words),
                )
            })
            .collect();
        let wanted: BTreeSet<u64> = facts.iter().flat_map(|(_, _, es)| es.iter().copied()).collect();
        let episodes = pool
            .into_iter()
            .filter(|(e, ..)| wanted.contains(e))
            .map(|(e, texts, _)| (e, texts))
            .collect();
        Ok(Snapshot::Facts { facts, episodes })
    }

    /// A distill's block and turn: from the state, or read from the store when the block is
    /// older than the state (a late job reads that one turn, not every message since).
    fn distill_snapshot(&self, st: &State, seq: u64) -> Result<Option<distill::Snapshot>, EngineError> {
        if seq >= st.loaded_from() {
            return Ok(st
                .recalls
                .get(&seq)
                .and_then(|block| distill::snapshot(st, seq, block, st.history())));
        }
        let memory = &st.memory.id;
        let (block, turn) = self.store.read(|r| {
            Ok((
                state::recall_block(r, memory, seq)?,
                state::turn_messages(r, memory, seq)?,
            ))
        })?;
        Ok(block.and_then(|block| distill::snapshot(st, seq, &block, turn.iter())))
    }

    /// Runs the judge on a snapshot; no lock is held. Without a judge, or when it fails,
    /// nothing is returned for what was not judged: nothing is invented.
    fn judge_snapshot(&self, memory: &str, snapshot: Snapshot) -> Judged {
        if let Snapshot::Unreadable(error) = snapshot {
            return Judged::Failed(error);
        }
        if let Snapshot::Passages(d) = snapshot {
            // Passages are stored (and indexed by words) even without an embedder.
            let mentions = if d.backfill {
                match self.store.read(|r| indexing::stored_mentions(r, memory)) {
                    Ok(rows) => Some(rows),
                    Err(e) => return Judged::Failed(e.to_string()),
                }
            } else {
                None
            };
            return match self.embed_passages(memory, &d.texts) {
                Ok(vectors) => Judged::Passages(d.passages, vectors, d.episodes, mentions),
                Err(e) => Judged::Failed(e),
            };
        }
        let Some(models) = &self.models else {
            return Judged::Nothing;
        };
        let ctx = CallCtx { memory };
        match snapshot {
            Snapshot::Facts { facts, episodes } => {
                let mut out = Vec::new();
                for (f, note, judged) in &facts {
                    let (ids, passages): (Vec<u64>, Vec<Vec<&str>>) = judged
                        .iter()
                        .filter_map(|e| episodes.get(e).map(|t| (*e, t.iter().map(String::as_str).collect())))
                        .unzip();
                    match models.judge.about_each(&ctx, note, &passages) {
                        Ok(answers) => {
                            for (e, (score, yes)) in ids.into_iter().zip(answers) {
                                out.push((e, score as f64, yes, *f));
                            }
                        }
                        Err(err) => {
                            tracing::warn!(error = %err, "judge failed; fact left unscored");
                            return Judged::Traces(out);
                        }
                    }
                }
                Judged::Traces(out)
            }
            Snapshot::Units(batch) => {
                let refs: Vec<&str> = batch.texts.iter().map(String::as_str).collect();
                let started = std::time::Instant::now();
                match models.judge.boundaries(&ctx, &refs) {
                    Ok(scores) if scores.len() == batch.spans.len() => {
                        tracing::debug!(
                            units = scores.len(),
                            micros = started.elapsed().as_micros() as u64,
                            "boundaries judged"
                        );
                        Judged::Units { batch, scores }
                    }
                    Ok(_) | Err(_) => {
                        tracing::warn!("judge gave no boundary scores; those units rank alike");
                        Judged::Nothing
                    }
                }
            }
            Snapshot::Graph(facts) => {
                match graph::plan(models, &self.store, memory, &facts, self.entity_lookup(memory)) {
                    Ok(Some(plan)) => Judged::Graph(plan),
                    Ok(None) => Judged::Nothing,
                    Err(e) => Judged::Failed(e),
                }
            }
            Snapshot::Reembed => match self.reembed(models, memory) {
                Ok((vectors, more)) => Judged::Vectors(vectors, more),
                Err(e) => Judged::Failed(e),
            },
            Snapshot::Distill(snap) => match snap.judge(models.judge.as_ref(), memory) {
                Ok(keep) => Judged::Distilled { seq: snap.seq, keep },
                Err(e) => Judged::Failed(e.to_string()),
            },
            Snapshot::Walk(snap) => match self.prepare_walk(memory, &snap) {
                Ok(prepared) => Judged::Walk(prepared),
                Err(e) => Judged::Failed(e),
            },
            Snapshot::Passages(..) | Snapshot::Nothing | Snapshot::Unreadable(_) => Judged::Nothing,
        }
    }

    /// Embeds, with the current model, up to [`REEMBED_BATCH`] of the memory's facts and
    /// entities whose stored vector another model made, or that have none (an imported
    /// memory). Reads the store; holds no lock.
    #[allow(clippy::type_complexity)]
    fn reembed(
        &self,
        models: &crate::models::Models,
        memory: &str,
    ) -> Result<(Vec<(VectorKind, u64, VectorRecord)>, bool), String> {
        let model = models.embedder.id().name;
        let mut stale: Vec<(VectorKind, u64, String)> = Vec::new();
        let mut more = false;
        let current =
            |r: &crate::store::Reader<'_>, kind: VectorKind, n: u64| -> Result<bool, crate::store::StoreError> {
                let v: Option<VectorRecord> = r.get(Table::Vectors, &keys::seq2(memory, kind as u64, n))?;
                Ok(v.is_some_and(|v| v.model == model))
            };
        let prefix = keys::memory_prefix(memory);
        self.store
            .read(|r| {
                // Takes one record's text unless its vector is the current model's; false (stop)
                // once the batch is full.
                let mut take = |kind: VectorKind, n: u64, text: String| -> Result<bool, crate::store::StoreError> {
                    if current(r, kind, n)? {
                        return Ok(true);
                    }
                    if stale.len() == REEMBED_BATCH {
                        more = true;
                        return Ok(false);
                    }
                    stale.push((kind, n, text));
                    Ok(true)
                };
                r.visit(Table::Facts, &prefix, &prefix, |_, f: Fact| {
                    take(VectorKind::Fact, f.n, f.note)
                })?;
                r.visit(Table::Passages, &prefix, &prefix, |_, p: Passage| {
                    if current(r, VectorKind::Passage, p.n)? {
                        return Ok(true);
                    }
                    let mut p = p;
                    state::passage_text(r, memory, &mut p)?;
                    let ms = state::history_in(r, memory, p.first_seq, p.last_seq)?;
                    let text = indexing::embedding_text(&p, &ms.iter().collect::<Vec<_>>());
                    take(VectorKind::Passage, p.n, text)
                })?;
                r.visit(Table::Entities, &prefix, &prefix, |_, e: super::records::Entity| {
                    take(VectorKind::Entity, e.n, e.name)
                })?;
                Ok(())
            })
            .map_err(|e| e.to_string())?;
        if stale.is_empty() {
            return Ok((Vec::new(), false));
        }
        let texts: Vec<&str> = stale.iter().map(|(_, _, t)| t.as_str()).collect();
        let vectors = models
            .embedder
            .embed(&CallCtx { memory }, &texts)
            .map_err(|e| e.to_string())?;
        Ok((
            stale
                .into_iter()
                .zip(vectors)
                .map(|((kind, n, _), v)| {
                    (
                        kind,
                        n,
                        VectorRecord {
                            model: model.clone(),
                            v,
                        },
                    )
                })
                .collect(),
            more,
        ))
    }

    /// Queues a `Reembed` job in every memory that holds vectors (the embedding model changed).
    pub fn queue_reembed(&self) -> Result<usize, EngineError> {
        let memories: Vec<String> = self.store.read(|r| {
            let mut ids = Vec::new();
            r.visit(Table::Memories, b"", b"", |_, m: super::records::MemoryRecord| {
                if m.next_entity > 0 || m.next_fact > 0 || m.next_passage > 0 {
                    ids.push(m.id);
                }
                Ok(true)
            })?;
            Ok(ids)
        })?;
        for m in &memories {
            let lock = self.lock(m);
            let _held = lock.lock().unwrap_or_else(|e| e.into_inner());
            let mut st = self.take_state(m, 0.0)?;
            st.push_job(JobKind::Reembed, st.memory.updated_at);
            self.save_and_keep(st)?;
            self.notify_lane(m);
        }
        Ok(memories.len())
    }

    /// The lanes as `stats` shows them: what ran since start, the depth and oldest job age of
    /// every lane with work, and parked jobs with their errors.
    pub(super) fn lane_stats(&self) -> Result<serde_json::Value, EngineError> {
        let depths = self.store.read(state::lane_depths)?;
        let mut v = self.lane_counters.snapshot();
        v["depth"] = depths.iter().map(|l| l.depth).sum::<u64>().into();
        v["oldest_age_s"] = depths.iter().map(|l| l.oldest_age_s).fold(0.0, f64::max).into();
        v["parked"] = depths.iter().map(|l| l.parked.len() as u64).sum::<u64>().into();
        v["memories"] = serde_json::to_value(&depths).unwrap_or_default();
        Ok(v)
    }

    /// Memories with queued jobs (to resume after a restart) and the number of jobs.
    pub fn pending_jobs(&self) -> Result<(Vec<String>, u64), EngineError> {
        Ok(self.store.read(state::pending_jobs)?)
    }

    /// Where to tell the lanes that a memory has new work.
    pub fn set_lane_notifier(&self, notify: std::sync::mpsc::Sender<String>) {
        *self.notify.lock().unwrap_or_else(|e| e.into_inner()) = Some(notify);
    }

    pub(super) fn notify_lane(&self, memory: &str) {
        if let Some(tx) = self.notify.lock().unwrap_or_else(|e| e.into_inner()).as_ref() {
            let _ = tx.send(memory.to_owned());
        }
    }
}

/// Stores the judged scores of the batch's units that still span the same messages in closed,
/// uncut history (a cut or an edit since the snapshot leaves the rest unapplied). A unit's
/// score is complete once the batch held the units after it that its judgment reads.
fn apply_unit_scores(st: &mut State, batch: &UnitBatch, scores: &[BoundaryScore]) {
    let current: std::collections::HashSet<(u64, u64)> = cut::closed_unit_spans(st).into_iter().collect();
    let n = batch.spans.len();
    for (i, &(start_seq, end_seq)) in batch.spans.iter().enumerate().skip(batch.context) {
        if current.contains(&(start_seq, end_seq)) {
            st.set_unit_score(UnitScore {
                start_seq,
                end_seq,
                first: scores[i].first,
                last: scores[i].last,
                complete: i + CONTEXT_UNITS < n,
            });
        }
    }
}

/// The episodes a fact with `words` is judged against: those it was written for (`own`), and
/// the ones of `pool` sharing the most words with it (at least one; ties to the newest), up to
/// [`EPISODES_PER_FACT`] in all unless its own are more.
fn episodes_to_judge(words: &BTreeSet<String>, own: &BTreeSet<u64>, pool: &[(u64, &BTreeSet<String>)]) -> Vec<u64> {
    let mut shared: Vec<(bool, usize, u64)> = pool
        .iter()
        .map(|(e, w)| (own.contains(e), w.intersection(words).count(), *e))
        .filter(|&(mine, n, _)| mine || n > 0)
        .collect();
    shared.sort_by(|a, b| b.cmp(a));
    shared
        .into_iter()
        .take(EPISODES_PER_FACT.max(own.len()))
        .map(|(_, _, e)| e)
        .collect()
}

/// The episodes a new fact may be judged against: the recent ones not forgotten, newest first.
fn judged_pool<'a>(st: &'a State, config: &super::EngineConfig) -> impl Iterator<Item = &'a super::records::Episode> {
    st.episodes
        .iter()
        .rev()
        .filter(|e| e.state != EpisodeState::Forgotten)
        .take(config.max_episodes_judged)
}

/// The passages an episode is judged by: its units' texts as the boundary judge read them
/// (each message's head), the first 16. An episode older than the loaded state is read alone.
pub(super) fn episode_passages(st: &State, r: &Reader<'_>, n: u64) -> Result<Vec<String>, StoreError> {
    let e = &st.episodes[n as usize];
    let owned = st.history_between(r, e.first_seq, e.last_seq)?;
    let ms: Vec<&StoredMessage> = owned.iter().map(|m| m.as_ref()).collect();
    // The texts the unit-scoring job embedded, so the embedding cache answers most of them.
    Ok(units::units(&ms)
        .iter()
        .map(|u| cut::unit_text(&ms[u.start..u.end]))
        .filter(|t| !t.is_empty())
        .take(16)
        .collect())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn words(text: &str) -> BTreeSet<String> {
        scopes::word_set(text)
    }

    #[test]
    fn a_fact_is_judged_against_its_own_episodes_and_those_sharing_its_words() {
        let texts = [
            "user: the kayak rental closes early in October",
            "user: our sourdough starter wants rye flour",
            "user: the kayak paddles need new grips",
            "user: dentist appointment moved to Friday",
            "user: rye bread for the kayak trip",
        ];
        let sets: Vec<BTreeSet<String>> = texts.iter().map(|t| words(t)).collect();
        let pool: Vec<(u64, &BTreeSet<String>)> = sets.iter().enumerate().rev().map(|(i, w)| (i as u64, w)).collect();
        let fact = words("The kayak rental closes early in October storms.");
        // Written for episode 3 (no shared word): judged there all the same; then by shared
        // words (episode 0 shares four, 2 and 4 one each, the newer first); never 1.
        let own: BTreeSet<u64> = [3].into();
        assert_eq!(episodes_to_judge(&fact, &own, &pool), vec![3, 0, 4, 2]);
        // At most EPISODES_PER_FACT, the most alike first.
        let many: Vec<BTreeSet<String>> = (0..20).map(|i| words(&format!("kayak trip number{i}"))).collect();
        let pool: Vec<(u64, &BTreeSet<String>)> = many.iter().enumerate().map(|(i, w)| (i as u64, w)).collect();
        let judged = episodes_to_judge(&fact, &BTreeSet::new(), &pool);
        assert_eq!(judged.len(), EPISODES_PER_FACT);
        assert_eq!(judged[0], 19, "ties go to the newest");
    }
}
