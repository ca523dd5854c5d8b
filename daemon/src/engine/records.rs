//! What the engine keeps in the store: the memory record, stored messages, episodes, traces
//! and facts. Provenance is everywhere: episodes and facts name the message seqs they came
//! from.

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};
use serde_json::{json, Value};

use crate::formats::{Message, Role};

/// One memory (one conversation).
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct MemoryRecord {
    pub id: String,
    pub created_at: f64,
    pub updated_at: f64,
    /// Token ceiling set by the client for this memory.
    #[serde(default)]
    pub ceiling: Option<u64>,
    #[serde(default)]
    pub agent: Option<String>,
    #[serde(default)]
    pub user: Option<String>,
    /// Sequence number the next stored message gets.
    pub next_seq: u64,
    /// The current user turn (0 before the first user message).
    pub turn: u64,
    /// When the last user message arrived.
    #[serde(default)]
    pub last_user_at: Option<f64>,
    /// The last user message's fingerprint (hex: JavaScript numbers stop at 2^53), so a request
    /// sent again is known before the lock is taken.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub last_user_fingerprint: Option<String>,
    #[serde(default)]
    pub next_episode: u64,
    #[serde(default)]
    pub next_fact: u64,
    /// Provider tokens / our estimate, per model (exponential average).
    #[serde(default)]
    pub ratios: BTreeMap<String, f64>,
    /// Our estimate of the last request decorate returned, to compare with the provider's count.
    #[serde(default)]
    pub last_estimate: Option<Estimate>,
    #[serde(default)]
    pub next_job: u64,
    #[serde(default)]
    pub next_entity: u64,
    /// Kinds of coalescing jobs (unit scoring, cuts) queued and not run yet: one of each is
    /// enough, since each does all there is when it runs, so a busy lane stays bounded.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub queued_kinds: Vec<String>,
    /// Jobs in this memory's lane, parked ones included, so decorate's `info.lane` needs no
    /// walk over a deep backlog. `None` in a record written before it was kept: counted from
    /// the jobs table when the state loads.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub queued_jobs: Option<u64>,
    /// Passages stored so far (the next passage's number).
    #[serde(default)]
    pub next_passage: u64,
    /// The history budget of the last decorate: background cuts size episodes by it.
    #[serde(default)]
    pub last_budget: Option<u64>,
    /// Versions of the client's instructions (system/developer messages or the Responses
    /// `instructions` field, as sent, each kept when they change) not yet in table
    /// `instructions`: the next save moves them there, as it does for a record stored before
    /// that table. Every op rewrites this record, and an agent whose instructions change at
    /// every call would otherwise make it grow without end. An export lists every version here.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub instructions: Vec<Instructions>,
    /// Versions in table `instructions`, numbered 0, 1, ….
    #[serde(default)]
    pub instructions_stored: u64,
    /// The fingerprint of the latest version, wherever it is kept.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub instructions_fingerprint: Option<String>,
    /// Facts numbered below this have been handed to the agent's scope (`scopes::handoff`).
    #[serde(default)]
    pub handed_off: u64,
    /// Messages below this seq have been read for facts at a handoff (the un-noted tail).
    #[serde(default)]
    pub extracted_to: u64,
    /// The number the next decorate's decision record gets (table `decisions`).
    #[serde(default)]
    pub next_decision: u64,
    /// The facts the lane's walk judged worth showing after the last reply (for the next
    /// user message's recall).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub walk: Option<super::walk::PreparedWalk>,
    /// Every message of the active history has its print in table `prints`. False for a
    /// memory stored before that table (and one imported): its prints are written the first
    /// time its whole history is read; until then aligning a request reads the whole history.
    #[serde(default)]
    pub prints_whole: bool,
    /// Every stored passage has the days its text speaks of in table `mentions`. False for a
    /// memory stored before that table: its next `Index` job writes them.
    #[serde(default)]
    pub mentions_whole: bool,
}

/// One version of the client's instructions and when it was first seen.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
pub struct Instructions {
    pub since: f64,
    /// Hex, so every client reads it exactly (JavaScript numbers stop at 2^53).
    pub fingerprint: String,
    pub raw: Vec<Value>,
}

#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
pub struct Estimate {
    pub model: String,
    pub tokens: u64,
}

/// A fingerprint as stored on records (hex).
pub fn fingerprint_hex(fp: u64) -> String {
    format!("{fp:016x}")
}

impl MemoryRecord {
    pub fn new(id: &str, now: f64) -> MemoryRecord {
        MemoryRecord {
            id: id.to_owned(),
            created_at: now,
            updated_at: now,
            ceiling: None,
            agent: None,
            user: None,
            next_seq: 0,
            turn: 0,
            last_user_at: None,
            last_user_fingerprint: None,
            next_episode: 0,
            next_fact: 0,
            ratios: BTreeMap::new(),
            last_estimate: None,
            next_job: 0,
            next_entity: 0,
            queued_kinds: Vec::new(),
            queued_jobs: Some(0),
            next_passage: 0,
            last_budget: None,
            instructions: Vec::new(),
            instructions_stored: 0,
            instructions_fingerprint: None,
            handed_off: 0,
            extracted_to: 0,
            next_decision: 0,
            walk: None,
            prints_whole: true,
            mentions_whole: true,
        }
    }

    /// The fingerprint of the latest version of the client's instructions (None before any).
    pub fn latest_instructions(&self) -> Option<&str> {
        self.instructions
            .last()
            .map(|i| i.fingerprint.as_str())
            .or(self.instructions_fingerprint.as_deref())
    }

    /// Takes the versions of the instructions not yet in table `instructions`, with the numbers
    /// they are stored under there; the record then counts them as stored.
    pub fn take_instructions(&mut self) -> Vec<(u64, Instructions)> {
        let first = self.instructions_stored;
        let pending = std::mem::take(&mut self.instructions);
        if let Some(last) = pending.last() {
            self.instructions_fingerprint = Some(last.fingerprint.clone());
        }
        self.instructions_stored += pending.len() as u64;
        (first..).zip(pending).collect()
    }
}

/// Where a stored message came from.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Source {
    /// Sent by the client in a decorate request.
    Request,
    /// The model's reply, from report.
    Reply,
}

/// One message as stored: numbered, with its turn and time. Never deleted; an edited history
/// marks it superseded.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct StoredMessage {
    pub seq: u64,
    pub turn: u64,
    pub at: f64,
    pub source: Source,
    pub fingerprint: u64,
    /// Our token estimate of the message.
    #[serde(default)]
    pub tokens: u32,
    /// Set when a later, edited history replaced this message.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub superseded_at: Option<f64>,
    /// A note call (or its output) as the model sent it: kept for export, never in the view
    /// and never aligned against.
    #[serde(default, skip_serializing_if = "is_false")]
    pub note: bool,
    #[serde(with = "stored_body")]
    pub message: Message,
    /// For a message in the history: its position there and a hash of the fingerprints of
    /// the history up to it, so a resent history can be lined up without reading what is
    /// older (see `State::prefix_matches`). Absent on messages stored before it existed.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub chain: Option<Chain>,
}

fn is_false(b: &bool) -> bool {
    !*b
}

/// A message's place in the history and the hash of the history's fingerprints up to it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct Chain {
    pub at: u64,
    pub hash: u64,
}

impl Chain {
    /// The chain of the message after `previous` (None: the first) with fingerprint `fp`.
    pub fn next(previous: Option<Chain>, fp: u64) -> Chain {
        let (at, h) = previous.map_or((0, 0x243F_6A88_85A3_08D3), |c| (c.at + 1, c.hash));
        Chain {
            at,
            hash: (h.rotate_left(23) ^ fp).wrapping_mul(0x9E37_79B9_7F4A_7C15),
        }
    }
}

impl StoredMessage {
    /// Numbers `message` as the memory's next message; a user message opens the next turn.
    pub fn new(memory: &MemoryRecord, mut message: Message, at: f64, source: Source) -> StoredMessage {
        // The bytes it came as, copied out of the request they came in: a slice would keep the
        // whole request in memory as long as the message is.
        message.wire.0 = message.wire.0.map(|b| bytes::Bytes::copy_from_slice(&b));
        let turn = if message.role == Role::User {
            memory.turn + 1
        } else {
            memory.turn
        };
        StoredMessage {
            seq: memory.next_seq,
            turn,
            at,
            source,
            fingerprint: message.fingerprint(),
            tokens: super::tokens::message_tokens(&message),
            superseded_at: None,
            note: false,
            message,
            chain: None,
        }
    }

    /// In the history: neither superseded nor a note call.
    pub fn in_history(&self) -> bool {
        self.superseded_at.is_none() && !self.note
    }

    /// A user message's size counts the recall block stored before it: the block went from
    /// `before` tokens to `after` (distilled).
    pub fn resize_block(&mut self, before: u64, after: u64) {
        self.tokens = (u64::from(self.tokens) + after).saturating_sub(before) as u32;
    }

    /// The export form: provenance and the message exactly as it came.
    pub fn export(&self) -> Value {
        json!({
            "seq": self.seq,
            "turn": self.turn,
            "at": self.at,
            "role": self.message.role,
            "source": self.source,
            "tokens": self.tokens,
            "superseded_at": self.superseded_at,
            "note": self.note,
            "format": self.message.format,
            "message": self.message.raw,
        })
    }
}

/// An episode's place in the view.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum EpisodeState {
    /// Messages in view.
    Live,
    /// Still in view; its facts are asked for.
    Leaving,
    /// Messages out of view; facts in the facts block.
    Sealed,
    /// Facts out of the block too; everything kept for recall and export.
    Forgotten,
}

/// A stretch of closed history about one concept: whole units, seqs `first_seq..=last_seq`.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct Episode {
    pub n: u64,
    pub first_seq: u64,
    pub last_seq: u64,
    pub first_turn: u64,
    pub last_turn: u64,
    /// Time of its last message: when it was encoded.
    pub at: f64,
    pub tokens: u64,
    pub state: EpisodeState,
    /// The note that answered its leaving has been taken.
    #[serde(default)]
    pub acknowledged: bool,
    /// Facts written against it (fact numbers).
    #[serde(default)]
    pub facts: Vec<u64>,
    #[serde(default)]
    pub changed_at: f64,
    /// Whether the episode has been cut into passages (done in the lane once the episode is
    /// cut, live: a relevant recall block may hold a live episode back from the view, and its
    /// passages are how it stays recallable then).
    #[serde(default)]
    pub passaged: bool,
}

#[cfg(test)]
impl Episode {
    /// An episode over `seqs` and `turns` (first and last, inclusive) as tests build one:
    /// numbered when pushed, encoded at time 0, no note taken, no facts, not cut into passages.
    pub fn spanning(seqs: (u64, u64), turns: (u64, u64), tokens: u64, state: EpisodeState) -> Episode {
        Episode {
            n: 0,
            first_seq: seqs.0,
            last_seq: seqs.1,
            first_turn: turns.0,
            last_turn: turns.1,
            at: 0.0,
            tokens,
            state,
            acknowledged: false,
            facts: Vec::new(),
            changed_at: 0.0,
            passaged: false,
        }
    }
}

/// Why a trace exists.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum TraceKind {
    /// The episode's one encoding trace, at full strength.
    Encoding,
    /// A fact judged against the episode.
    Fact,
    /// A fact written for the episode was stated again (counted: use renews it).
    Restated,
}

/// One judgment of an episode, append-only: never edited.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
pub struct Trace {
    pub episode: u64,
    pub n: u64,
    pub kind: TraceKind,
    pub at: f64,
    /// The raw score as given.
    pub score: f64,
    /// Only a yes counts toward activation and significance.
    pub counted: bool,
    #[serde(default)]
    pub fact: Option<u64>,
}

/// A fact the model wrote in a note: one knowledge-graph triple, an edge between its subject
/// and object entities once the lane has resolved them. Bi-temporal: `valid_from`/`valid_to`
/// say when it was true (when the note says so, else from when it was stated), `at` when it was
/// recorded, `status` whether and when it was merged or retired.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct Fact {
    pub n: u64,
    pub note: String,
    pub subject: String,
    pub object: String,
    pub milestone: bool,
    /// When it was recorded.
    pub at: f64,
    /// Episodes that were awaiting this note when it arrived.
    pub episodes: Vec<u64>,
    /// The seq of the stored note call it came from.
    pub note_seq: u64,
    /// The turn range of the episodes it was written for.
    pub first_turn: u64,
    pub last_turn: u64,
    /// Other names the note gave for the subject and the object (aliases to resolve with).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub subject_aliases: Vec<String>,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub object_aliases: Vec<String>,
    /// When it was true, as the note says; `valid_from` defaults to when it was stated.
    #[serde(default)]
    pub valid_from: Option<f64>,
    #[serde(default)]
    pub valid_to: Option<f64>,
    /// The entities of the graph it joins (set by the lane).
    #[serde(default)]
    pub subject_entity: Option<u64>,
    #[serde(default)]
    pub object_entity: Option<u64>,
    #[serde(default)]
    pub status: FactStatus,
    /// Restatements merged into this fact, with their own sources.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub restated_by: Vec<Restatement>,
}

impl Fact {
    /// A fact as stated, before the lane places it in the graph (number and sources unset).
    pub fn new(note: &str, subject: &str, object: &str, milestone: bool, at: f64) -> Fact {
        Fact {
            n: 0,
            note: note.into(),
            subject: subject.into(),
            object: object.into(),
            milestone,
            at,
            episodes: Vec::new(),
            note_seq: 0,
            first_turn: 0,
            last_turn: 0,
            subject_aliases: Vec::new(),
            object_aliases: Vec::new(),
            valid_from: None,
            valid_to: None,
            subject_entity: None,
            object_entity: None,
            status: FactStatus::Active,
            restated_by: Vec::new(),
        }
    }

    pub fn is_active(&self) -> bool {
        self.status == FactStatus::Active
    }

    /// Every episode it was written for, its restatements' included.
    pub fn all_episodes(&self) -> impl Iterator<Item = u64> + '_ {
        self.episodes
            .iter()
            .chain(self.restated_by.iter().flat_map(|r| r.episodes.iter()))
            .copied()
    }
}

/// Where a fact stands in the graph. Nothing is deleted: a merged or retired fact stays.
/// Written as a map tagged by `state`, read through [`StoredStatus`]: serde reads an internally
/// tagged enum by buffering the map first, which was 30% of decoding a fact (a memory's state
/// decodes every fact it holds when it loads).
#[derive(Debug, Clone, Copy, Default, PartialEq, Serialize, Deserialize)]
#[serde(tag = "state", rename_all = "snake_case", try_from = "StoredStatus")]
pub enum FactStatus {
    #[default]
    Active,
    /// It said what fact `into` already said; its sources were added there.
    Merged { into: u64, at: f64 },
    /// A newer fact (`by`) contradicted it; `at` is when it was retired.
    Retired { by: u64, at: f64 },
}

/// A stored [`FactStatus`]'s map read field by field, in any order.
#[derive(Deserialize)]
struct StoredStatus {
    state: StatusKind,
    into: Option<u64>,
    by: Option<u64>,
    at: Option<f64>,
}

#[derive(Deserialize)]
#[serde(rename_all = "snake_case")]
enum StatusKind {
    Active,
    Merged,
    Retired,
}

impl TryFrom<StoredStatus> for FactStatus {
    type Error = &'static str;

    fn try_from(s: StoredStatus) -> Result<FactStatus, &'static str> {
        Ok(match (s.state, s.into, s.by, s.at) {
            (StatusKind::Active, ..) => FactStatus::Active,
            (StatusKind::Merged, Some(into), _, Some(at)) => FactStatus::Merged { into, at },
            (StatusKind::Retired, _, Some(by), Some(at)) => FactStatus::Retired { by, at },
            (StatusKind::Merged, ..) => return Err("a merged fact's status needs `into` and `at`"),
            (StatusKind::Retired, ..) => return Err("a retired fact's status needs `by` and `at`"),
        })
    }
}

/// A restatement merged into a held fact: the merged fact and its sources.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
pub struct Restatement {
    pub fact: u64,
    pub note_seq: u64,
    pub episodes: Vec<u64>,
    pub at: f64,
}

/// A node of the memory's graph: one entity under its canonical name and its other names.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
pub struct Entity {
    pub n: u64,
    /// The name it was first written under.
    pub name: String,
    /// Other names it was written under, or that a note gave for it.
    #[serde(default)]
    pub aliases: Vec<String>,
    pub at: f64,
}

/// What an embedding belongs to.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum VectorKind {
    Fact = 0,
    Entity = 1,
    Passage = 2,
}

/// A stretch of a sealed episode (whole units), searchable by words and meaning; recall shows
/// it as an excerpt. `text` is the messages as the excerpt shows them.
///
/// The store keeps the text once, in the messages: a passage is stored without it and read back
/// with it (`state::read_passage`), from its messages (those of `first_seq..=last_seq`
/// but `skipped`). The copy was a fifth of a drained store (312 B per stored message). A passage
/// stored before keeps its text and is read as it is.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
pub struct Passage {
    pub n: u64,
    pub episode: u64,
    pub first_seq: u64,
    pub last_seq: u64,
    pub first_turn: u64,
    pub last_turn: u64,
    /// When its first message was stored.
    pub at: f64,
    pub tokens: u64,
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub text: String,
    /// Seqs in `first_seq..=last_seq` whose messages are not in the passage (notes and messages
    /// superseded by the time it was cut): the messages it shows are the others, and a message's
    /// seq and text never change.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub skipped: Vec<u64>,
    /// Tokens of `text` as recall counts them, counted when the passage is cut (in the lane):
    /// recall weighs hundreds of candidates per message, and counting them there was most of
    /// its time. 0 for passages stored before: counted when needed.
    #[serde(default)]
    pub text_tokens: u64,
}

/// A recall block, stored with the user message it precedes and kept in the request from then
/// on. Its tokens are counted in that message's size, so the fade accounts for it.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
pub struct RecallBlock {
    /// The user message it precedes.
    pub seq: u64,
    pub turn: u64,
    pub at: f64,
    pub text: String,
    pub tokens: u64,
    pub items: Vec<RecallItem>,
    /// Set once the lane has distilled it at the next user message; then it never changes.
    #[serde(default)]
    pub distilled: bool,
    /// Facts of other conversations of the memory's agent (the cross-memory block), shown
    /// after the recall text while its turn is in progress; distilling empties its text and
    /// keeps its items. Its tokens are counted in `tokens`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub across: Option<super::scopes::AcrossSection>,
    /// As stored only: the passages whose excerpts end the text, left out of `text` (the bulk
    /// of a block not distilled yet) and put back when it is read (`state::write_recall`,
    /// `state::whole_recall`). Always empty in a loaded state.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub excerpts: Vec<u64>,
}

/// One recalled fact or passage, with where it came from.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
pub struct RecallItem {
    /// "fact" or "passage".
    pub kind: String,
    pub n: u64,
    /// The fused score (reciprocal rank fusion over the searches that found it).
    pub score: f64,
    /// The searches that found it ("words:message", "meaning:part 2", "walk", ...).
    pub searches: Vec<String>,
    /// Its best cosine with the message or a part, when a meaning search or the walk scored it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub cosine: Option<f32>,
    pub turns: [u64; 2],
    pub seqs: [u64; 2],
}

/// An embedding as stored (derived data, with the model that made it so a change is seen).
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
pub struct VectorRecord {
    pub model: String,
    #[serde(with = "compact_vector")]
    pub v: Vec<f32>,
}

/// What one decorate decided, kept for `inspect`: sizes, which episodes the request held and
/// which left the view, what was held back and what recall found. A diagnostic log, not
/// history: only the latest [`DECISIONS_KEPT`] of a memory are kept (an older one is deleted in
/// the transaction that adds a new one). Compact: numbers, never message texts.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
pub struct Decision {
    pub n: u64,
    pub at: f64,
    pub turn: u64,
    /// The last stored message's seq when it ran (None before the first message).
    pub seq: Option<u64>,
    /// Messages it stored.
    #[serde(default)]
    pub stored: u64,
    pub ceiling: u64,
    pub budget: u64,
    pub fixed: u64,
    pub room: u64,
    pub landing: u64,
    pub view_tokens: u64,
    pub request_tokens: u64,
    /// Episodes whose messages the request held (live and leaving ones not held back).
    pub in_view: Vec<u64>,
    /// Episodes that left the view in this decorate (in view before it, sealed or forgotten
    /// after it).
    pub faded: Vec<u64>,
    /// Episodes the fade started leaving (still in view: their facts are asked for).
    #[serde(default)]
    pub leaving: Vec<u64>,
    /// Sealed episodes the fade forgot (their facts left the facts block).
    #[serde(default)]
    pub forgotten: Vec<u64>,
    /// The user came back after `sleep_hours`: the fade ran whatever the size.
    #[serde(default)]
    pub sleep: bool,
    pub hidden_for_ceiling: Vec<u64>,
    pub hidden_for_recall: Vec<u64>,
    pub note_ask: bool,
    pub cut: Option<DecisionCut>,
    pub recall: Option<DecisionRecall>,
}

/// The latest decisions a memory keeps.
pub const DECISIONS_KEPT: u64 = 32;

/// A cut made inline by a decorate.
#[derive(Debug, Clone, Copy, Serialize, Deserialize, PartialEq)]
pub struct DecisionCut {
    pub units: u64,
    pub scored: u64,
    pub episodes: u64,
}

/// What recall found for a decorate's new user message.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
pub struct DecisionRecall {
    pub tokens: u64,
    pub best_cosine: Option<f32>,
    pub relevant: bool,
    pub items: Vec<DecisionItem>,
    pub ms: RecallMs,
}

/// One item of the recall block: a [`RecallItem`] without its seqs.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
pub struct DecisionItem {
    pub kind: String,
    pub n: u64,
    pub score: f64,
    pub searches: Vec<String>,
    #[serde(default)]
    pub cosine: Option<f32>,
    pub turns: [u64; 2],
}

/// Recall's time, in milliseconds.
#[derive(Debug, Clone, Copy, Default, Serialize, Deserialize, PartialEq)]
#[serde(default)]
pub struct RecallMs {
    pub embed: f64,
    pub search: f64,
    pub walk: f64,
    pub total: f64,
}

/// Work queued for the memory's background lane, run strictly in order.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
#[serde(tag = "kind", rename_all = "snake_case")]
pub enum JobKind {
    /// Judge new facts against the remembered episodes (traces).
    ScoreFacts { facts: Vec<u64> },
    /// Cut closed history into episodes once enough has built up (arithmetic over stored
    /// unit scores and sizes; no model runs).
    Cut,
    /// Judge the boundary scores of closed units not scored yet, in one batched pass.
    ScoreUnits,
    /// Resolve new facts' entities, embed them, merge restatements, retire contradictions.
    Graph { facts: Vec<u64> },
    /// Embed again what the previous embedding model embedded.
    Reembed,
    /// Cut sealed episodes into passages and bring the memory's search indexes up to date.
    Index,
    /// Distill the recall block before user message `seq` to what the conversation used.
    Distill { seq: u64 },
    /// Judge the facts the finished exchange leads to, for the next user message's recall.
    Walk,
    /// Hand the memory's new facts to its agent's scope (the conversation ended or went
    /// quiet), check the scope facts it was shown, and consolidate the scope.
    Handoff,
}

/// A closed unit's boundary scores, judged once in the lane and kept until history is cut.
/// Keyed by the unit's first seq; valid only while the unit still spans `start_seq..=end_seq`.
#[derive(Debug, Clone, Copy, Serialize, Deserialize, PartialEq)]
pub struct UnitScore {
    pub start_seq: u64,
    pub end_seq: u64,
    /// How likely the unit starts / ends a concept (only the order matters).
    pub first: f32,
    pub last: f32,
    /// Judged with the units after it in view: its `last` will not change. An incomplete
    /// score is judged again, with what follows, by the next batch.
    pub complete: bool,
}

#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
pub struct Job {
    pub n: u64,
    /// The time the work is about: traces it writes carry it.
    pub at: f64,
    pub job: JobKind,
    /// Wall-clock time it was queued (for the lane's oldest-job age).
    #[serde(default)]
    pub queued_at: f64,
    /// Failed runs so far, and the last error; a job that failed [`PARK_AFTER`] times is
    /// parked: kept with its error, shown in `stats`, no longer run.
    #[serde(default)]
    pub attempts: u32,
    #[serde(default)]
    pub error: Option<String>,
}

/// Failed runs after which a job is parked.
pub const PARK_AFTER: u32 = 3;

impl JobKind {
    /// The kind's name, as the wire and `stats` write it.
    pub fn name(&self) -> &'static str {
        match self {
            JobKind::ScoreFacts { .. } => "score_facts",
            JobKind::Cut => "cut",
            JobKind::ScoreUnits => "score_units",
            JobKind::Graph { .. } => "graph",
            JobKind::Reembed => "reembed",
            JobKind::Index => "index",
            JobKind::Distill { .. } => "distill",
            JobKind::Handoff => "handoff",
            JobKind::Walk => "walk",
        }
    }

    /// A job of this kind does all its kind's work when it runs (it reads the state then), so
    /// a second one queued behind it would find nothing left.
    pub fn coalesces(&self) -> Option<&'static str> {
        match self {
            JobKind::ScoreUnits => Some("score_units"),
            JobKind::Cut => Some("cut"),
            JobKind::Index => Some("index"),
            JobKind::Handoff => Some("handoff"),
            JobKind::Walk => Some("walk"),
            _ => None,
        }
    }
}

impl Job {
    pub fn parked(&self) -> bool {
        self.attempts >= PARK_AFTER
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn stored_vectors_are_bytes_and_older_forms_still_read() {
        let v = VectorRecord {
            model: "m".into(),
            v: (0..384).map(|i| ((i as f32) * 0.37).sin() / 19.6).collect(),
        };
        let bytes = rmp_serde::to_vec_named(&v).unwrap();
        assert!(bytes.len() < 420, "{} bytes", bytes.len());
        let back: VectorRecord = rmp_serde::from_slice(&bytes).unwrap();
        let cos = crate::models::cosine(&v.v, &back.v);
        assert!(cos > 0.9999, "{cos}");
        assert!(v.v.iter().zip(&back.v).all(|(a, b)| (a - b).abs() < 2e-4));
        // A zero vector stays zero.
        let zero = VectorRecord {
            model: "m".into(),
            v: vec![0.0; 8],
        };
        let back: VectorRecord = rmp_serde::from_slice(&rmp_serde::to_vec_named(&zero).unwrap()).unwrap();
        assert_eq!(back, zero);
        // A record written as 16-bit floats (schemas 4 to 6).
        #[derive(Serialize)]
        struct Half<'a> {
            model: &'a str,
            #[serde(with = "serde_bytes_of")]
            v: Vec<u8>,
        }
        mod serde_bytes_of {
            pub fn serialize<S: serde::Serializer>(b: &[u8], s: S) -> Result<S::Ok, S::Error> {
                s.serialize_bytes(b)
            }
        }
        let half: Vec<u8> = v.v.iter().flat_map(|x| half::f16::from_f32(*x).to_le_bytes()).collect();
        let old = rmp_serde::to_vec_named(&Half { model: "m", v: half }).unwrap();
        let back: VectorRecord = rmp_serde::from_slice(&old).unwrap();
        assert!(v.v.iter().zip(&back.v).all(|(a, b)| (a - b).abs() < 1e-3));
        // A record written before, with 32-bit floats in an array.
        #[derive(Serialize)]
        struct Before<'a> {
            model: &'a str,
            v: &'a [f32],
        }
        let old = rmp_serde::to_vec_named(&Before { model: "m", v: &v.v }).unwrap();
        assert_eq!(rmp_serde::from_slice::<VectorRecord>(&old).unwrap(), v);
        // JSON (an export) keeps plain numbers both ways.
        let json = serde_json::to_value(&v).unwrap();
        assert!(json["v"][0].is_number());
        assert_eq!(serde_json::from_value::<VectorRecord>(json).unwrap(), v);
    }

    #[test]
    fn a_fact_status_reads_back_in_msgpack_and_json_in_any_key_order() {
        let all = [
            FactStatus::Active,
            FactStatus::Merged { into: 3, at: 1.5 },
            FactStatus::Retired { by: 9, at: 2.5 },
        ];
        for s in all {
            let back: FactStatus = rmp_serde::from_slice(&rmp_serde::to_vec_named(&s).unwrap()).unwrap();
            assert_eq!(back, s);
            let json = serde_json::to_value(s).unwrap();
            assert!(json["state"].is_string(), "written tagged: {json}");
            assert_eq!(serde_json::from_value::<FactStatus>(json).unwrap(), s);
        }
        // Keys in another order (an export edited by hand), and an incomplete status.
        let read = |j: serde_json::Value| serde_json::from_value::<FactStatus>(j);
        let merged = read(serde_json::json!({"at": 1.5, "into": 3, "state": "merged"}));
        assert_eq!(merged.unwrap(), FactStatus::Merged { into: 3, at: 1.5 });
        assert!(read(serde_json::json!({"state": "retired", "at": 1.0})).is_err());
        assert!(read(serde_json::json!({"state": "gone"})).is_err());
        // Inside a fact, and a fact stored without a status (before there was one).
        let mut f = Fact::new("n", "s", "o", false, 1.0);
        f.status = FactStatus::Retired { by: 2, at: 3.0 };
        let back: Fact = rmp_serde::from_slice(&rmp_serde::to_vec_named(&f).unwrap()).unwrap();
        assert_eq!(back.status, f.status);
        let mut json = serde_json::to_value(&f).unwrap();
        json.as_object_mut().unwrap().remove("status");
        assert_eq!(serde_json::from_value::<Fact>(json).unwrap().status, FactStatus::Active);
    }

    #[test]
    fn a_stored_message_keeps_its_text_once_and_reads_back_the_same() {
        use crate::formats::{parse_request, parse_response};
        let requests = [
            json!({"messages": [
                {"role": "system", "content": "be brief"},
                {"role": "user", "content": [{"type": "text", "text": "what is in the box?"}]},
                {"role": "assistant", "content": null, "tool_calls": [{"id": "c1", "type": "function",
                    "function": {"name": "open_box", "arguments": "{\"id\": 7}"}}]},
                {"role": "tool", "tool_call_id": "c1", "content": "a red scarf"},
                {"role": "user", "content": "thanks"}]}),
            json!({"input": [
                {"role": "user", "content": "hello"},
                {"type": "function_call", "call_id": "c2", "name": "look", "arguments": "{}"},
                {"type": "function_call_output", "call_id": "c2", "output": "nothing"},
                {"type": "reasoning", "id": "r1", "summary": []}]}),
            json!({"input": "just a string"}),
            json!({"system": "s", "messages": [
                {"role": "user", "content": "hi"},
                {"role": "assistant", "content": [{"type": "text", "text": "let me see"},
                    {"type": "tool_use", "id": "t1", "name": "look", "input": {"q": 1}}]},
                {"role": "user", "content": [{"type": "tool_result", "tool_use_id": "t1", "content": "ok"}]}]}),
        ];
        let mut messages: Vec<Message> = requests
            .into_iter()
            .flat_map(|r| parse_request(r).unwrap().history)
            .collect();
        let reply = json!({"object": "chat.completion", "choices": [{"index": 0, "finish_reason": "stop",
            "message": {"role": "assistant", "content": "a scarf", "refusal": null}}]});
        messages.extend(parse_response(&reply).unwrap().messages);
        assert!(messages.len() >= 10);
        let memory = MemoryRecord::new("m", 1.0);
        for message in messages {
            let stored = StoredMessage::new(&memory, message.clone(), 2.0, Source::Request);
            let bytes = rmp_serde::to_vec_named(&stored).unwrap();
            let back: StoredMessage = rmp_serde::from_slice(&bytes).unwrap();
            assert_eq!(back.message, message);
            // Its text is not stored beside the raw message.
            let value: Value = rmp_serde::from_slice(&bytes).unwrap();
            assert!(value["message"].get("text").is_none(), "{value}");
        }
        // A message the parser would read differently is stored whole, and reads back whole.
        let mut odd = Message::user(crate::formats::Format::ChatCompletions, "hello");
        odd.text = "not what the raw message says".into();
        let stored = StoredMessage::new(&memory, odd.clone(), 2.0, Source::Request);
        let back: StoredMessage = rmp_serde::from_slice(&rmp_serde::to_vec_named(&stored).unwrap()).unwrap();
        assert_eq!(back.message, odd);
        // A message stored whole before this form existed still reads.
        #[derive(Serialize)]
        struct Before<'a> {
            seq: u64,
            turn: u64,
            at: f64,
            source: Source,
            fingerprint: u64,
            superseded_at: Option<f64>,
            note: bool,
            message: &'a Message,
        }
        let before = Before {
            seq: 4,
            turn: 1,
            at: 2.0,
            source: Source::Reply,
            fingerprint: 9,
            superseded_at: None,
            note: false,
            message: &odd,
        };
        let back: StoredMessage = rmp_serde::from_slice(&rmp_serde::to_vec_named(&before).unwrap()).unwrap();
        assert_eq!((back.seq, back.message), (4, odd));
    }

    #[test]
    fn job_kind_names_are_the_wire_tags() {
        let kinds = [
            JobKind::ScoreFacts { facts: vec![] },
            JobKind::Cut,
            JobKind::ScoreUnits,
            JobKind::Graph { facts: vec![] },
            JobKind::Reembed,
            JobKind::Index,
            JobKind::Distill { seq: 0 },
            JobKind::Handoff,
            JobKind::Walk,
        ];
        for k in kinds {
            assert_eq!(serde_json::to_value(&k).unwrap()["kind"], k.name());
        }
    }
}

/// An embedding as the store keeps it: one byte per dimension in one binary value, after a tag
/// byte and the scale that maps 127 to the largest magnitude (389 bytes for MiniLM's 384
/// dimensions, against 768 as 16-bit floats and 1,920 as a MessagePack array of 32-bit floats;
/// vectors were the largest table per stored message on agent traffic). The rounding moves a
/// cosine by 0.0002 at the median and 0.001 at most (2,000 pairs of random unit vectors of 384
/// dimensions; 16-bit floats: 0.00003). The indexes are built from these stored vectors, so
/// a search and a rebuilt index agree. Human-readable forms (an export's JSON) keep plain
/// numbers; 16-bit floats (an even number of bytes: schema 4 to 6) and arrays of 32-bit floats
/// written before are still read.
pub mod compact_vector {
    use serde::de::{self, SeqAccess, Visitor};
    use serde::{Deserializer, Serializer};

    /// The first byte of the 8-bit form (whose length is then odd: 16-bit floats are even).
    const BYTES: u8 = 8;

    pub fn serialize<S: Serializer>(v: &[f32], s: S) -> Result<S::Ok, S::Error> {
        if s.is_human_readable() {
            return s.collect_seq(v);
        }
        let largest = v.iter().fold(0f32, |m, x| m.max(x.abs()));
        let scale = if largest > 0.0 { largest / 127.0 } else { 1.0 };
        let mut bytes = Vec::with_capacity(5 + v.len());
        bytes.push(BYTES);
        bytes.extend_from_slice(&scale.to_le_bytes());
        bytes.extend(v.iter().map(|x| (x / scale).round().clamp(-127.0, 127.0) as i8 as u8));
        s.serialize_bytes(&bytes)
    }

    pub fn deserialize<'de, D: Deserializer<'de>>(d: D) -> Result<Vec<f32>, D::Error> {
        struct Floats;
        impl<'de> Visitor<'de> for Floats {
            type Value = Vec<f32>;

            fn expecting(&self, f: &mut std::fmt::Formatter) -> std::fmt::Result {
                f.write_str("an embedding: 16-bit floats as bytes, or an array of numbers")
            }

            fn visit_bytes<E: de::Error>(self, b: &[u8]) -> Result<Vec<f32>, E> {
                if !b.len().is_multiple_of(2) {
                    return match b {
                        [BYTES, s0, s1, s2, s3, rest @ ..] => {
                            let scale = f32::from_le_bytes([*s0, *s1, *s2, *s3]);
                            Ok(rest.iter().map(|&x| f32::from(x as i8) * scale).collect())
                        }
                        _ => Err(E::custom("an odd number of bytes that is not an 8-bit embedding")),
                    };
                }
                Ok(b.chunks_exact(2)
                    .map(|c| half::f16::from_le_bytes([c[0], c[1]]).to_f32())
                    .collect())
            }

            fn visit_byte_buf<E: de::Error>(self, b: Vec<u8>) -> Result<Vec<f32>, E> {
                self.visit_bytes(&b)
            }

            fn visit_seq<A: SeqAccess<'de>>(self, mut seq: A) -> Result<Vec<f32>, A::Error> {
                let mut out = Vec::with_capacity(seq.size_hint().unwrap_or(0));
                while let Some(x) = seq.next_element::<f32>()? {
                    out.push(x);
                }
                Ok(out)
            }
        }
        d.deserialize_any(Floats)
    }
}

/// A stored message's body: the message as the provider sent it (`raw`) and its format. What
/// recalld reads from it (role, text, tool calls) is read again when it is loaded, so the text
/// is not stored twice (it was a third of the store on agent traffic). A message the parser
/// would not read back the same is stored whole, as every message was before.
mod stored_body {
    use serde::de::Error as _;
    use serde::{Deserialize, Deserializer, Serialize, Serializer};
    use serde_json::Value;

    use crate::formats::{self, Format, Kind, Message, Role, ToolCall};

    #[derive(Serialize)]
    struct Raw<'a> {
        raw: &'a Value,
        format: Format,
    }

    /// Either form: `text` is written only in the whole one.
    #[derive(Deserialize)]
    struct Stored {
        #[serde(default)]
        role: Option<Role>,
        #[serde(default)]
        kind: Option<Kind>,
        #[serde(default)]
        text: Option<String>,
        #[serde(default)]
        tool_calls: Vec<ToolCall>,
        #[serde(default)]
        tool_call_id: Option<String>,
        raw: Value,
        format: Format,
    }

    pub fn serialize<S: Serializer>(m: &Message, s: S) -> Result<S::Ok, S::Error> {
        match formats::parse_stored(&m.raw, m.format, "message") {
            Ok(again) if again == *m => Raw {
                raw: &m.raw,
                format: m.format,
            }
            .serialize(s),
            _ => m.serialize(s),
        }
    }

    pub fn deserialize<'de, D: Deserializer<'de>>(d: D) -> Result<Message, D::Error> {
        let stored = Stored::deserialize(d)?;
        match (stored.text, stored.role, stored.kind) {
            (Some(text), Some(role), Some(kind)) => Ok(Message {
                role,
                kind,
                text,
                tool_calls: stored.tool_calls,
                tool_call_id: stored.tool_call_id,
                raw: stored.raw,
                format: stored.format,
                wire: Default::default(),
            }),
            (None, _, _) => formats::parse_stored(&stored.raw, stored.format, "stored message")
                .map_err(|e| D::Error::custom(e.to_string())),
            _ => Err(D::Error::custom("a stored message with its text but no role or kind")),
        }
    }
}
