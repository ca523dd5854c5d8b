//! The engine: decorate and report, and the mechanism of one memory (seed 000).
//!
//! The engine sees neutral messages (from `formats`), never provider JSON, and keeps all state
//! in the store. Each op loads one memory's [`State`] under that memory's lock, works on it in
//! memory (the judge may be called here, outside any transaction), and saves what changed in
//! one write transaction; `dry_run` skips the save. Different memories run in parallel.

mod activation;
mod blocks;
mod budget;
mod ingest;
pub mod records;
mod state;
mod tokens;
mod units;

use std::collections::{BTreeSet, HashMap};
use std::sync::{Arc, Mutex};

use recalld_protocol::ops::{DecorateArgs, DecorateReply, ReportArgs, ReportReply};
use recalld_protocol::{ErrorBody, ErrorCode};
use serde::Deserialize;
use serde_json::{json, Value};

use crate::formats::{self, Format, FormatError, Message, Role, ToolCall};
use crate::models::{CallCtx, Models};
use crate::store::{Store, StoreError};
use records::{Episode, EpisodeState, Fact, JobKind, Source, StoredMessage, TraceKind};
use state::State;

/// Engine settings (`[engine]` in the config file).
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct EngineConfig {
    /// Token ceiling of a request when the memory sets none.
    pub ceiling: u64,
    /// Name of the note tool added to requests.
    pub note_tool: String,
    /// Hours of silence after which the next user turn sleeps first.
    pub sleep_hours: f64,
    /// Largest episode, in tokens (also at most the history budget / 8).
    pub max_episode_tokens: u64,
    /// Episodes a new fact is judged against at most (the most recent remembered ones).
    pub max_episodes_judged: usize,
    /// Threads running the memories' background lanes.
    pub lane_workers: usize,
    /// Memories whose loaded state is kept between ops (most recently used).
    pub cached_memories: usize,
}

impl Default for EngineConfig {
    fn default() -> Self {
        EngineConfig {
            ceiling: 200_000,
            note_tool: "note".into(),
            sleep_hours: 24.0,
            max_episode_tokens: 4_000,
            max_episodes_judged: 32,
            lane_workers: 1,
            cached_memories: 64,
        }
    }
}

#[derive(Debug, thiserror::Error)]
pub enum EngineError {
    #[error("{0}")]
    InvalidArgument(String),
    #[error("{0}")]
    NotFound(String),
    #[error("request: {0}")]
    Format(#[from] FormatError),
    #[error("store: {0}")]
    Store(#[from] StoreError),
}

impl EngineError {
    /// The wire form: a stable code, a message for people; internal causes are logged.
    pub fn to_wire(&self) -> ErrorBody {
        match self {
            EngineError::InvalidArgument(m) => ErrorBody::new(ErrorCode::InvalidArgument, m.clone()),
            EngineError::NotFound(m) => ErrorBody::new(ErrorCode::NotFound, m.clone()),
            EngineError::Format(e) => ErrorBody::new(ErrorCode::InvalidArgument, e.to_string()),
            EngineError::Store(e) => {
                tracing::error!(error = %e, "store failure");
                ErrorBody::new(ErrorCode::Internal, "storage failure; see the daemon log")
            }
        }
    }
}

pub struct Engine {
    store: Arc<Store>,
    models: Option<Models>,
    config: EngineConfig,
    locks: Mutex<HashMap<String, Arc<Mutex<()>>>>,
    notify: Mutex<Option<std::sync::mpsc::Sender<String>>>,
    /// Loaded states of recently used memories, equal to what the store holds: every op that
    /// writes a memory saves through its state under the memory's lock, then puts it back.
    cache: Mutex<StateCache>,
    note_costs: NoteCosts,
}

/// Token costs of the note ask and the note tool, counted once (they are reserved on every
/// decorate).
struct NoteCosts {
    ask: u64,
    tool_chat: u64,
    tool_responses: u64,
}

impl NoteCosts {
    fn new(tool: &str) -> NoteCosts {
        let count = |format| tokens::text_tokens(&formats::note_tool(format, tool).to_string()) as u64;
        NoteCosts {
            ask: tokens::text_tokens(&blocks::note_ask(1, 1, tool)) as u64 + 4,
            tool_chat: count(Format::ChatCompletions),
            tool_responses: count(Format::Responses),
        }
    }
}

#[derive(Default)]
struct StateCache {
    states: HashMap<String, State>,
    order: std::collections::VecDeque<String>,
}

/// Unix seconds now, or the caller's injected time.
fn now_or(now: Option<f64>) -> Result<f64, EngineError> {
    let now = now.unwrap_or_else(|| {
        std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).map(|d| d.as_secs_f64()).unwrap_or(0.0)
    });
    if !now.is_finite() || now < 0.0 {
        return Err(EngineError::InvalidArgument(format!("now must be unix seconds, got {now}")));
    }
    Ok(now)
}

/// A note call found in a request's history or a reply.
struct NoteCall {
    call: ToolCall,
    /// The message that carried it, as it came.
    message: Message,
}

impl Engine {
    /// `models` is None only where a judge is not wanted (tests of the mechanism alone); then
    /// cuts go by size and facts are not scored against episodes.
    pub fn new(store: Arc<Store>, models: Option<Models>, config: EngineConfig) -> Engine {
        let note_costs = NoteCosts::new(&config.note_tool);
        Engine {
            store,
            models,
            config,
            locks: Mutex::new(HashMap::new()),
            notify: Mutex::new(None),
            cache: Mutex::default(),
            note_costs,
        }
    }

    pub fn config(&self) -> &EngineConfig {
        &self.config
    }

    fn lock(&self, memory: &str) -> Arc<Mutex<()>> {
        let mut locks = self.locks.lock().unwrap_or_else(|e| e.into_inner());
        locks.entry(memory.to_owned()).or_default().clone()
    }

    /// The memory's state: the cached one, else loaded from the store. Call under the memory's
    /// lock; give it back with [`Engine::keep`] once saved (on an error it is simply dropped).
    fn take_state(&self, memory: &str, now: f64) -> Result<State, EngineError> {
        let cached = {
            let mut cache = self.cache.lock().unwrap_or_else(|e| e.into_inner());
            cache.order.retain(|m| m != memory);
            cache.states.remove(memory)
        };
        match cached {
            Some(st) => Ok(st),
            None => Ok(self.store.read(|r| State::load(r, memory, now))?),
        }
    }

    /// Saves the state in one transaction and keeps it for the next op.
    fn save_and_keep(&self, mut st: State) -> Result<(), EngineError> {
        self.store.write(|w| st.save(w))?;
        st.mark_saved();
        let mut cache = self.cache.lock().unwrap_or_else(|e| e.into_inner());
        let id = st.memory.id.clone();
        cache.order.push_back(id.clone());
        cache.states.insert(id, st);
        while cache.order.len() > self.config.cached_memories {
            if let Some(old) = cache.order.pop_front() {
                cache.states.remove(&old);
            }
        }
        Ok(())
    }

    fn ratio(&self, st: &State, model: Option<&str>) -> Option<f64> {
        model.and_then(|m| st.memory.ratios.get(m).copied())
    }

    /// decorate: store what is new, take notes, seal, sleep or fade, assemble.
    pub fn decorate(&self, args: DecorateArgs) -> Result<DecorateReply, EngineError> {
        let now = now_or(args.now)?;
        let parsed = formats::parse_request(&args.request)?;
        let lock = self.lock(&args.memory);
        let _held = lock.lock().unwrap_or_else(|e| e.into_inner());
        // A dry run works on a fresh copy from the store and keeps nothing.
        let mut st = if args.dry_run {
            self.store.read(|r| State::load(r, &args.memory, now))?
        } else {
            self.take_state(&args.memory, now)?
        };
        if let Some(c) = args.ceiling {
            if c == 0 {
                return Err(EngineError::InvalidArgument("ceiling must be a positive number of tokens".into()));
            }
            st.memory.ceiling = Some(c);
        }
        if args.agent.is_some() {
            st.memory.agent = args.agent.clone();
        }
        if args.user.is_some() {
            st.memory.user = args.user.clone();
        }

        // 1. Store what is new (our own blocks and note calls are not history). Instructions
        // are not history either; each new version of them is kept on the memory.
        remember_instructions(&mut st, &parsed.instructions, now);
        let (incoming, notes) = self.clean_incoming(&parsed.history);
        let previous_user_at = st.memory.last_user_at;
        let (stored_seqs, stored_fp): (Vec<u64>, Vec<u64>) = st.history().map(|m| (m.seq, m.fingerprint)).unzip();
        let plan = ingest::plan(st.existed, &stored_fp, &incoming, args.history);
        if let Some(from) = plan.supersede_from {
            for &seq in &stored_seqs[from..] {
                st.message_mut(seq).superseded_at = Some(now);
            }
        }
        let mut new_user = false;
        for m in &plan.new {
            new_user |= m.role == Role::User;
            let stored = StoredMessage::new(&st.memory, m.clone(), now, Source::Request);
            if m.role == Role::User {
                st.memory.turn = stored.turn;
                st.memory.last_user_at = Some(now);
            }
            st.push_message(stored);
        }

        // 2. Notes the model wrote that we have not taken yet (a client that skipped report).
        let mut facts_written = 0;
        for note in notes {
            facts_written += self.take_note(&mut st, note, now, Source::Request);
        }

        // 3. Seal what is acknowledged and over.
        seal_acknowledged(&mut st, now);

        // 4. Sleep or fade.
        let sleep = new_user && previous_user_at.is_some_and(|t| now - t >= self.config.sleep_hours * 3600.0);
        let ratio = self.ratio(&st, parsed.model.as_deref());
        let mut measure = self.measure(&st, &parsed, ratio);
        let over = measure.view > measure.budget.history;
        let mut faded = false;
        if (sleep || over) && !st.any_leaving() {
            self.cut(&mut st, measure.budget.history, true);
            faded = fade(&mut st, measure.budget.landing, measure.view, now, ratio);
            measure = self.measure(&st, &parsed, ratio);
            // The fade's own note ask (and the note tool) are part of the fixed size: with them
            // the landing is lower. Carry on to the landing as it is now, in the same fade.
            if faded && st.any_leaving() {
                let leaving: u64 = st
                    .episodes_in(EpisodeState::Leaving)
                    .map(|e| tokens::corrected(e.tokens, ratio))
                    .sum();
                let projected = measure.view.saturating_sub(leaving);
                if projected > measure.budget.landing {
                    fade(&mut st, measure.budget.landing, projected, now, ratio);
                    measure = self.measure(&st, &parsed, ratio);
                }
            }
        }

        st.memory.last_budget = Some(measure.budget.history);

        // 5. Assemble.
        let assembled = self.assemble(&st, &parsed, ratio, &measure);
        st.memory.last_estimate = parsed.model.clone().map(|model| records::Estimate { model, tokens: assembled.tokens });
        st.memory.updated_at = now;
        let activations = activation::of_episodes(st.episodes.len(), &st.traces, now);
        let info = json!({
            "format": parsed.format,
            "stored": plan.new.len(),
            "superseded": plan.supersede_from.map(|i| stored_seqs.len() - i).unwrap_or(0),
            "aligned": plan.aligned,
            "turn": st.memory.turn,
            "facts_written": facts_written,
            "sleep": sleep,
            "faded": faded,
            "dry_run": args.dry_run,
            "provider_history": parsed.provider_history,
            "ceiling": measure.budget.ceiling,
            "budget": measure.budget.history,
            "landing": measure.budget.landing,
            "fixed": measure.budget.fixed,
            "room": measure.budget.room,
            "typical_turn": measure.budget.typical_turn,
            "view_tokens": measure.view,
            "request_tokens": assembled.tokens,
            "ratio": ratio,
            "note_ask": assembled.note_ask,
            "hidden_for_ceiling": assembled.hidden,
            "in_view": assembled.in_view,
            "episodes": st.episodes.iter().map(|e| json!({
                "n": e.n, "state": e.state, "turns": [e.first_turn, e.last_turn],
                "seqs": [e.first_seq, e.last_seq], "tokens": e.tokens,
                "activation": activations[e.n as usize],
                "significance": activation::significance(st.traces.iter().filter(|t| t.episode == e.n)),
                "facts": e.facts,
            })).collect::<Vec<_>>(),
        });
        if !args.dry_run {
            let queued = st.has_new_jobs();
            self.save_and_keep(st)?;
            if queued {
                self.notify_lane(&args.memory);
            }
        }
        Ok(DecorateReply { request: assembled.request, info })
    }

    /// Drops our own blocks from a request's history and takes note calls (and their outputs)
    /// out of it: they are not history.
    fn clean_incoming(&self, history: &[Message]) -> (Vec<Message>, Vec<NoteCall>) {
        let tool = &self.config.note_tool;
        let mut note_ids = BTreeSet::new();
        let mut notes = Vec::new();
        let mut out = Vec::new();
        for m in history {
            if matches!(m.role, Role::System | Role::Developer) && blocks::is_our_block(&m.text) {
                continue;
            }
            if m.role == Role::Tool && m.tool_call_id.as_ref().is_some_and(|id| note_ids.contains(id)) {
                continue;
            }
            let calls: Vec<&ToolCall> = m.tool_calls.iter().filter(|c| &c.name == tool).collect();
            if calls.is_empty() {
                out.push(m.clone());
                continue;
            }
            for c in calls {
                note_ids.insert(c.id.clone());
                notes.push(NoteCall { call: c.clone(), message: m.clone() });
            }
            if let Some(rest) = m.without_tool_calls(tool) {
                out.push(rest);
            }
        }
        (out, notes)
    }

    /// Writes a note's facts against every episode awaiting them; returns how many were written.
    /// A note already taken (same call id) is skipped. The note call is stored, hidden from the
    /// view, for export.
    fn take_note(&self, st: &mut State, note: NoteCall, now: f64, source: Source) -> usize {
        let taken = st.messages.iter().any(|m| m.note && m.message.tool_calls.iter().any(|c| c.id == note.call.id && !c.id.is_empty()));
        if taken {
            return 0;
        }
        let mut stored = StoredMessage::new(&st.memory, note.message.clone(), now, source);
        stored.turn = st.memory.turn;
        stored.note = true;
        let note_seq = st.push_message(stored);
        let facts = match formats::note_arguments(&note.call) {
            Ok(f) => f,
            Err(e) => {
                // Unreadable: nothing is invented; the episodes stay leaving and are asked again.
                tracing::warn!(error = %e, "note call could not be read");
                return 0;
            }
        };
        let awaiting: Vec<u64> =
            st.episodes.iter().filter(|e| e.state == EpisodeState::Leaving && !e.acknowledged).map(|e| e.n).collect();
        let (first_turn, last_turn) = awaiting
            .iter()
            .map(|n| (st.episodes[*n as usize].first_turn, st.episodes[*n as usize].last_turn))
            .fold((u64::MAX, 0), |(a, b), (f, l)| (a.min(f), b.max(l)));
        let mut written = Vec::new();
        for f in facts.into_iter().filter(|f| !f.note.trim().is_empty()) {
            let n = st.push_fact(Fact {
                n: 0,
                note: f.note,
                subject: f.subject,
                object: f.object,
                milestone: f.milestone,
                at: now,
                episodes: awaiting.clone(),
                note_seq,
                first_turn: if awaiting.is_empty() { st.memory.turn } else { first_turn },
                last_turn: if awaiting.is_empty() { st.memory.turn } else { last_turn },
            });
            written.push(n);
        }
        for n in &awaiting {
            let e = st.episode_mut(*n);
            e.acknowledged = true;
            e.facts.extend(&written);
        }
        if !written.is_empty() {
            st.push_job(JobKind::ScoreFacts { facts: written.clone() }, now);
        }
        written.len()
    }

    /// Judges each fact against the remembered episodes: every answer becomes a trace (episode,
    /// score, yes, fact), counted only on yes. Without a judge, or when it fails, nothing is
    /// returned for what was not judged: nothing is invented.
    fn judge_facts(&self, st: &State, facts: &[u64]) -> Vec<(u64, f64, bool, u64)> {
        let Some(models) = &self.models else { return Vec::new() };
        let remembered: Vec<u64> = st
            .episodes
            .iter()
            .rev()
            .filter(|e| e.state != EpisodeState::Forgotten)
            .take(self.config.max_episodes_judged)
            .map(|e| e.n)
            .collect();
        let passages: Vec<Vec<String>> = remembered.iter().map(|&e| episode_passages(st, e)).collect();
        let ctx = CallCtx { memory: &st.memory.id };
        let mut out = Vec::new();
        for &f in facts {
            let Some(note) = st.facts.iter().find(|x| x.n == f).map(|x| x.note.as_str()) else { continue };
            for (&e, texts) in remembered.iter().zip(&passages) {
                let refs: Vec<&str> = texts.iter().map(String::as_str).collect();
                match models.judge.about(&ctx, note, &refs) {
                    Ok((score, yes)) => out.push((e, score as f64, yes, f)),
                    Err(err) => {
                        tracing::warn!(error = %err, "judge failed; fact left unscored");
                        return out;
                    }
                }
            }
        }
        out
    }

    /// Runs the oldest queued job of `memory`, if any; returns whether one ran. The judging is
    /// done on a snapshot without holding the memory's lock, so decorate never waits on it; the
    /// results are applied under the lock, with the job's removal, in one transaction.
    pub fn run_next_job(&self, memory: &str) -> Result<bool, EngineError> {
        let (snapshot, job) = self.store.read(|r| Ok((State::load(r, memory, 0.0)?, state::oldest_job(r, memory)?)))?;
        let Some(job) = job else { return Ok(false) };
        let traces = match &job.job {
            JobKind::ScoreFacts { facts } => self.judge_facts(&snapshot, facts),
            JobKind::Cut => Vec::new(),
        };
        drop(snapshot);
        let lock = self.lock(memory);
        let _held = lock.lock().unwrap_or_else(|e| e.into_inner());
        let mut st = self.take_state(memory, 0.0)?;
        match job.job {
            JobKind::ScoreFacts { .. } => {
                for (episode, score, yes, fact) in traces {
                    st.push_trace(episode, TraceKind::Fact, job.at, score, yes, Some(fact));
                }
            }
            JobKind::Cut => {
                let budget = self.cut_budget(&st);
                self.cut(&mut st, budget, false);
            }
        }
        st.finish_job(job.n);
        self.save_and_keep(st)?;
        Ok(true)
    }

    /// Memories with queued jobs (to resume after a restart) and the number of jobs.
    pub fn pending_jobs(&self) -> Result<(Vec<String>, u64), EngineError> {
        Ok(self.store.read(|r| state::pending_jobs(r))?)
    }

    /// Where to tell the lanes that a memory has new work.
    pub fn set_lane_notifier(&self, notify: std::sync::mpsc::Sender<String>) {
        *self.notify.lock().unwrap_or_else(|e| e.into_inner()) = Some(notify);
    }

    fn notify_lane(&self, memory: &str) {
        if let Some(tx) = self.notify.lock().unwrap_or_else(|e| e.into_inner()).as_ref() {
            let _ = tx.send(memory.to_owned());
        }
    }

    /// Cuts closed, uncut history into episodes. With `force`, any closed history is cut (a
    /// fade needs episodes); otherwise only once it reaches twice the largest episode.
    fn cut(&self, st: &mut State, history_budget: u64, force: bool) {
        if !force && !self.cut_ready(st, history_budget) {
            return;
        }
        let max = self.max_episode(history_budget);
        let min = max / 4;
        let closed = closed_uncut(st);
        if closed.is_empty() {
            return;
        }
        let units = units::units(&closed);
        let sizes: Vec<u64> = units.iter().map(|u| closed[u.start..u.end].iter().map(|m| m.tokens as u64).sum()).collect();
        let started = std::time::Instant::now();
        let rank = self.boundary_rank(st, &closed, &units);
        tracing::debug!(units = units.len(), micros = started.elapsed().as_micros() as u64, "boundaries judged");
        let cuts = units::cut_points(&sizes, &rank, max, min);
        let mut bounds = vec![0];
        bounds.extend(cuts);
        bounds.push(units.len());
        let pieces: Vec<Episode> = bounds
            .windows(2)
            .map(|w| {
                let ms = &closed[units[w[0]].start..units[w[1] - 1].end];
                Episode {
                    n: 0,
                    first_seq: ms[0].seq,
                    last_seq: ms[ms.len() - 1].seq,
                    first_turn: ms[0].turn,
                    last_turn: ms[ms.len() - 1].turn,
                    at: ms[ms.len() - 1].at,
                    tokens: ms.iter().map(|m| m.tokens as u64).sum(),
                    state: EpisodeState::Live,
                    acknowledged: false,
                    facts: Vec::new(),
                    changed_at: ms[ms.len() - 1].at,
                }
            })
            .collect();
        for e in pieces {
            st.push_episode(e);
        }
    }

    /// The history budget background cuts go by: the last decorate's, else the ceiling.
    fn cut_budget(&self, st: &State) -> u64 {
        st.memory.last_budget.unwrap_or_else(|| st.memory.ceiling.unwrap_or(self.config.ceiling))
    }

    fn max_episode(&self, history_budget: u64) -> u64 {
        self.config.max_episode_tokens.min(history_budget / 8).max(64)
    }

    /// Whether closed, uncut history has reached twice the largest episode.
    fn cut_ready(&self, st: &State, history_budget: u64) -> bool {
        let total: u64 = closed_uncut(st).iter().map(|m| m.tokens as u64).sum();
        total >= 2 * self.max_episode(history_budget)
    }

    /// The order of boundaries: before unit i, "unit i starts a concept" + "unit i−1 ends one",
    /// from the judge. Without a judge, or when it fails, all boundaries rank alike and sizes
    /// alone decide (the most balanced cut).
    fn boundary_rank(&self, st: &State, closed: &[&StoredMessage], units: &[units::Unit]) -> Vec<f64> {
        let flat = vec![0.0; units.len()];
        let Some(models) = &self.models else { return flat };
        if units.len() < 2 {
            return flat;
        }
        // The head of each unit stands for it: the built-in judge's cost grows with text length
        // (attention is quadratic), and a unit's opening says what it is about.
        let texts: Vec<String> = units
            .iter()
            .map(|u| {
                let joined = closed[u.start..u.end].iter().map(|m| truncate(&m.message.text, 400)).collect::<Vec<_>>().join("\n");
                truncate(&joined, UNIT_TEXT_CHARS)
            })
            .collect();
        let refs: Vec<&str> = texts.iter().map(String::as_str).collect();
        match models.judge.boundaries(&CallCtx { memory: &st.memory.id }, &refs) {
            Ok(scores) if scores.len() == units.len() => {
                (0..units.len()).map(|i| if i == 0 { 0.0 } else { (scores[i].first + scores[i - 1].last) as f64 }).collect()
            }
            Ok(_) | Err(_) => {
                tracing::warn!("judge gave no boundary scores; cutting by size");
                flat
            }
        }
    }

    /// Sizes and the budget for the request as it would be assembled now.
    fn measure(&self, st: &State, parsed: &formats::ParsedRequest, ratio: Option<f64>) -> Measure {
        let ceiling = st.memory.ceiling.unwrap_or(self.config.ceiling);
        let (facts_text, ask_text) = (self.facts_text(st, parsed.format), self.ask_text(st));
        let mut fixed: u64 = parsed.instructions.iter().map(|m| tokens::message_tokens(m) as u64).sum();
        fixed += tokens::text_tokens(&serde_json::to_string(&parsed.rest).unwrap_or_default()) as u64;
        fixed += facts_text.as_deref().map_or(0, |t| tokens::text_tokens(t) as u64 + 4);
        // The note ask and the note tool are reserved even before any ask is out: the fade that
        // starts an episode leaving adds them, and that request must still fit.
        fixed += match &ask_text {
            Some(ask) => tokens::text_tokens(ask) as u64 + 4,
            None => self.note_costs.ask,
        };
        fixed += match parsed.format {
            Format::ChatCompletions => self.note_costs.tool_chat,
            Format::Responses => self.note_costs.tool_responses,
        };
        let fixed = tokens::corrected(fixed, ratio);
        let history: Vec<&StoredMessage> = st.history().collect();
        let current = st.memory.turn;
        let tok = |m: &StoredMessage| tokens::corrected(m.tokens as u64, ratio);
        let recent = budget::recent(&history, current, tok);
        let current_turn: u64 = history.iter().filter(|m| m.turn == current && current > 0).map(|m| tok(m)).sum();
        let budget = budget::budget(ceiling, fixed, &recent, parsed.max_output_tokens, current_turn);
        let view = history.iter().filter(|m| in_view(st, m)).map(|m| tok(m)).sum();
        Measure { budget, view }
    }

    fn facts_text(&self, st: &State, _format: Format) -> Option<String> {
        let now = st.memory.updated_at;
        let mut facts: Vec<(&Fact, f64)> = st
            .facts
            .iter()
            // A note's facts stay while any episode they were written for is sealed, and leave
            // with the last of them: forgetting one small episode does not drop a whole note.
            .filter(|f| {
                !f.episodes.is_empty()
                    && f.episodes.iter().any(|e| st.episodes[*e as usize].state == EpisodeState::Sealed)
            })
            .map(|f| (f, activation::fact_activation(f, &st.traces, now)))
            .collect();
        facts.sort_by(|a, b| b.1.total_cmp(&a.1).then(b.0.n.cmp(&a.0.n)));
        blocks::facts_block(&facts.into_iter().map(|(f, _)| f).collect::<Vec<_>>())
    }

    fn ask_text(&self, st: &State) -> Option<String> {
        let asked: Vec<&Episode> = st.episodes_in(EpisodeState::Leaving).filter(|e| !e.acknowledged).collect();
        let first = asked.iter().map(|e| e.first_turn).min()?;
        let last = asked.iter().map(|e| e.last_turn).max()?;
        Some(blocks::note_ask(first, last, &self.config.note_tool))
    }

    /// instructions; facts block; history in view; note ask (+ note tool) while episodes leave.
    fn assemble(&self, st: &State, parsed: &formats::ParsedRequest, ratio: Option<f64>, measure: &Measure) -> Assembled {
        let format = parsed.format;
        let role = parsed.instructions_role;
        let mut view: Vec<&StoredMessage> = st.history().filter(|m| in_view(st, m)).collect();
        let facts = self.facts_text(st, format);
        let ask = self.ask_text(st);
        // Over the ceiling even so (a huge turn): hold back whole episodes, least active first,
        // never the turn in progress. They keep their state and come back when there is room.
        // Live ones go first: a leaving episode is held back only as a last resort, since the
        // note ask asks the model for its facts and the model can only write what it sees.
        let mut hidden = Vec::new();
        let ceiling = measure.budget.ceiling;
        let mut total = measure.budget.fixed + measure.view;
        if total > ceiling {
            let act = activation::of_episodes(st.episodes.len(), &st.traces, st.memory.updated_at);
            let mut candidates: Vec<&Episode> =
                st.episodes.iter().filter(|e| matches!(e.state, EpisodeState::Live | EpisodeState::Leaving)).collect();
            candidates.sort_by(|a, b| {
                let leaving = |e: &Episode| e.state == EpisodeState::Leaving;
                leaving(a).cmp(&leaving(b)).then(act[a.n as usize].total_cmp(&act[b.n as usize]))
            });
            for e in candidates {
                if total <= ceiling {
                    break;
                }
                let size: u64 = view
                    .iter()
                    .filter(|m| m.seq >= e.first_seq && m.seq <= e.last_seq)
                    .map(|m| tokens::corrected(m.tokens as u64, ratio))
                    .sum();
                view.retain(|m| m.seq < e.first_seq || m.seq > e.last_seq);
                total = total.saturating_sub(size);
                hidden.push(e.n);
            }
        }
        let mut messages: Vec<Message> = Vec::new();
        if let Some(text) = &facts {
            messages.push(Message::new(format, role, text.clone()));
        }
        if parsed.provider_history.is_some() {
            // The provider holds the history (previous_response_id / conversation): we cannot
            // trim it, so the request's own items go as sent, with our blocks around them.
            messages.extend(parsed.history.iter().cloned());
        } else {
            messages.extend(view.iter().flat_map(|m| m.message.to_format(format)));
        }
        let mut extra_tools = Vec::new();
        if let Some(text) = &ask {
            messages.push(Message::new(format, role, text.clone()));
            extra_tools.push(formats::note_tool(format, &self.config.note_tool));
        }
        let request = formats::render_request(format, &parsed.instructions, &messages, &parsed.rest, &extra_tools);
        Assembled {
            request,
            tokens: total,
            note_ask: ask.is_some(),
            hidden,
            in_view: view.iter().map(|m| m.seq).collect(),
        }
    }

    /// report: store the reply, take its note, learn the size ratio, cut long history.
    pub fn report(&self, args: ReportArgs) -> Result<ReportReply, EngineError> {
        let now = now_or(args.now)?;
        let parsed = formats::parse_response(&args.response)?;
        let lock = self.lock(&args.memory);
        let _held = lock.lock().unwrap_or_else(|e| e.into_inner());
        let mut st = self.take_state(&args.memory, now)?;
        let tool = self.config.note_tool.clone();
        let (response, removed) = formats::remove_tool_calls(&args.response, &tool);
        let mut notes = Vec::new();
        for m in &parsed.messages {
            for c in m.tool_calls.iter().filter(|c| c.name == tool) {
                notes.push(NoteCall { call: c.clone(), message: m.clone() });
            }
            // What the client will hold in its history: the reply without the note call.
            if let Some(rest) = m.without_tool_calls(&tool) {
                let stored = StoredMessage::new(&st.memory, rest, now, Source::Reply);
                st.push_message(stored);
            }
        }
        for note in notes {
            self.take_note(&mut st, note, now, Source::Reply);
        }
        seal_acknowledged(&mut st, now);
        // The provider's count against our estimate of the request we returned.
        if let (Some(usage), Some(est)) = (&parsed.usage, &st.memory.last_estimate) {
            if parsed.model.as_deref().is_none_or(|m| m.starts_with(&est.model) || est.model.starts_with(m)) {
                let previous = st.memory.ratios.get(&est.model).copied();
                if let Some(r) = tokens::next_ratio(previous, usage.prompt_tokens, est.tokens) {
                    st.memory.ratios.insert(est.model.clone(), r);
                }
            }
        }
        st.memory.last_estimate = None;
        // Cut once enough closed history has built up: in the background lane, sized by the
        // budget the last decorate measured, so decorate rarely has to cut inline.
        if self.cut_ready(&st, self.cut_budget(&st)) {
            st.push_job(JobKind::Cut, now);
        }
        st.memory.updated_at = now;
        let reparsed = formats::parse_response(&response)?;
        let again = !removed.is_empty()
            && !reparsed.has_content()
            && reparsed.messages.iter().all(|m| m.tool_calls.is_empty());
        let queued = st.has_new_jobs();
        self.save_and_keep(st)?;
        if queued {
            self.notify_lane(&args.memory);
        }
        Ok(ReportReply { response, again })
    }

    /// Everything stored for a memory: messages, episodes, traces, facts.
    pub fn export(&self, memory: &str) -> Result<Value, EngineError> {
        let st = self.store.read(|r| State::load(r, memory, 0.0))?;
        if !st.existed {
            return Err(EngineError::NotFound(format!("no memory {memory:?}")));
        }
        Ok(json!({
            "memory": memory,
            "record": st.memory,
            "messages": st.messages.iter().map(StoredMessage::export).collect::<Vec<_>>(),
            "episodes": st.episodes,
            "traces": st.traces,
            "facts": st.facts,
        }))
    }

    pub fn stats(&self) -> Result<Value, EngineError> {
        use crate::store::Table;
        let (memories, messages, facts) = self.store.read(|r| {
            Ok((r.count(Table::Memories, b"")?, r.count(Table::Messages, b"")?, r.count(Table::Facts, b"")?))
        })?;
        Ok(json!({
            "memories": memories,
            "messages": messages,
            "facts": facts,
            "store_bytes": self.store.size_bytes(),
            "jobs_pending": self.pending_jobs()?.1,
            "models": self.models.as_ref().map(Models::stats),
        }))
    }
}

struct Measure {
    budget: budget::Budget,
    view: u64,
}

struct Assembled {
    request: Value,
    tokens: u64,
    note_ask: bool,
    hidden: Vec<u64>,
    in_view: Vec<u64>,
}

fn remember_instructions(st: &mut State, instructions: &[Message], now: f64) {
    if instructions.is_empty() {
        return;
    }
    let fingerprint = format!("{:016x}", instructions.iter().fold(0u64, |h, m| h.rotate_left(7) ^ m.fingerprint()));
    if st.memory.instructions.last().is_some_and(|i| i.fingerprint == fingerprint) {
        return;
    }
    let raw = instructions.iter().map(|m| m.raw.clone()).collect();
    st.memory.instructions.push(records::Instructions { since: now, fingerprint, raw });
}

/// History of closed turns that no episode holds yet.
fn closed_uncut(st: &State) -> Vec<&StoredMessage> {
    let from = st.uncut_from();
    let current = st.memory.turn;
    st.history().filter(|m| m.seq >= from && m.turn < current).collect()
}

/// A history message is in view unless its episode is sealed or forgotten.
fn in_view(st: &State, m: &StoredMessage) -> bool {
    st.episode_of(m.seq).is_none_or(|e| matches!(e.state, EpisodeState::Live | EpisodeState::Leaving))
}

/// Acknowledged leaving episodes whose last turn is over seal: out of view, facts in the block.
fn seal_acknowledged(st: &mut State, now: f64) {
    let turn = st.memory.turn;
    let ready: Vec<u64> = st
        .episodes
        .iter()
        .filter(|e| e.state == EpisodeState::Leaving && e.acknowledged && e.last_turn < turn)
        .map(|e| e.n)
        .collect();
    for n in ready {
        let e = st.episode_mut(n);
        e.state = EpisodeState::Sealed;
        e.changed_at = now;
    }
}

/// Fades to the landing: least active first until the projected view reaches it. A live
/// episode starts leaving (or seals at once when its facts exist); a sealed one is forgotten.
fn fade(st: &mut State, landing: u64, view: u64, now: f64, ratio: Option<f64>) -> bool {
    let act = activation::of_episodes(st.episodes.len(), &st.traces, now);
    let mut order: Vec<(u64, f64)> = st
        .episodes
        .iter()
        .filter(|e| matches!(e.state, EpisodeState::Live | EpisodeState::Sealed))
        .map(|e| (e.n, act[e.n as usize]))
        .collect();
    order.sort_by(|a, b| a.1.total_cmp(&b.1).then(a.0.cmp(&b.0)));
    let mut projected = view;
    let mut changed = false;
    for (n, _) in order {
        if projected <= landing {
            break;
        }
        let e = st.episode_mut(n);
        match e.state {
            EpisodeState::Live => {
                e.state = if e.facts.is_empty() { EpisodeState::Leaving } else { EpisodeState::Sealed };
                projected = projected.saturating_sub(tokens::corrected(e.tokens, ratio));
            }
            EpisodeState::Sealed => e.state = EpisodeState::Forgotten,
            _ => continue,
        }
        e.changed_at = now;
        changed = true;
    }
    changed
}

/// The passages an episode is judged by: its messages' texts, each cut to a readable length.
fn episode_passages(st: &State, n: u64) -> Vec<String> {
    let e = &st.episodes[n as usize];
    st.history()
        .filter(|m| m.seq >= e.first_seq && m.seq <= e.last_seq && !m.message.text.is_empty())
        .take(16)
        .map(|m| truncate(&m.message.text, UNIT_TEXT_CHARS))
        .collect()
}

/// How much of a unit (or passage) the judge reads.
const UNIT_TEXT_CHARS: usize = 600;

fn truncate(s: &str, max: usize) -> String {
    if s.len() <= max {
        return s.to_owned();
    }
    let mut end = max;
    while !s.is_char_boundary(end) {
        end -= 1;
    }
    s[..end].to_owned()
}
