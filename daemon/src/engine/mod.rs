//! The engine: decorate and report, and the mechanism of one memory (seed 000).
//!
//! The engine sees neutral messages (from `formats`), never provider JSON, and keeps all state
//! in the store. Each op loads one memory's [`State`] under that memory's lock, works on it in
//! memory, and saves what changed in one write transaction; `dry_run` skips the save. No model
//! runs in decorate or report: judging is the lanes' work (`jobs`), done without the lock.
//! Different memories run in parallel.

mod activation;
mod assemble;
mod blocks;
mod budget;
mod cut;
mod decisions;
mod distill;
mod facts;
mod fade;
pub mod graph;
mod import;
mod indexing;
mod ingest;
mod inspect;
mod jobs;
mod notes;
mod pairing;
mod passages;
mod quiet;
mod recall;
#[cfg(test)]
mod recall_scale;
pub mod records;
mod retry;
pub mod scopes;
mod state;
mod tokens;
mod units;
pub mod walk;
mod warm;
mod when;

use std::collections::HashMap;
use std::sync::{Arc, Mutex};

pub(crate) use notes::parse_date;
pub use passages::date;

use recalld_protocol::ops::{DecorateArgs, DecorateReply, HistoryMode, ReportArgs, ReportReply};
use recalld_protocol::{ErrorBody, ErrorCode, Passed};
use serde::Deserialize;
use serde_json::{json, Map, Value};

use crate::formats::{self, FormatError, Role};
use crate::models::Models;
use crate::store::{Store, StoreError};
use assemble::NoteCosts;
use fade::{fade, keep_facts_room, seal_acknowledged};
use ingest::remember_instructions;
use notes::NoteCall;
use records::{EpisodeState, JobKind, Source, StoredMessage};
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
    /// Threads each lane worker's model calls may use, at lower CPU priority (0: half the cores,
    /// at least one); the rest serve the request path.
    pub lane_model_threads: usize,
    /// Memories whose loaded state is kept between ops (most recently used), at most.
    pub cached_memories: usize,
    /// Heap the kept states may take between them, in bytes (estimated, `State::resident_bytes`);
    /// past it the least recently used leave first.
    pub cached_state_bytes: usize,
    /// Memories warmed after a start (the most recently updated: state loaded, recall indexes
    /// opened), so their first decorate does not pay for it; 0: none.
    pub warm_memories: usize,
    /// Whether new user messages recall what left the view (and facts and passages are
    /// indexed for it). Off, the engine is the fade-and-seal mechanism alone.
    pub recall: bool,
    /// The most a recall block for a message nothing relevant answers takes of what the view
    /// leaves free, in tokens (a relevant one may take all of it). On the LoCoMo dev replay
    /// (first two conversations): at 8k, 4,000 gave 0.913 and 2,500 0.923; letting a relevant
    /// block fill the free room took 8k to 0.929 and 16k from 0.979 to 0.988
    /// (docs/benchmarks.md).
    pub recall_tokens: u64,
    /// The room a relevant recall block may make by holding back live history, in tokens: its
    /// room is at least `recall_share` of the history budget, up to this much. With 1,500 and
    /// a share of a half, at 4k and 8k the view kept more than half the budget; since the facts
    /// block keeps to its room (`facts_share`), the block's items are worth more there than the
    /// view's least active turns: 5,000 and 0.7 took the LoCoMo dev replay from 0.885 to 0.903
    /// at 4k and from 0.940 to 0.955 at 8k. At 16k the view leaves the block more than 5,000
    /// (the same table); a higher cap holds back live history there too, and costs (8,000:
    /// 0.988 → 0.985; docs/benchmarks.md: "A relevant block's room").
    pub recall_hold_tokens: u64,
    /// How long decorate waits for the embedder to embed a new user message for recall; past
    /// it, recall searches by words only.
    pub recall_deadline_ms: u64,
    /// How long recall's searches and walk may take in decorate (after the embedding): a step
    /// not started by then is skipped (`info.recall.skipped`) and what was found is used.
    pub recall_search_ms: u64,
    /// The cosine with the message at which something found is relevant enough for its block
    /// to hold back live history (the reserved share of the budget). Below it the block only
    /// takes the room the view leaves. Default: the built-in judge's `walk_related` level,
    /// calibrated on LoCoMo dev to keep 90% of the facts that answer a question
    /// (docs/models.md), with the same embedder.
    pub recall_relevant_cosine: f32,
    /// The share of the history budget a new message's recall block may take by holding back
    /// live history (at most `recall_hold_tokens`), when what it found is relevant: the view
    /// keeps the rest, the conversation in progress. A share of the budget the episodes leaving
    /// the view leave (they stay in it for the note ask, and the block never holds them back). Measured with `recall_hold_tokens` (above);
    /// on questions about the conversation in progress (the replay's `--ask after-evidence`),
    /// 0.5 / 0.7 / 0.85 gave 4k 0.970 / 0.967 / 0.961 and 8k 0.987 / 0.990 / 0.988, against
    /// 0.885 / 0.903 / 0.909 and 0.940 / 0.955 / 0.961 about the past; earlier, with a large
    /// facts block, at 4k: a third 0.790, a half 0.846, two thirds 0.831 (docs/benchmarks.md).
    pub recall_share: f64,
    /// The most the facts block holds, as a share of the landing (the view's target): past it
    /// a fade forgets the least active sealed episodes, their facts left to recall, which brings
    /// back those a message asks about; a decorate that finds the block over its room between
    /// fades (episodes sealed since) forgets the same way. On the whole LoCoMo dev replay, kept
    /// at fades only, 4k: unbounded 0.879, 0.5 0.882, 0.25 0.888, 0.125 0.887 (8k at 0.25:
    /// 0.935, the same); kept between fades too, at 0.25: 4k 0.885, 8k 0.940
    /// (docs/benchmarks.md: "The facts block's room").
    pub facts_share: f64,
    /// A passage (what recall searches and shows as an excerpt) gathers whole units up to
    /// about this many tokens; a larger unit is a passage of its own.
    pub passage_tokens: u64,
    /// Memory across conversations (`[engine.scopes]`).
    pub scopes: scopes::ScopesConfig,
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
            lane_model_threads: 0,
            cached_memories: 256,
            cached_state_bytes: 256 << 20,
            warm_memories: 8,
            recall: true,
            recall_tokens: 2_500,
            recall_hold_tokens: 5_000,
            recall_deadline_ms: 300,
            recall_search_ms: 100,
            recall_relevant_cosine: 0.56,
            recall_share: 0.7,
            facts_share: 0.25,
            passage_tokens: passages::PASSAGE_TOKENS,
            scopes: scopes::ScopesConfig::default(),
        }
    }
}

/// Episodes out of view that decorate's `info` lists, the latest ones: the reply must not grow
/// with the whole history (`export` and `inspect` list every episode), and each listed one is
/// built on the request path (64 of them were 8% of decorate's CPU at 10k messages of agent
/// traffic).
pub const INFO_PAST_EPISODES: usize = 16;

/// Decorate's `info`: its fields, and the episodes it lists (`episodes`, its last field), kept
/// typed so the server encodes them without building a JSON value of each.
#[derive(Debug)]
pub struct DecorateInfo {
    /// Every field but `episodes`.
    pub fields: Value,
    pub episodes: Vec<EpisodeInfo>,
}

impl DecorateInfo {
    /// `info` as one JSON value (`fields` with `episodes` last), for in-process callers.
    pub fn into_value(self) -> Value {
        let mut info = self.fields;
        if let Value::Object(map) = &mut info {
            let episodes = serde_json::to_value(&self.episodes).unwrap_or_else(|_| Value::Array(Vec::new()));
            map.insert("episodes".into(), episodes);
        }
        info
    }
}

/// `info` as one map: `fields`, then `episodes`.
impl serde::Serialize for DecorateInfo {
    fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        use serde::ser::SerializeMap;
        let empty = Map::new();
        let fields = match &self.fields {
            Value::Object(map) => map,
            _ => &empty,
        };
        let mut map = s.serialize_map(Some(fields.len() + 1))?;
        for (k, v) in fields {
            map.serialize_entry(k, v)?;
        }
        map.serialize_entry("episodes", &self.episodes)?;
        map.end()
    }
}

/// One episode as decorate's `info.episodes` lists it.
#[derive(Debug, Clone, PartialEq, serde::Serialize)]
pub struct EpisodeInfo {
    pub n: u64,
    pub state: EpisodeState,
    pub turns: [u64; 2],
    pub seqs: [u64; 2],
    pub tokens: u64,
    pub activation: Option<f64>,
    pub significance: Option<f64>,
    pub facts: Vec<u64>,
}

/// A number JSON can hold (a non-finite one reads as null, as a JSON value would have it).
fn finite(x: f64) -> Option<f64> {
    x.is_finite().then_some(x)
}

/// The episodes decorate's `info` lists (every one in view, and the latest
/// [`INFO_PAST_EPISODES`] out of it, in order) and how many it leaves out.
fn info_episodes(episodes: &[records::Episode]) -> (impl Iterator<Item = &records::Episode>, usize) {
    let in_view = |e: &records::Episode| matches!(e.state, EpisodeState::Live | EpisodeState::Leaving);
    let past = episodes.iter().filter(|e| !in_view(e)).count();
    let omitted = past.saturating_sub(INFO_PAST_EPISODES);
    let mut skipped = 0;
    let listed = episodes.iter().filter(move |e| {
        if in_view(e) || skipped == omitted {
            return true;
        }
        skipped += 1;
        false
    });
    (listed, omitted)
}

#[derive(Debug, thiserror::Error)]
pub enum EngineError {
    #[error("{0}")]
    InvalidArgument(String),
    #[error("{0}")]
    NotFound(String),
    #[error("{0}")]
    Conflict(String),
    #[error("request: {0}")]
    Format(#[from] FormatError),
    #[error("store: {0}")]
    Store(#[from] StoreError),
    #[error("search index: {0}")]
    Index(String),
}

impl EngineError {
    /// The wire form: a stable code, a message for people; internal causes are logged.
    pub fn to_wire(&self) -> ErrorBody {
        match self {
            EngineError::InvalidArgument(m) => ErrorBody::new(ErrorCode::InvalidArgument, m.clone()),
            EngineError::NotFound(m) => ErrorBody::new(ErrorCode::NotFound, m.clone()),
            EngineError::Conflict(m) => ErrorBody::new(ErrorCode::Conflict, m.clone()),
            EngineError::Format(e) => ErrorBody::new(ErrorCode::InvalidArgument, e.to_string()),
            EngineError::Store(e) => {
                tracing::error!(error = %e, "store failure");
                ErrorBody::new(ErrorCode::Internal, "storage failure; see the daemon log")
            }
            EngineError::Index(e) => {
                tracing::error!(error = %e, "search index failure");
                ErrorBody::new(ErrorCode::Internal, "search index failure; see the daemon log")
            }
        }
    }
}

pub struct Engine {
    store: Arc<Store>,
    models: Option<Models>,
    config: EngineConfig,
    locks: Mutex<HashMap<String, Arc<Mutex<()>>>>,
    /// Per memory, held while its search indexes are written or dropped: the lane writes them
    /// without the memory's lock, and `forget_memory` must not race it (a write after the drop
    /// would leave documents of a memory the store no longer has).
    index_locks: Mutex<HashMap<String, Arc<Mutex<()>>>>,
    /// Memories whose indexes the start found behind the store and that are not caught up yet
    /// (a thread does it once the socket is open; their lane does it before its next job, and
    /// `quiet` waits for it), each with whether its indexes may be searched meanwhile: true
    /// when they only lack the newest documents, false when they must be rebuilt.
    indexes_behind: Mutex<std::collections::BTreeMap<String, bool>>,
    notify: Mutex<Option<std::sync::mpsc::Sender<String>>>,
    /// Loaded states of recently used memories, equal to what the store holds: every op that
    /// writes a memory saves through its state under the memory's lock, then puts it back.
    cache: Mutex<StateCache>,
    note_costs: NoteCosts,
    lane_counters: jobs::LaneCounters,
    /// Word and vector indexes of facts and passages, under `<data>/index` (None when they
    /// cannot be opened: recall is then off, and says so in the log).
    indexes: Option<crate::index::Indexes>,
    /// Recall's embeddings on the request path: one at a time, dropped once their caller gave up.
    query_embedder: Option<crate::models::queue::QueryEmbedder>,
    /// Agents' scope facts as last read, by version (the cross-memory block's reads).
    scope_facts_cache: scopes::FactsCache,
    /// What the warm-up after a start has done (`stats`).
    warmth: warm::Warmth,
}

/// The loaded states of the memories used last, kept between ops: at most `cached_memories`
/// of them and `cached_state_bytes` of heap between them (by [`State::resident_bytes`]), the
/// least recently used leaving first. A bound in bytes as well as in memories: a host's many
/// small memories all stay (100 memories in turn through a cache of 64 loaded a state for
/// every decorate), and a few large ones cannot take gigabytes.
#[derive(Default)]
struct StateCache {
    states: HashMap<String, (State, usize)>,
    order: std::collections::VecDeque<String>,
    bytes: usize,
}

impl StateCache {
    fn get(&self, memory: &str) -> Option<&State> {
        self.states.get(memory).map(|(st, _)| st)
    }

    fn take(&mut self, memory: &str) -> Option<State> {
        let (st, size) = self.states.remove(memory)?;
        self.order.retain(|m| m != memory);
        self.bytes -= size;
        Some(st)
    }

    #[cfg(test)]
    fn clear(&mut self) {
        *self = StateCache::default();
    }

    /// Keeps `st` as the most recently used, then lets the least recently used go while over
    /// either bound (the one just kept stays, however large).
    fn keep(&mut self, st: State, max_states: usize, max_bytes: usize) {
        let id = st.memory.id.clone();
        self.take(&id);
        let size = st.resident_bytes();
        self.bytes += size;
        self.order.push_back(id.clone());
        self.states.insert(id, (st, size));
        while self.order.len() > 1 && (self.order.len() > max_states || self.bytes > max_bytes) {
            if let Some(old) = self.order.pop_front() {
                if let Some((_, size)) = self.states.remove(&old) {
                    self.bytes -= size;
                }
            }
        }
    }
}

/// Unix seconds now, or the caller's injected time.
pub(crate) fn now_or(now: Option<f64>) -> Result<f64, EngineError> {
    let now = now.unwrap_or_else(|| {
        std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map(|d| d.as_secs_f64())
            .unwrap_or(0.0)
    });
    if !now.is_finite() || now < 0.0 {
        return Err(EngineError::InvalidArgument(format!(
            "now must be unix seconds, got {now}"
        )));
    }
    Ok(now)
}

impl Engine {
    /// `models` is None only where a judge is not wanted (tests of the mechanism alone); then
    /// cuts go by size and facts are not scored against episodes.
    pub fn new(store: Arc<Store>, models: Option<Models>, config: EngineConfig) -> Engine {
        let note_costs = NoteCosts::new(&config.note_tool, &config.scopes);
        let dim = models.as_ref().map(|m| m.embedder.id().dim);
        let indexes = if !config.recall {
            None
        } else {
            match crate::index::Indexes::open(&store.path().join("index"), dim) {
                Ok(ix) => Some(ix),
                Err(e) => {
                    tracing::error!(error = %e, "cannot open the search indexes; recall is off");
                    None
                }
            }
        };
        // The new user message's embedding serves recall and the cross-memory block.
        let query_embedder = models
            .as_ref()
            .map(|m| crate::models::queue::QueryEmbedder::new(m.request_embedder.clone(), m.priority.clone()));
        Engine {
            query_embedder,
            scope_facts_cache: scopes::FactsCache::default(),
            warmth: warm::Warmth::default(),
            store,
            models,
            config,
            locks: Mutex::new(HashMap::new()),
            index_locks: Mutex::new(HashMap::new()),
            indexes_behind: Mutex::default(),
            notify: Mutex::new(None),
            cache: Mutex::default(),
            note_costs,
            lane_counters: jobs::LaneCounters::default(),
            indexes,
        }
    }

    pub fn config(&self) -> &EngineConfig {
        &self.config
    }

    /// The daemon is stopping: background model calls end before their next batch
    /// (`Priority::stop`), and the jobs that made them stay queued as they were.
    pub fn stop_background(&self) {
        if let Some(m) = &self.models {
            m.priority.stop();
        }
    }

    /// Asked of a lane job after it judged, before it applies: once the daemon stops
    /// ([`Engine::stop_background`]) its model calls may have been cut short, and some failures
    /// leave a partial result (a fact left unscored), so nothing of it is applied nor counted
    /// as failed; the job runs again at the next start.
    pub(crate) fn cut_short_by_stop(&self, memory: &str, job: u64) -> bool {
        let stopping = self.models.as_ref().is_some_and(|m| m.priority.stopping());
        if stopping {
            tracing::info!(memory, job, "background job left for the next start");
        }
        stopping
    }

    fn lock(&self, memory: &str) -> Arc<Mutex<()>> {
        let mut locks = self.locks.lock().unwrap_or_else(|e| e.into_inner());
        locks.entry(memory.to_owned()).or_default().clone()
    }

    fn index_lock(&self, memory: &str) -> Arc<Mutex<()>> {
        let mut locks = self.index_locks.lock().unwrap_or_else(|e| e.into_inner());
        locks.entry(memory.to_owned()).or_default().clone()
    }

    /// The memory's state: the cached one, else loaded from the store. Call under the memory's
    /// lock; give it back with [`Engine::keep`] once saved (on an error it is simply dropped).
    fn take_state(&self, memory: &str, now: f64) -> Result<State, EngineError> {
        let cached = self.cache.lock().unwrap_or_else(|e| e.into_inner()).take(memory);
        match cached {
            Some(st) => Ok(st),
            None => Ok(self.store.read(|r| State::load(r, memory, now))?),
        }
    }

    /// The memory's facts read before its lock is taken, when its cached state does not hold
    /// them all (for [`Engine::take_whole_state`]): reading 100k facts takes ~80 ms, which a
    /// decorate of the memory would otherwise wait for. None when the cached state holds them.
    fn read_facts_unlocked(&self, memory: &str) -> Result<Option<Vec<records::Fact>>, EngineError> {
        let whole = {
            let cache = self.cache.lock().unwrap_or_else(|e| e.into_inner());
            cache.get(memory).is_some_and(|st| st.facts.is_whole())
        };
        if whole {
            return Ok(None);
        }
        let prefix = crate::store::keys::memory_prefix(memory);
        Ok(Some(self.store.read(|r| r.scan(crate::store::Table::Facts, &prefix))?))
    }

    /// [`Engine::take_state`] with every fact read (a lane job judges and changes old facts;
    /// a request reads only the ones it shows), most of them from `read` (taken before the
    /// lock: only a lane changes a stored fact, and a memory's jobs run one at a time).
    fn take_whole_state(&self, memory: &str, read: Option<Vec<records::Fact>>) -> Result<State, EngineError> {
        let mut st = self.take_state(memory, 0.0)?;
        if let Some(facts) = read {
            st.add_read_facts(facts);
        }
        self.store.read(|r| st.load_facts(r))?;
        Ok(st)
    }

    /// Saves the state in one transaction and keeps it for the next op.
    fn save_and_keep(&self, mut st: State) -> Result<(), EngineError> {
        self.store.write(|w| st.save(w))?;
        st.mark_saved();
        self.keep(st);
        Ok(())
    }

    /// Reads from the memory's state under its lock without changing it (a lane job copies
    /// what it will judge): the cached state, else loaded once and then kept; every fact read.
    fn peek<T>(&self, memory: &str, f: impl FnOnce(&State) -> T) -> Result<T, EngineError> {
        self.peek_from(memory, |_| None, f)
    }

    /// [`Engine::peek`] with older messages read into the state first: `from` names their
    /// first seq (a handoff reads the conversation since its last extraction).
    fn peek_from<T>(
        &self,
        memory: &str,
        from: impl FnOnce(&State) -> Option<u64>,
        f: impl FnOnce(&State) -> T,
    ) -> Result<T, EngineError> {
        let read = self.read_facts_unlocked(memory)?;
        let lock = self.lock(memory);
        let _held = lock.lock().unwrap_or_else(|e| e.into_inner());
        let mut st = self.take_whole_state(memory, read)?;
        if let Some(seq) = from(&st) {
            self.store.read(|r| st.load_messages_from(r, seq))?;
        }
        let out = f(&st);
        if st.existed {
            self.keep(st);
        }
        Ok(out)
    }

    fn is_cached(&self, memory: &str) -> bool {
        let cache = self.cache.lock().unwrap_or_else(|e| e.into_inner());
        cache.get(memory).is_some()
    }

    /// Loads the memory's state into the cache as a decorate would (not every fact).
    fn cache_state(&self, memory: &str) -> Result<(), EngineError> {
        let lock = self.lock(memory);
        let _held = lock.lock().unwrap_or_else(|e| e.into_inner());
        let st = self.take_state(memory, 0.0)?;
        if st.existed {
            self.keep(st);
        }
        Ok(())
    }

    /// Puts a state equal to what the store holds back in the cache (under the memory's lock).
    fn keep(&self, mut st: State) {
        st.trim();
        let mut cache = self.cache.lock().unwrap_or_else(|e| e.into_inner());
        cache.keep(st, self.config.cached_memories, self.config.cached_state_bytes);
    }

    /// Queues the indexing of facts this op wrote and of episodes sealed without passages.
    fn queue_indexing(&self, st: &mut State, now: f64) {
        if self.indexes.is_some() && (st.wrote_facts() || st.needs_passages()) {
            st.push_job(JobKind::Index, now);
        }
    }

    fn ratio(&self, st: &State, model: Option<&str>) -> Option<f64> {
        model.and_then(|m| st.memory.ratios.get(m).copied())
    }

    /// decorate: store what is new, take notes, seal, sleep or fade, assemble.
    pub fn decorate(&self, args: DecorateArgs) -> Result<DecorateReply, EngineError> {
        let (request, info) = self.decorate_as(args, Passed::default(), |r| r.into_value())?;
        Ok(DecorateReply {
            request,
            info: info.into_value(),
        })
    }

    /// [`Engine::decorate`], the assembled request handed to `finish` while the memory's state
    /// is held: the server encodes the reply's request there, from the stored messages in view
    /// as they are, instead of copying them into a JSON value first (in-process, over a view of
    /// 72 KB, a decorate's median 404 → 380 µs; docs/benchmarks.md). `passed`: what the server
    /// kept of the request as bytes (its tools, its `tools` then null; its messages' bytes), so
    /// that the reply writes them back as they came (`recalld_protocol::raw`). Returns what
    /// `finish` made and `info`.
    pub fn decorate_as<T>(
        &self,
        mut args: DecorateArgs,
        passed: Passed,
        finish: impl for<'s> FnOnce(formats::Rendered<'s>) -> T,
    ) -> Result<(T, DecorateInfo), EngineError> {
        let now = now_or(args.now)?;
        // Taken, not copied: the request's messages become the parsed messages.
        let mut parsed = formats::parse_request_with(std::mem::take(&mut args.request), passed.tools, passed.items)?;
        // A user message ending the request is embedded for recall before the lock is taken.
        let query = self.recall_query(&args.memory, &parsed, args.agent.as_deref(), now);
        let lock = self.lock(&args.memory);
        let _held = lock.lock().unwrap_or_else(|e| e.into_inner());
        // A dry run works on a copy and keeps nothing: of the cached state (equal to the
        // store) when there is one, else loaded.
        let mut st = if args.dry_run {
            let cached = {
                let cache = self.cache.lock().unwrap_or_else(|e| e.into_inner());
                cache.get(&args.memory).cloned()
            };
            match cached {
                Some(st) => st,
                None => {
                    let st = self.store.read(|r| State::load(r, &args.memory, now))?;
                    if st.existed {
                        self.keep(st.clone());
                    }
                    st
                }
            }
        } else {
            self.take_state(&args.memory, now)?
        };
        if let Some(c) = args.ceiling {
            if c == 0 {
                return Err(EngineError::InvalidArgument(
                    "ceiling must be a positive number of tokens".into(),
                ));
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
        let notes::Incoming {
            messages: incoming,
            sent_at,
            notes,
        } = self.clean_incoming(&parsed.history, &self.offered_scope_tools(&st));
        let previous_user_at = st.memory.last_user_at;
        // Notes sent back in a request are checked against every note call taken so far.
        if !notes.is_empty() && !st.whole() {
            self.store.read(|r| st.load_whole(r))?;
            st.keep_whole();
        }
        // Fingerprints of what the request resends, hashed once however often it is aligned.
        let incoming_fp: Vec<u64> = match args.history {
            HistoryMode::Delta => Vec::new(),
            _ => incoming.iter().map(|m| m.fingerprint()).collect(),
        };
        let (mut stored_seqs, mut plan) = align(&st, &incoming, &incoming_fp, args.history);
        // Aligned against the loaded history (what is in view and the recent turns), a request
        // that does not simply extend it may start earlier: a client resending everything from
        // the first message is lined up by the chain of the first loaded message; anything else
        // (an edit of older history) is aligned again with the whole history.
        let full = args.history != HistoryMode::Delta && !st.whole();
        // What the alignment read, for `info`: the loaded history, the chain, or everything.
        let mut aligned_on = "loaded";
        if full && plan.aligned != "extends" {
            if let Some(from) = st.resent_through(&incoming_fp) {
                aligned_on = "chain";
                plan = ingest::Plan {
                    supersede_from: None,
                    new: incoming[from..].iter().map(|m| m.as_ref().clone()).collect(),
                    aligned: "extends",
                    // What is loaded ends the request's resent part.
                    resent: from.checked_sub(stored_seqs.len()).map(|at| ingest::Resent {
                        stored: 0,
                        incoming: at,
                        len: stored_seqs.len(),
                    }),
                };
            }
        }
        // A request that is no extension of the loaded history reads the whole history only
        // when its first message may stand before the loaded part (the prints say where each
        // history message's fingerprint stands): a new session in a long memory, sharing
        // nothing with it, does not read every message the memory ever stored.
        if full && plan.aligned != "extends" && aligned_on == "loaded" {
            if let Some(&fp) = incoming_fp.first() {
                if !self.store.read(|r| st.may_stand_before_loaded(r, fp))? {
                    aligned_on = "prints";
                }
            }
        }
        let mut kept = plan.supersede_from.unwrap_or(stored_seqs.len());
        let paired = pairing::check_tool_outputs(st.history().take(kept), &plan.new, &parsed);
        let settled = aligned_on == "prints" && paired.is_ok();
        if (plan.aligned != "extends" || paired.is_err()) && full && !settled {
            self.store.read(|r| st.load_whole(r))?;
            aligned_on = "whole";
            (stored_seqs, plan) = align(&st, &incoming, &incoming_fp, args.history);
            kept = plan.supersede_from.unwrap_or(stored_seqs.len());
            pairing::check_tool_outputs(st.history().take(kept), &plan.new, &parsed)?;
        } else {
            paired?;
        }
        if let Some(from) = plan.supersede_from {
            for &seq in &stored_seqs[from..] {
                st.message_mut(seq).superseded_at = Some(now);
            }
        }
        // The request's messages that are stored history, by the seq they are stored under and
        // their place in the request: what it resent unchanged, and (below) what it holds new.
        // Assembly renders these from the request's own values, moved, instead of copying the
        // stored ones.
        let mut from_request: Vec<(u64, usize)> = plan.resent.map_or_else(Vec::new, |r| {
            // Read with `get`: a pairing that went wrong costs copies, never a panic (and a
            // message moved in is shown only when equal to the stored one).
            (0..r.len)
                .filter_map(|k| Some((*stored_seqs.get(r.stored + k)?, (*sent_at.get(r.incoming + k)?)?)))
                .collect()
        });
        for &(seq, i) in &from_request {
            if let Some(sent) = parsed.history.get(i) {
                st.adopt_wire(seq, sent);
            }
        }
        let mut new_user = false;
        let stored_count = plan.new.len();
        // The new messages end the request (every alignment takes them from its tail).
        let new_from = incoming.len().saturating_sub(stored_count);
        for (k, m) in std::mem::take(&mut plan.new).into_iter().enumerate() {
            new_user |= m.role == Role::User;
            let stored = StoredMessage::new(&st.memory, m, now, Source::Request);
            if let Some(&Some(at)) = sent_at.get(new_from + k) {
                from_request.push((stored.seq, at));
            }
            if stored.message.role == Role::User {
                st.memory.turn = stored.turn;
                st.memory.last_user_at = Some(now);
                st.memory.last_user_fingerprint = Some(records::fingerprint_hex(stored.fingerprint));
            }
            st.push_message(stored);
        }

        // 2. Notes the model wrote that we have not taken yet (a client that skipped report).
        let mut facts_written = 0;
        for note in notes {
            facts_written += self.take_note(&mut st, note, now, Source::Request);
        }

        // 3. Seal what is acknowledged and over. (The states are noted first: the decision
        // kept for `inspect` says which episodes this decorate moved.)
        let before = (!args.dry_run).then(|| decisions::Before::of(&st));
        seal_acknowledged(&mut st, now);

        // 4. Sleep or fade.
        let sleep = new_user && previous_user_at.is_some_and(|t| now - t >= self.config.sleep_hours * 3600.0);
        let ratio = self.ratio(&st, parsed.model.as_deref());
        let mut measure = self.measure(&st, &parsed, ratio);
        let over = measure.view > measure.budget.history;
        let mut faded = false;
        let mut cut_report = None;
        // The facts block's room is a share of the landing (docs/benchmarks.md: "The facts
        // block's room").
        let facts_room = (measure.budget.landing as f64 * self.config.facts_share.max(0.0)) as u64;
        if (sleep || over) && !st.any_leaving() {
            cut_report = self.cut(&mut st, measure.budget.history, true);
            faded = fade(&mut st, measure.budget.landing, measure.view, facts_room, now, ratio);
            measure = self.measure(&st, &parsed, ratio);
        } else if measure.facts > facts_room && keep_facts_room(&mut st, facts_room, now) {
            faded = true;
            measure = self.measure(&st, &parsed, ratio);
        }
        // Over the ceiling while episodes leave (no fade until they seal): closed history is cut
        // all the same, so assembly can hold its episodes back from this request.
        if cut_report.is_none() && measure.budget.fixed + measure.view > measure.budget.ceiling {
            cut_report = self.cut(&mut st, measure.budget.history, true);
        }

        // 5. Recall for a new user message, in what the history budget leaves; the block is
        // stored with the message and counted in its size from now on.
        let mut recall_info = Value::Null;
        let new_user_seq = st
            .history()
            .last()
            .filter(|m| new_user && m.message.role == Role::User)
            .map(|m| m.seq);
        // The block gets at least a share of the budget when what it found is relevant: when
        // the view leaves less (episodes are leaving and cannot fade yet), the least active live
        // episodes are held back from this request to make room (`hidden_for_recall`); the next
        // fade settles it. A message nothing relevant answers ("thanks!") gets only what is free.
        let mut recall_limit = None;
        let mut injected = None;
        if let (Some(q), Some(seq)) = (&query, new_user_seq) {
            // The cross-memory block first, in what the view leaves free (it holds nothing
            // back); recall then fills what remains.
            let free = measure.budget.history.saturating_sub(measure.view);
            let mut across = None;
            let mut across_info = Value::Null;
            if let Some(agent) = st.memory.agent.clone() {
                let user = st.memory.user.clone();
                let (section, info) = self.across_block(
                    &args.memory,
                    &agent,
                    user.as_deref(),
                    (&q.text, q.vectors.first().map(Vec::as_slice)),
                    free,
                    now,
                )?;
                across_info = info;
                if let Some(a) = &section {
                    injected = Some((
                        agent,
                        user,
                        seq,
                        a.items.iter().map(|i| i.n).collect::<Vec<_>>(),
                        a.documents.clone(),
                    ));
                }
                across = section;
            }
            let across_tokens = across.as_ref().map_or(0, |a| a.tokens);
            measure.view += tokens::corrected(across_tokens, ratio);
            // What live and leaving episodes hold in view, each measured once.
            let (mut live, mut leaving) = (0u64, 0u64);
            for e in &st.episodes {
                match e.state {
                    EpisodeState::Live => live += assemble::view_tokens(&st, e, ratio),
                    EpisodeState::Leaving => leaving += assemble::view_tokens(&st, e, ratio),
                    _ => {}
                }
            }
            // The share is of the budget the leaving episodes leave: they stay in view for the
            // note ask (the block never holds them back), so a share of the whole budget would
            // take its room from the live history alone, the conversation in progress.
            let share = self.config.recall_share.clamp(0.0, 1.0);
            let reserve = ((measure.budget.history.saturating_sub(leaving) as f64 * share) as u64)
                .min(self.config.recall_hold_tokens);
            // What the view leaves free: a relevant block may take all of it (it costs the view
            // nothing); a block for a message nothing relevant answers, at most recall_tokens.
            let unused = measure.budget.history.saturating_sub(measure.view);
            let free = unused.min(self.config.recall_tokens);
            // Holding back frees at most what live and leaving episodes hold in view: the rest
            // (the turn in progress, history not cut into episodes yet) stays, and the block
            // must fit beside it.
            let unholdable = measure.view.saturating_sub(live + leaving);
            let reserved = unused
                .max(reserve)
                .min(measure.budget.history.saturating_sub(unholdable));
            // The live episodes a block of all that room would hold back (in the order
            // assembly does): the block may show excerpts of them, since they leave the view.
            let mut hideable = Vec::new();
            let mut freed = 0;
            if reserved > unused {
                let act = assemble::in_view_activations(&st);
                for e in assemble::live_by_activation(&st, &act) {
                    if unused + freed >= reserved {
                        break;
                    }
                    freed += assemble::view_tokens(&st, e, ratio);
                    hideable.push(e.n);
                }
            }
            let room = recall::Room {
                free,
                reserved,
                hideable,
            };
            let has_own = self.indexes.is_some() && (st.memory.next_fact > 0 || st.memory.next_passage > 0);
            let recalled = if has_own {
                self.recall(&st, q, seq, &room, now)
            } else {
                recall::Recalled::nothing()
            };
            measure.view -= tokens::corrected(across_tokens, ratio);
            recall_info = recalled.info;
            if !across_info.is_null() {
                recall_info = if recall_info.is_null() { json!({}) } else { recall_info };
                recall_info["across"] = across_info;
            }
            let excerpts_at = recalled.excerpts_at;
            let block = match (recalled.block, across) {
                (Some(mut b), a) => {
                    b.tokens += a.as_ref().map_or(0, |a| a.tokens);
                    b.across = a;
                    Some(b)
                }
                (None, Some(a)) => Some(records::RecallBlock {
                    seq,
                    turn: st.memory.turn,
                    at: now,
                    text: String::new(),
                    tokens: a.tokens,
                    items: Vec::new(),
                    distilled: false,
                    across: Some(a),
                    excerpts: Vec::new(),
                }),
                (None, None) => None,
            };
            if let Some(block) = block {
                let m = st.message_mut(seq);
                m.tokens = m.tokens.saturating_add(block.tokens as u32);
                measure.view += tokens::corrected(block.tokens, ratio);
                st.put_recalled(block, excerpts_at);
                if measure.view > measure.budget.history {
                    recall_limit = Some(measure.budget.fixed + measure.budget.history);
                }
            }
        }
        // The previous message's block is distilled now that the conversation moved on (if its
        // turn's last reply has not had it distilled already).
        if let Some(seq) = new_user_seq {
            let previous = st
                .recalls
                .range(..seq)
                .next_back()
                .filter(|(_, b)| !b.distilled)
                .map(|(s, _)| *s);
            if let Some(p) = previous {
                st.push_job(JobKind::Distill { seq: p }, now);
            }
        }
        self.queue_indexing(&mut st, now);

        st.memory.last_budget = Some(measure.budget.history);
        // A turn just closed: its units are judged in the lane, so a later cut is arithmetic.
        if new_user && self.models.is_some() && cut::needs_scoring(&st) {
            st.push_job(JobKind::ScoreUnits, now);
        }

        // 6. Assemble.
        // The provider holds the history when `provider_history` is set: assembly sends the
        // request's own items then, so they stay where they are.
        let mut sent = HashMap::new();
        if parsed.provider_history.is_none() {
            let mut history: Vec<Option<formats::Message>> =
                std::mem::take(&mut parsed.history).into_iter().map(Some).collect();
            sent = from_request
                .into_iter()
                .filter_map(|(seq, i)| Some((seq, history.get_mut(i)?.take()?)))
                .collect();
        }
        let (request, assembled) = self.assemble(&st, &mut parsed, ratio, &measure, recall_limit, sent);
        let request = finish(request);
        st.memory.last_estimate = parsed.model.clone().map(|model| records::Estimate {
            model,
            tokens: assembled.tokens,
        });
        st.memory.updated_at = now;
        let (listed, omitted) = info_episodes(&st.episodes);
        let listed: Vec<&records::Episode> = listed.collect();
        let mut shown = vec![false; st.episodes.len()];
        for e in &listed {
            shown[e.n as usize] = true;
        }
        let activations = activation::of_episodes_where(st.episodes.len(), &st.traces, now, |n| {
            shown.get(n as usize).copied().unwrap_or(false)
        });
        let significances = activation::significance_of_episodes(st.episodes.len(), &st.traces);
        // What the decision keeps of recall, before recall's info moves into the reply.
        let decided_recall = before.is_some().then(|| decisions::recall_of(&recall_info));
        // Typed, not JSON maps: the server encodes them straight into the reply (as maps built,
        // walked, encoded and dropped they were ~7% of the request path's CPU at 10k messages).
        let episodes: Vec<EpisodeInfo> = listed
            .iter()
            .map(|e| EpisodeInfo {
                n: e.n,
                state: e.state,
                turns: [e.first_turn, e.last_turn],
                seqs: [e.first_seq, e.last_seq],
                tokens: e.tokens,
                activation: finite(activations[e.n as usize]),
                significance: finite(significances[e.n as usize]),
                facts: e.facts.clone(),
            })
            .collect();
        let seqs = |v: &[u64]| Value::Array(v.iter().map(|&n| n.into()).collect());
        let info = Value::Object(Map::from_iter([
            ("format".to_owned(), json!(parsed.format)),
            ("stored".to_owned(), stored_count.into()),
            (
                "superseded".to_owned(),
                plan.supersede_from.map(|i| stored_seqs.len() - i).unwrap_or(0).into(),
            ),
            ("aligned".to_owned(), plan.aligned.into()),
            ("aligned_on".to_owned(), aligned_on.into()),
            ("turn".to_owned(), st.memory.turn.into()),
            ("facts_written".to_owned(), facts_written.into()),
            ("sleep".to_owned(), sleep.into()),
            ("faded".to_owned(), faded.into()),
            ("cut".to_owned(), json!(cut_report)),
            (
                "lane".to_owned(),
                json!(self.store.read(|r| state::lane_of(r, &st.memory))?),
            ),
            ("dry_run".to_owned(), args.dry_run.into()),
            ("provider_history".to_owned(), parsed.provider_history.into()),
            ("ceiling".to_owned(), measure.budget.ceiling.into()),
            ("budget".to_owned(), measure.budget.history.into()),
            ("landing".to_owned(), measure.budget.landing.into()),
            ("fixed".to_owned(), measure.budget.fixed.into()),
            ("room".to_owned(), measure.budget.room.into()),
            ("typical_turn".to_owned(), measure.budget.typical_turn.into()),
            ("view_tokens".to_owned(), measure.view.into()),
            ("request_tokens".to_owned(), assembled.tokens.into()),
            ("ratio".to_owned(), json!(ratio)),
            ("note_ask".to_owned(), assembled.note_ask.into()),
            ("hidden_for_ceiling".to_owned(), seqs(&assembled.hidden)),
            ("hidden_for_recall".to_owned(), seqs(&assembled.hidden_for_recall)),
            ("in_view".to_owned(), seqs(&assembled.in_view)),
            ("recall".to_owned(), recall_info),
            ("episodes_omitted".to_owned(), omitted.into()),
        ]));
        if let Some(before) = before {
            let (faded, leaving, forgotten) = decisions::moved(&before, &st);
            let n = st.memory.next_decision;
            st.memory.next_decision += 1;
            let decision = records::Decision {
                n,
                at: now,
                turn: st.memory.turn,
                seq: st.memory.next_seq.checked_sub(1),
                stored: stored_count as u64,
                ceiling: measure.budget.ceiling,
                budget: measure.budget.history,
                fixed: measure.budget.fixed,
                room: measure.budget.room,
                landing: measure.budget.landing,
                view_tokens: measure.view,
                request_tokens: assembled.tokens,
                in_view: decisions::in_view(&st, &assembled.hidden, &assembled.hidden_for_recall),
                faded,
                leaving,
                forgotten,
                sleep,
                hidden_for_ceiling: assembled.hidden,
                hidden_for_recall: assembled.hidden_for_recall,
                note_ask: assembled.note_ask,
                cut: cut_report.map(|c| decisions::cut_of(c.units, c.scored, c.episodes)),
                recall: decided_recall.flatten(),
            };
            let queued = st.has_new_jobs();
            // The new user message joins its user's hot turns, and what the cross-memory block
            // showed is audited, in the same transaction (under the agent's lock: other
            // conversations of the user write the same hot record).
            let hot = match (&st.memory.agent, new_user_seq) {
                (Some(agent), Some(seq)) => Some((
                    agent.clone(),
                    st.memory.user.clone(),
                    st.messages
                        .iter()
                        .find(|m| m.seq == seq)
                        .map(|m| m.message.text.clone())
                        .unwrap_or_default(),
                )),
                _ => None,
            };
            let agent_lock = hot.as_ref().map(|(a, _, _)| self.agent_lock(a));
            let _agent_held = agent_lock.as_ref().map(|l| l.lock().unwrap_or_else(|e| e.into_inner()));
            self.store.write(|w| {
                st.save(w)?;
                decisions::put(w, &args.memory, &decision)?;
                if let Some((agent, user, text)) = &hot {
                    let turn = scopes::hot::HotTurn {
                        memory: args.memory.clone(),
                        role: "user".into(),
                        text: text.clone(),
                        at: now,
                    };
                    scopes::hot::push_turn(w, agent, user.as_deref(), turn)?;
                }
                if let Some((agent, user, seq, items, documents)) = &injected {
                    scopes::audit_inject(w, agent, &args.memory, user.as_deref(), (*seq, items, documents), now)?;
                }
                Ok(())
            })?;
            st.mark_saved();
            self.keep(st);
            if queued {
                self.notify_lane(&args.memory);
            }
        }
        Ok((request, DecorateInfo { fields: info, episodes }))
    }

    /// report: store the reply, take its note, learn the size ratio, cut long history.
    pub fn report(&self, args: ReportArgs) -> Result<ReportReply, EngineError> {
        let now = now_or(args.now)?;
        let parsed = formats::parse_response(&args.response)?;
        // The recall tool's searches embed their queries: before the memory's lock. A failed
        // search costs the model its results, never the reply.
        let searched = self
            .recall_tool_searches(&args.memory, &parsed, now)
            .unwrap_or_else(|e| {
                tracing::warn!(memory = %args.memory, error = %e, "the recall tool's search failed");
                Vec::new()
            });
        let lock = self.lock(&args.memory);
        let _held = lock.lock().unwrap_or_else(|e| e.into_inner());
        let mut st = self.take_state(&args.memory, now)?;
        let tool = self.config.note_tool.clone();
        // The scope tools are ours only where we offered them: a memory that names an agent.
        let scope_tools = self.offered_scope_tools(&st);
        let (mut response, mut removed) = formats::remove_tool_calls(&args.response, &tool);
        let mut remembered = Vec::new();
        for name in &scope_tools {
            let (rest, calls) = formats::remove_tool_calls(&response, name);
            response = rest;
            if *name == self.config.scopes.remember_tool {
                remembered.extend(calls.iter().cloned());
            }
            removed.extend(calls);
        }
        // A reply message as the client keeps it: without our calls.
        let without_ours = |m: &formats::Message| {
            scope_tools
                .iter()
                .try_fold(m.without_tool_calls(&tool)?, |m, name| m.without_tool_calls(name))
        };
        let kept: Vec<_> = parsed.messages.iter().filter_map(without_ours).collect();
        if retry::already_reported(&st.messages, &kept) {
            tracing::debug!(memory = %args.memory, "report retried; already stored");
            let again = retry::again(&response, &removed)?;
            drop(st);
            return Ok(ReportReply { response, again });
        }
        let mut notes = Vec::new();
        for m in &parsed.messages {
            for c in m.tool_calls.iter().filter(|c| c.name == tool) {
                notes.push(NoteCall {
                    call: c.clone(),
                    message: m.clone(),
                });
            }
            // What the client will hold in its history: the reply without our calls.
            if let Some(rest) = without_ours(m) {
                let stored = StoredMessage::new(&st.memory, rest, now, Source::Reply);
                st.push_message(stored);
            }
        }
        for note in notes {
            self.take_note(&mut st, note, now, Source::Reply);
        }
        scopes::tools::attach_searches(&mut st, searched, now);
        seal_acknowledged(&mut st, now);
        // The provider's count against our estimate of the request we returned.
        if let (Some(usage), Some(est)) = (&parsed.usage, &st.memory.last_estimate) {
            if parsed
                .model
                .as_deref()
                .is_none_or(|m| m.starts_with(&est.model) || est.model.starts_with(m))
            {
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
        // A reply that ends the turn (text, no tool calls) shows what the turn's recall block
        // was used for: the lane distills the block now, before the next message needs room.
        let ends_turn = kept
            .last()
            .is_some_and(|m| m.role == Role::Assistant && m.tool_calls.is_empty() && !m.text.trim().is_empty());
        if ends_turn {
            let turn = st.memory.turn;
            let open = st
                .recalls
                .values()
                .rev()
                .find(|b| b.turn == turn && !b.distilled)
                .map(|b| b.seq);
            if let Some(seq) = open {
                st.push_job(JobKind::Distill { seq }, now);
            }
            // What the exchange leads to is judged now, so the next message finds it ready.
            if self.models.is_some() && self.indexes.is_some() && st.memory.next_fact > 0 {
                st.push_job(JobKind::Walk, now);
            }
        }
        self.queue_indexing(&mut st, now);
        st.memory.updated_at = now;
        let again = retry::again(&response, &removed)?;
        let queued = st.has_new_jobs();
        // The turn's final reply joins its user's hot turns (same transaction, agent's lock).
        let hot = match (&st.memory.agent, kept.last().filter(|_| ends_turn)) {
            (Some(agent), Some(m)) => Some((agent.clone(), st.memory.user.clone(), m.text.clone())),
            _ => None,
        };
        // Working notes and core blocks the model saved with the remember tool (a malformed
        // call saves nothing; an empty note only clears a block).
        let notes_saved: Vec<formats::Remember> = remembered
            .iter()
            .filter_map(|c| match formats::remember_arguments(c) {
                Ok(r) if r.block.is_some() || !r.note.trim().is_empty() => Some(r),
                Ok(_) => None,
                Err(e) => {
                    tracing::warn!(memory = %args.memory, error = %e, "a remember call that cannot be read saves nothing");
                    None
                }
            })
            .collect();
        let agent = st
            .memory
            .agent
            .clone()
            .filter(|_| hot.is_some() || !notes_saved.is_empty());
        let agent_lock = agent.as_ref().map(|a| self.agent_lock(a));
        let _agent_held = agent_lock.as_ref().map(|l| l.lock().unwrap_or_else(|e| e.into_inner()));
        self.store.write(|w| {
            st.save(w)?;
            if let Some((agent, user, text)) = &hot {
                let turn = scopes::hot::HotTurn {
                    memory: args.memory.clone(),
                    role: "assistant".into(),
                    text: text.clone(),
                    at: now,
                };
                scopes::hot::push_turn(w, agent, user.as_deref(), turn)?;
            }
            if let (Some(agent), false) = (&agent, notes_saved.is_empty()) {
                scopes::tools::save_working_notes(
                    w,
                    self,
                    agent,
                    st.memory.user.as_deref(),
                    &args.memory,
                    &notes_saved,
                    now,
                )?;
            }
            Ok(())
        })?;
        st.mark_saved();
        self.keep(st);
        if queued {
            self.notify_lane(&args.memory);
        }
        Ok(ReportReply { response, again })
    }

    /// Everything stored for a memory: messages, episodes, traces, facts.
    pub fn export(&self, memory: &str) -> Result<Value, EngineError> {
        let st = self.store.read(|r| {
            let mut st = State::load(r, memory, 0.0)?;
            st.load_messages_from(r, 0)?;
            st.load_facts(r)?;
            Ok(st)
        })?;
        if !st.existed {
            return Err(EngineError::NotFound(format!("no memory {memory:?}")));
        }
        // The record lists every version of the instructions, wherever it is kept.
        let mut record = json!(st.memory);
        record["instructions"] = json!(self.store.read(|r| state::all_instructions(r, &st.memory))?);
        if let Some(fields) = record.as_object_mut() {
            fields.remove("instructions_stored");
            fields.remove("instructions_fingerprint");
        }
        Ok(json!({
            "memory": memory,
            "record": record,
            "messages": st.messages.iter().map(StoredMessage::export).collect::<Vec<_>>(),
            "episodes": st.episodes,
            "traces": *st.traces,
            "facts": st.facts.iter().collect::<Vec<_>>(),
            "entities": *st.entities,
            // Boundary scores of units not cut yet: they decide where the next cut falls.
            "units": st.unit_scores.values().collect::<Vec<_>>(),
            "edges": graph::edges(st.facts.iter()),
            // With their text, read back from their messages: an export stands alone.
            "passages": self.store.read(|r| {
                let mut passages = r.scan::<records::Passage>(crate::store::Table::Passages, &crate::store::keys::memory_prefix(memory))?;
                for p in &mut passages {
                    state::passage_text(r, memory, p)?;
                }
                Ok(passages)
            })?,
            "recalls": self.store.read(|r| state::all_recalls(r, memory))?,
            // The latest decorates' decisions (a diagnostic log: the latest 32 are kept).
            "decisions": self.store.read(|r| decisions::latest(r, memory, records::DECISIONS_KEPT as usize))?.0,
            "jobs": self.store.read(|r| r.scan::<records::Job>(crate::store::Table::Jobs, &crate::store::keys::memory_prefix(memory)))?,
        }))
    }

    /// forget_memory: removes the memory and every record stored under it (all per-memory
    /// tables), in one transaction, under the memory's lock; returns what each table lost.
    pub fn forget(&self, memory: &str) -> Result<Vec<(&'static str, u64)>, EngineError> {
        let lock = self.lock(memory);
        let _held = lock.lock().unwrap_or_else(|e| e.into_inner());
        self.cache.lock().unwrap_or_else(|e| e.into_inner()).take(memory);
        let record = self.store.read(|r| {
            r.get::<records::MemoryRecord>(crate::store::Table::Memories, &crate::store::keys::memory(memory))
        })?;
        let user = record.as_ref().and_then(|m| m.user.clone());
        let agent = record.and_then(|m| m.agent);
        let agent_lock = agent.as_deref().map(|a| self.agent_lock(a));
        let _agent_held = agent_lock.as_ref().map(|l| l.lock().unwrap_or_else(|e| e.into_inner()));
        let now = now_or(None)?;
        let removed = self.store.write(|w| {
            let mut removed = w.delete_memory(memory)?;
            // Its facts in its agent's scope go too, with what was distilled from them.
            if let Some(agent) = &agent {
                let (facts, turns) = self.forget_in_scope(w, memory, agent, user.as_deref(), now)?;
                for (table, n) in [
                    (crate::store::Table::ScopeFacts, facts),
                    (crate::store::Table::Hot, turns),
                ] {
                    if n > 0 {
                        removed.push((table.name(), n));
                    }
                }
            }
            Ok(removed)
        })?;
        if removed.is_empty() {
            return Err(EngineError::NotFound(format!("no memory {memory:?}")));
        }
        self.drop_indexes(memory);
        tracing::info!(memory, ?removed, "memory forgotten");
        Ok(removed)
    }

    pub fn stats(&self) -> Result<Value, EngineError> {
        use crate::store::Table;
        let (memories, messages, facts, tables) = self.store.read(|r| {
            let mut tables = serde_json::Map::new();
            for table in Table::ALL {
                let (entries, bytes) = r.table_size(table)?;
                if entries > 0 {
                    tables.insert(table.name().into(), json!({"entries": entries, "bytes": bytes}));
                }
            }
            Ok((
                r.count(Table::Memories, b"")?,
                r.count(Table::Messages, b"")?,
                r.count(Table::Facts, b"")?,
                tables,
            ))
        })?;
        let groups = self.store.group_commits();
        let state_cache = {
            let cache = self.cache.lock().unwrap_or_else(|e| e.into_inner());
            json!({"memories": cache.order.len(), "bytes": cache.bytes})
        };
        Ok(json!({
            "memories": memories,
            "messages": messages,
            "facts": facts,
            "store_bytes": self.store.size_bytes(),
            // Per table: entries and the bytes of its pages (where the disk goes).
            "store_tables": tables,
            "store_map_bytes": self.store.map_size(),
            // Commits that held more than one op's writes (group commit), the writes they held,
            // and every write since the start.
            "store_groups": {"commits": groups.0, "writes": groups.1, "all_writes": groups.2},
            "jobs_pending": self.pending_jobs()?.1,
            "lanes": self.lane_stats()?,
            "models": self.models.as_ref().map(Models::stats),
            // Recall embeddings dropped unembedded because their caller had stopped waiting.
            "recall_embeddings_dropped": self.query_embedder.as_ref().map(|q| q.dropped()),
            // The states kept between ops: how many, and their estimated heap.
            "state_cache": state_cache,
            // The warm-up after the start: whether it ran and finished, memories, time.
            "warm": self.warmth.stats(),
        }))
    }
}

/// The request's history lined up with the stored history the state holds: the stored seqs
/// and the plan.
fn align<M: std::borrow::Borrow<crate::formats::Message>>(
    st: &State,
    incoming: &[M],
    incoming_fp: &[u64],
    mode: HistoryMode,
) -> (Vec<u64>, ingest::Plan) {
    let (seqs, fingerprints): (Vec<u64>, Vec<u64>) = st.history().map(|m| (m.seq, m.fingerprint)).unzip();
    let plan = ingest::plan(st.existed, &fingerprints, incoming, incoming_fp, mode);
    (seqs, plan)
}

#[cfg(test)]
mod info_tests {
    use super::*;

    /// The server encodes `info` from its typed episodes: the bytes must be those of the JSON
    /// value in-process callers get (the wire's shape, a non-finite number as nil).
    #[test]
    fn info_encodes_as_its_json_value() {
        let episode = |n, state, activation| EpisodeInfo {
            n,
            state,
            turns: [n, n + 1],
            seqs: [2 * n, 2 * n + 3],
            tokens: 1_000 * n + 7,
            activation,
            significance: Some(0.25),
            facts: (0..n.min(3)).collect(),
        };
        let info = DecorateInfo {
            fields: json!({"format": "chat_completions", "stored": 2, "recall": {"ms": {"total": 1.5}}}),
            episodes: vec![
                episode(0, EpisodeState::Forgotten, Some(0.0)),
                episode(1, EpisodeState::Leaving, finite(f64::NAN)),
                episode(70_000, EpisodeState::Live, Some(12.75)),
            ],
        };
        let typed = rmp_serde::to_vec_named(&info).unwrap();
        let value = info.into_value();
        assert_eq!(value["episodes"][1]["activation"], Value::Null);
        assert_eq!(value["episodes"][2]["state"], "live");
        assert_eq!(typed, rmp_serde::to_vec_named(&value).unwrap());
    }
}
