//! Recall: what left the view comes back. For a new user message, facts and passages of
//! history out of view are searched by words (BM25) and by meaning (cosine), for the message,
//! each of its parts and the recent conversation, and by the time the message names (what was
//! said then, by meaning); the lists are fused by rank (reciprocal rank fusion); the walk adds
//! facts one entity away from the best ones (a bridge to the answer); what fits the recall
//! budget becomes the recall block, stored with the message.
//!
//! The message is embedded before the memory's lock is taken (`Query`), within the recall
//! deadline (else recall goes by words only); searching and fusing are index lookups and
//! arithmetic. No judge runs here.

use std::borrow::Cow;
use std::collections::{BTreeMap, HashMap, HashSet};
use std::time::Instant;

use serde_json::{json, Value};

use super::passages::{date, turns};
use super::records::{
    fingerprint_hex, EpisodeState, Fact, FactStatus, Passage, RecallBlock, RecallItem, VectorKind, VectorRecord,
};
use super::state::State;
use super::when::{self, Window};
use super::{blocks, tokens, walk, Engine};
use crate::formats::{ParsedRequest, Role};
use crate::store::{keys, Table};

/// Reciprocal rank fusion's constant: a document's score is Σ 1 / (RRF_K + rank).
pub(super) const RRF_K: f64 = 60.0;
/// Hits taken from each search.
const HITS: usize = 24;
/// Hits of the deeper meaning search, run when the first searches' candidates would not fill
/// the block's room (not counting filler: what only the recent conversation's words found).
const DEEP_HITS: usize = 192;
/// A search's name and its hits (document key, cosine), nearest first.
type Hits = (&'static str, Vec<(u64, f32)>);

/// What the time search found ([`Engine::said_in`]).
struct SaidIn {
    /// `time:passages` and `time:facts`, nearest the message first.
    lists: [Hits; 2],
    /// The passages found for a named time whose window closed before now: what they hold is
    /// what the message asks to have back (see `recall`'s budget).
    past: HashSet<u64>,
}
/// Passages (or facts) of the time a message names ranked exactly (each vector read), at most;
/// a window holding more is searched through the vector graph.
const TIME_EXACT: u64 = 512;
/// Passages of the time a message names read to find [`HITS`] out of view.
const TIME_READ: usize = 4 * HITS;
/// Each message part's best documents placed first in the block (when the message has parts).
const PART_LEADS: usize = 2;
/// The walk starts from this many of the best facts.
const WALK_FROM: usize = 6;
/// Neighbours of one fact considered by the walk, at most.
pub(super) const WALK_NEIGHBOURS: usize = 24;
/// An entity with more facts than this is a hub (the user, the assistant): walking through it
/// reaches everything, so it leads nowhere.
pub(super) const HUB_DEGREE: usize = 40;
/// A neighbour's score is its source's times this times its cosine with the message.
const WALK_DECAY: f64 = 0.5;
/// Recent messages joined into the "recent conversation" query.
const RECENT_MESSAGES: usize = 4;
/// Parts: sentences and lines; shorter ones are joined to reach this many words, longer ones
/// are windowed at this many.
const PART_MIN_WORDS: usize = 6;
const PART_MAX_WORDS: usize = 60;
/// Words of a message's parts embedded at most, beside the message itself: its last parts
/// (earlier ones are searched by words only). The message's own vector stands for its opening
/// (the model reads its first 256 tokens, about 190 words), and what a long message ends with
/// (the question after a correction, a pasted log's last lines) is what a part is for.
/// Embedding is the one model pass on the request path. With the message and the first 400
/// words of its parts (18–19 texts), the agent traces' long messages took 214 ms to a second
/// to embed, past recall's 300 ms deadline (3k messages, a build with timers); with this,
/// embeddings late fell from 4 to 2 per run (2 runs each; docs/benchmarks.md).
const EMBED_PART_WORDS: usize = 180;
/// Parts searched by words at most, the message's last ones (a search is about a millisecond).
const WORD_SEARCH_PARTS: usize = 16;
/// What a fact's date costs beside its words: " (turns 40–54, 2023-07-15)".
const DATE_TOKENS: u64 = 9;
/// Candidates the block had no room for, listed in `info.recall.left_out` at most.
const LEFT_OUT_LISTED: usize = 16;

/// How much a search's rank of `doc` counts in the fusion. Meaning counts most; words help with
/// names and numbers; the recent conversation only steers a follow-up ("and the other one?"),
/// since it mostly holds what the message is not about (measured on the LoCoMo dev replay at
/// 4k: with the recent search at full weight availability fell from 0.836 to 0.804).
fn weight(search: &str, doc: Doc) -> f64 {
    let w = search_weight(search);
    if search.starts_with("meaning") && matches!(doc, Doc::Passage(_)) {
        w * PASSAGE_MEANING
    } else {
        w
    }
}

/// A passage found by meaning counts this much of a fact found so. A fact is one sentence, and
/// its vector says what it is about; a passage's is the average of 160 tokens of several
/// turns, speakers and subjects, and its words are the better clue. On the LoCoMo dev file with
/// the model's notes withheld (no facts: a model that notes little), at 4k: 0.751 at full
/// weight, 0.790 at half (41 questions up, 7 down, no conversation down), level with BM25 over
/// single turns (0.793); with the notes, 0.857 either way (docs/benchmarks.md).
const PASSAGE_MEANING: f64 = 0.5;

fn search_weight(search: &str) -> f64 {
    if search == "walk:prepared" {
        // Facts a judge read against the exchange this message follows and kept: as strong as
        // two searches agreeing, so a follow-up that names nothing ("should I call them?")
        // still gets them ahead of weak hits for its own words.
        2.0
    } else if search == "words:recent" {
        0.25
    } else if search.starts_with("words") {
        0.5
    } else {
        1.0
    }
}

/// Documents in a memory's indexes: facts and passages share one key space.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub(super) enum Doc {
    Fact(u64),
    Passage(u64),
}

impl Doc {
    pub(super) fn key(self) -> u64 {
        match self {
            Doc::Fact(n) => n << 1,
            Doc::Passage(n) => (n << 1) | 1,
        }
    }

    pub(super) fn of(key: u64) -> Doc {
        if key & 1 == 0 {
            Doc::Fact(key >> 1)
        } else {
            Doc::Passage(key >> 1)
        }
    }
}

/// A new user message, split and embedded before the memory's lock is taken.
#[derive(Clone)]
pub(super) struct Query {
    pub text: String,
    pub parts: Vec<String>,
    /// Embeddings of the text, then of each part from `embedded_from` on (empty without an
    /// embedder or when it failed).
    pub vectors: Vec<Vec<f32>>,
    pub embed_ms: f64,
    /// Word searches made while the message embedded: (search, its query text, hits). Recall
    /// uses one whose query text is the one it would search; any other it searches itself.
    pub words: Vec<(String, String, Vec<u64>)>,
    /// The days and months the message names (`when`): the time search's windows.
    pub windows: Vec<Window>,
}

/// The word searches for a message: the message, each part, and the recent conversation ending
/// with it (`recent`: the texts of the messages before it, oldest first) when that differs
/// from the message. (search name, query text).
fn word_queries(text: &str, parts: &[String], recent: &[&str]) -> Vec<(String, String)> {
    let mut queries: Vec<(String, String)> = vec![("words:message".into(), text.to_owned())];
    for (i, p) in parts
        .iter()
        .enumerate()
        .skip(parts.len().saturating_sub(WORD_SEARCH_PARTS))
    {
        queries.push((format!("words:part {}", i + 1), p.clone()));
    }
    let skip = recent.len().saturating_sub(RECENT_MESSAGES - 1);
    let mut conversation: Vec<&str> = recent[skip..].to_vec();
    conversation.push(text);
    let conversation = conversation.join("\n");
    if conversation != text {
        queries.push(("words:recent".into(), conversation));
    }
    queries
}

/// Splits a message into parts: sentences and lines, short ones joined, long ones windowed.
/// A message that is one part gives no parts (the whole message is searched anyway).
pub(super) fn split_parts(text: &str) -> Vec<String> {
    let mut pieces: Vec<String> = Vec::new();
    for line in text.lines() {
        let mut start = 0;
        let b = line.as_bytes();
        for i in 0..b.len() {
            let end_of_sentence = matches!(b[i], b'.' | b'?' | b'!') && b.get(i + 1).is_none_or(|c| *c == b' ');
            if end_of_sentence {
                pieces.push(line[start..=i].trim().to_owned());
                start = i + 1;
            }
        }
        pieces.push(line[start..].trim().to_owned());
    }
    let mut parts: Vec<String> = Vec::new();
    let mut current = String::new();
    for p in pieces.into_iter().filter(|p| !p.is_empty()) {
        let words: Vec<&str> = p.split_whitespace().collect();
        if words.len() > PART_MAX_WORDS {
            if !current.is_empty() {
                parts.push(std::mem::take(&mut current));
            }
            for w in words.chunks(PART_MAX_WORDS) {
                parts.push(w.join(" "));
            }
            continue;
        }
        if !current.is_empty() {
            current.push(' ');
        }
        current.push_str(&p);
        if current.split_whitespace().count() >= PART_MIN_WORDS {
            parts.push(std::mem::take(&mut current));
        }
    }
    if !current.is_empty() {
        match parts.last_mut() {
            Some(last) => {
                last.push(' ');
                last.push_str(&current);
            }
            None => parts.push(current),
        }
    }
    if parts.len() < 2 {
        return Vec::new();
    }
    parts
}

/// Where a message's embedded parts begin: its last parts whose words fit
/// [`EMBED_PART_WORDS`] (at least the last, windowed to at most [`PART_MAX_WORDS`]).
fn embedded_from(parts: &[String]) -> usize {
    let mut words = 0;
    let mut from = parts.len();
    while from > 0 {
        words += parts[from - 1].split_whitespace().count();
        if words > EMBED_PART_WORDS && from < parts.len() {
            break;
        }
        from -= 1;
    }
    from
}

/// Reciprocal rank fusion of the searches' lists: each document's score (Σ its weight in a
/// list / (RRF_K + its rank there)) and the searches that found it, by document key.
fn fuse(lists: &[(String, Vec<u64>)]) -> BTreeMap<u64, (f64, Vec<String>)> {
    let mut fused: BTreeMap<u64, (f64, Vec<String>)> = BTreeMap::new();
    for (name, keys) in lists {
        for (rank, key) in keys.iter().enumerate() {
            let e = fused.entry(*key).or_default();
            e.0 += weight(name, Doc::of(*key)) / (RRF_K + rank as f64 + 1.0);
            e.1.push(name.clone());
        }
    }
    fused
}

/// A candidate for the block: a fact of the memory (the state's, or read from the store when
/// the state does not hold it), or a passage read from the store. (A recall has a few dozen
/// candidates: a fact's size in place costs nothing worth a box.)
#[allow(clippy::large_enum_variant)]
enum Found<'a> {
    Fact(Cow<'a, Fact>),
    Passage(Passage),
}

struct Candidate<'a> {
    doc: Doc,
    found: Found<'a>,
    score: f64,
    searches: Vec<String>,
    /// Its best cosine with the message or a part (None when no meaning search found it).
    cosine: Option<f32>,
}

/// The tokens a recall block may take: what the view leaves free, and what it may take by
/// holding back live history when what it found is relevant.
#[derive(Debug, Clone)]
pub(super) struct Room {
    pub free: u64,
    pub reserved: u64,
    /// The live episodes a block of all the reserved room would hold back from the view: a
    /// relevant block may show their passages, and the episodes it shows leave the view while
    /// it is shown (see `assemble`).
    pub hideable: Vec<u64>,
}

/// What one decorate recalled, and the account of it for `info`.
pub(super) struct Recalled {
    pub block: Option<RecallBlock>,
    /// Where the block's excerpts begin in its text (see `State::put_recalled`).
    pub excerpts_at: Option<usize>,
    pub info: Value,
}

impl Recalled {
    pub(super) fn nothing() -> Recalled {
        Recalled {
            block: None,
            excerpts_at: None,
            info: Value::Null,
        }
    }
}

/// Whether a fact is shown in the facts block (active, and written for an episode still
/// sealed): recall leaves those out.
pub(super) fn in_facts_block(st: &State, f: &Fact) -> bool {
    f.is_active()
        && f.all_episodes().any(|e| {
            st.episodes
                .get(e as usize)
                .is_some_and(|e| e.state == EpisodeState::Sealed)
        })
}

/// The facts the facts block shows ([`in_facts_block`]), in no order, found from the sealed
/// episodes' fact lists instead of a pass over every fact the memory holds (most belong to
/// forgotten episodes): a fact written for a sealed episode, or what it merged into (one merge
/// after another; a restatement carries the merged fact's episodes), each then checked.
pub(super) fn facts_in_block(st: &State) -> Vec<&Fact> {
    let mut found: std::collections::BTreeSet<u64> = std::collections::BTreeSet::new();
    for e in st.episodes.iter().filter(|e| e.state == EpisodeState::Sealed) {
        for &written in &e.facts {
            let mut n = written;
            // Merges point to older facts, so this ends; the bound guards a corrupt record.
            for _ in 0..st.facts.len() {
                match st.fact(n).map(|f| f.status) {
                    Some(FactStatus::Merged { into, .. }) if into != n => n = into,
                    _ => break,
                }
            }
            found.insert(n);
        }
    }
    found
        .into_iter()
        .filter_map(|n| st.fact(n))
        .filter(|f| in_facts_block(st, f))
        .collect()
}

impl Engine {
    /// The new user message at the end of a request, split and embedded (no lock held). None
    /// when the request does not end with a user message or the memory has nothing to recall.
    pub(super) fn recall_query(
        &self,
        memory: &str,
        parsed: &ParsedRequest,
        agent: Option<&str>,
        now: f64,
    ) -> Option<Query> {
        let last = parsed.history.last().filter(|m| m.role == Role::User)?;
        let text = last.text.trim();
        if text.is_empty() || blocks::is_our_block(text) {
            return None;
        }
        let record: Option<super::records::MemoryRecord> = self
            .store
            .read(|r| r.get(Table::Memories, &keys::memory(memory)))
            .ok()?;
        // Something to search: the memory's own facts and passages, or its agent's scope.
        let own = self.indexes.is_some() && record.as_ref().is_some_and(|r| r.next_fact > 0 || r.next_passage > 0);
        let agent = agent.or(record.as_ref().and_then(|r| r.agent.as_deref()));
        // The agent's scope: its block shows core blocks and recent turns even with no facts;
        // the message is embedded only when there are facts to compare it with.
        let scope_record = agent
            .and_then(|a| self.store.read(|r| super::scopes::agent_record(r, a)).ok())
            .filter(|a| self.policy_of(a).captures());
        let scope = scope_record.is_some();
        let scope_facts = scope_record.is_some_and(|a| a.next_fact > 0 || a.next_document > 0);
        if !own && !scope {
            return None;
        }
        // The same request sent again (after a reply that was only the note) has no new
        // message: nothing is recalled for it, so nothing is embedded. (A user who says the
        // same words twice in a row gets no recall for the second: a fair price.)
        if record.as_ref().and_then(|r| r.last_user_fingerprint.as_deref())
            == Some(fingerprint_hex(last.fingerprint()).as_str())
        {
            return None;
        }
        let parts = split_parts(text);
        let started = Instant::now();
        let mut vectors = Vec::new();
        let mut searched = Vec::new();
        let vector_index = self.indexes.as_ref().and_then(|i| i.vectors.as_ref());
        if let Some(queue) = self
            .query_embedder
            .as_ref()
            .filter(|_| (own && vector_index.is_some()) || scope_facts)
        {
            let mut texts: Vec<String> = vec![text.to_owned()];
            texts.extend(parts[embedded_from(&parts)..].iter().cloned());
            let want = texts.len();
            // The embedder may be a remote endpoint or busy: wait at most the recall deadline,
            // then search by words only.
            let wait = std::time::Duration::from_millis(self.config.recall_deadline_ms);
            // A memory not searched lately has its vector index opened while its message
            // embeds (a view's open reads every key: 23 ms at 200k vectors). Never an index
            // the start found missing or behind, nor one never written.
            let closed = vector_index.filter(|v| {
                own && !v.is_open(memory)
                    && self.indexes_searchable(memory)
                    && self.indexes.as_ref().is_some_and(|ix| ix.marks(memory).is_some())
            });
            // Likewise a memory not in the state cache has its state loaded into it (as the
            // warm-up does, under the memory's lock), so decorate finds it there.
            let uncached = own && !self.is_cached(memory);
            // And its word searches are made meanwhile (they need no vector), with the recent
            // conversation as the request and the cached state show it; recall makes again
            // any whose query text turns out otherwise.
            let searchable = own && self.indexes_searchable(memory);
            let (embedded, ahead) = std::thread::scope(|s| {
                if let Some(v) = closed {
                    s.spawn(|| v.open_memory(memory));
                }
                let ahead = s.spawn(|| {
                    if uncached {
                        if let Err(e) = self.cache_state(memory) {
                            tracing::warn!(memory, error = %e, "cannot load the memory's state beside the embedding");
                        }
                    }
                    if searchable {
                        self.words_ahead(memory, parsed, text, &parts)
                    } else {
                        Vec::new()
                    }
                });
                let embedded = queue.embed(memory, texts, wait);
                (embedded, ahead.join().unwrap_or_default())
            });
            searched = ahead;
            match embedded {
                Ok(v) if v.len() == want => vectors = v,
                Ok(_) => tracing::warn!(
                    memory,
                    "embedder gave the wrong number of vectors; recall by words only"
                ),
                Err(e) => tracing::warn!(memory, error = %e, "cannot embed the message in time; recall by words only"),
            }
        }
        Some(Query {
            text: text.to_owned(),
            parts,
            vectors,
            embed_ms: started.elapsed().as_secs_f64() * 1e3,
            words: searched,
            windows: when::windows(text, now),
        })
    }

    /// The message's word searches, made before its turn is stored: the recent conversation is
    /// the request's messages before it, and before those the cached state's history (none
    /// when the memory is not cached). A search that fails is left to recall.
    fn words_ahead(
        &self,
        memory: &str,
        parsed: &ParsedRequest,
        text: &str,
        parts: &[String],
    ) -> Vec<(String, String, Vec<u64>)> {
        let Some(ix) = &self.indexes else {
            return Vec::new();
        };
        let earlier = &parsed.history[..parsed.history.len().saturating_sub(1)];
        let mut before: Vec<String> = earlier
            .iter()
            .rev()
            .filter(|m| !blocks::is_our_block(&m.text))
            .take(RECENT_MESSAGES - 1)
            .map(|m| m.text.clone())
            .collect();
        if before.len() < RECENT_MESSAGES - 1 {
            let cache = self.cache.lock().unwrap_or_else(|e| e.into_inner());
            if let Some(st) = cache.get(memory) {
                let more = RECENT_MESSAGES - 1 - before.len();
                before.extend(st.history().rev().take(more).map(|m| m.message.text.clone()));
            }
        }
        before.reverse();
        let before: Vec<&str> = before.iter().map(String::as_str).collect();
        // The same budget as recall's own searches: past it, recall decides what to skip.
        let started = Instant::now();
        let budget = std::time::Duration::from_millis(self.config.recall_search_ms);
        word_queries(text, parts, &before)
            .into_iter()
            .take_while(|_| started.elapsed() <= budget)
            .filter_map(|(name, query)| {
                let hits = ix.words.search(memory, &query, HITS).ok()?;
                Some((name, query, hits.into_iter().map(|(k, _)| k).collect()))
            })
            .collect()
    }

    /// Searches, fuses, walks and fills a block for the user message `seq`, within `room`
    /// (its reserved part only when something found is relevant). Reads the indexes and the
    /// store; changes nothing.
    pub(super) fn recall(&self, st: &State, q: &Query, seq: u64, room: &Room, now: f64) -> Recalled {
        let started = Instant::now();
        let memory = st.memory.id.as_str();
        let Some(ix) = &self.indexes else {
            return Recalled::nothing();
        };
        // 1. Searches. Words: the message, each part, the recent conversation ending with it.
        let mut lists: Vec<(String, Vec<u64>)> = Vec::new();
        let mut before: Vec<&str> = st
            .history()
            .rev()
            .filter(|m| m.seq < seq)
            .take(RECENT_MESSAGES - 1)
            .map(|m| m.message.text.as_str())
            .collect();
        before.reverse();
        let word_queries = word_queries(&q.text, &q.parts, &before);
        let mut errors = Vec::new();
        // Past the search budget a step is skipped, and recall uses what it found by then.
        let search_budget = std::time::Duration::from_millis(self.config.recall_search_ms);
        let mut skipped: Vec<String> = Vec::new();
        // Indexes the start found ahead of the store may hold documents it no longer has (a
        // restored backup): not searched until they are rebuilt.
        let catching_up = !self.indexes_searchable(memory);
        if catching_up {
            skipped.push("indexes (being rebuilt from the store after a start)".into());
        }
        let mut ahead: Vec<String> = Vec::new();
        for (name, text) in word_queries {
            if catching_up {
                skipped.push(name);
                continue;
            }
            if let Some((_, _, hits)) = q.words.iter().find(|(n, t, _)| *n == name && *t == text) {
                ahead.push(name.clone());
                lists.push((name, hits.clone()));
                continue;
            }
            if started.elapsed() > search_budget {
                skipped.push(name);
                continue;
            }
            match ix.words.search(memory, &text, HITS) {
                Ok(hits) => lists.push((name, hits.into_iter().map(|(k, _)| k).collect())),
                Err(e) => errors.push(e.to_string()),
            }
        }
        // Meaning: the message and each part.
        let mut cosines: HashMap<u64, f32> = HashMap::new();
        if let Some(vix) = &ix.vectors {
            let first_part = embedded_from(&q.parts);
            for (i, v) in q.vectors.iter().enumerate() {
                let name = if i == 0 {
                    "meaning:message".to_owned()
                } else {
                    format!("meaning:part {}", first_part + i)
                };
                if catching_up || started.elapsed() > search_budget {
                    skipped.push(name);
                    continue;
                }
                match vix.search(memory, v, HITS) {
                    Ok(hits) => {
                        for &(k, cos) in &hits {
                            let best = cosines.entry(k).or_insert(cos);
                            *best = best.max(cos);
                        }
                        lists.push((name, hits.into_iter().map(|(k, _)| k).collect()))
                    }
                    Err(e) => errors.push(e.to_string()),
                }
            }
        }
        // Time: the passages said in the days and months the message names ("on 3 June",
        // "yesterday") or speaking of them, and the facts noted from what was said then,
        // nearest the message by meaning. Without the message's vector there is nothing to
        // order them by, and the other searches stand alone.
        let windows = &q.windows;
        let mut said_in_past = HashSet::new();
        if let (Some(vix), Some(v), false) = (&ix.vectors, q.vectors.first(), windows.is_empty()) {
            if catching_up || started.elapsed() > search_budget {
                skipped.extend(["time:passages".into(), "time:facts".into()]);
            } else {
                match self.said_in(st, windows, vix, v, now) {
                    Ok(SaidIn { lists: found, past }) => {
                        said_in_past = past;
                        for (name, hits) in found {
                            for &(k, cos) in &hits {
                                let best = cosines.entry(k).or_insert(cos);
                                *best = best.max(cos);
                            }
                            lists.push((name.into(), hits.into_iter().map(|(k, _)| k).collect()));
                        }
                    }
                    Err(e) => errors.push(e),
                }
            }
        }
        // The walk the lane prepared from the exchange this message follows: one more list.
        let prepared = st.memory.walk.as_ref().filter(|w| walk::ready_for(st, w, seq));
        if let Some(w) = prepared {
            lists.push((
                "walk:prepared".into(),
                w.facts.iter().map(|f| Doc::Fact(f.n).key()).collect(),
            ));
        }
        let search_ms = started.elapsed().as_secs_f64() * 1e3;

        // 2. Fuse by rank, among what the block may show: passages of the episodes in view are
        // indexed too (live ones are cut at once, see `Room::hideable`) and are left out of
        // the lists first (with any that cannot be read), so the conversation in progress takes
        // no searches' places. The records read here are the candidates' (a passage's text is
        // read once the fill chooses it, below).
        let mut out_of_view: HashMap<u64, Option<Passage>> = HashMap::new();
        let _ = self.store.read(|r| {
            for (name, keys) in &mut lists {
                keys.retain(|&key| {
                    let Doc::Passage(n) = Doc::of(key) else { return true };
                    out_of_view
                        .entry(n)
                        .or_insert_with(|| {
                            r.get::<Passage>(Table::Passages, &keys::seq(memory, n))
                                .ok()
                                .flatten()
                                .filter(|p| !passage_in_view(st, p, &room.hideable))
                        })
                        .is_some()
                });
                // The time search read more than a list's hits, for those in view.
                if name == "time:passages" {
                    keys.truncate(HITS);
                }
            }
            Ok(())
        });
        let fused = fuse(&lists);
        // The documents found, read in one transaction; one that cannot be read is left out.
        let mut candidates: Vec<Candidate> = Vec::new();
        let _ = self.store.read(|r| {
            for (key, (score, searches)) in fused {
                let doc = Doc::of(key);
                let found = match doc {
                    Doc::Passage(n) => out_of_view.remove(&n).flatten().and_then(|mut p| {
                        text_if_uncounted(r, memory, &mut p).ok()?;
                        Some(Found::Passage(p))
                    }),
                    Doc::Fact(_) => read_found(r, st, doc, &room.hideable),
                };
                let Some(found) = found else {
                    continue;
                };
                let cosine = cosines.get(&key).copied();
                candidates.push(Candidate {
                    doc,
                    found,
                    score,
                    searches,
                    cosine,
                });
            }
            Ok(())
        });
        candidates.sort_by(|a, b| b.score.total_cmp(&a.score).then(a.doc.cmp(&b.doc)));

        // 3. The walk: from the best facts across their entities, one step.
        let walk_started = Instant::now();
        let walked = if started.elapsed() > search_budget {
            skipped.push("walk".into());
            0
        } else {
            self.walk(st, q, &mut candidates)
        };
        let walk_ms = walk_started.elapsed().as_secs_f64() * 1e3;

        // 4. The budget: the reserved room when something found is relevant by meaning (or
        // when the message could not be embedded, so relevance is unknown), or when it was
        // said in, or speaks of, a time the message names that has passed (its window, to a
        // week after the named days, closed: "on 3 June", not "today" or "yesterday", which
        // name the conversation in progress); else what is free.
        let best_cosine = candidates.iter().filter_map(|c| c.cosine).reduce(f32::max);
        let said_then = candidates.iter().any(|c| said_in_past.contains(&c.doc.key()));
        let relevant =
            q.vectors.is_empty() || said_then || best_cosine.is_some_and(|c| c >= self.config.recall_relevant_cosine);
        let budget = if relevant { room.reserved } else { room.free };
        // A block that holds nothing back shows no live episode.
        let hideable: &[u64] = if relevant { &room.hideable } else { &[] };
        if !relevant {
            candidates.retain(|c| !matches!(&c.found, Found::Passage(p) if passage_in_view(st, p, &[])));
        }

        // 4b. Candidates that would not fill the room (a large ceiling, or a message whose own
        // searches found little): the message's meaning search again, deeper; what it adds
        // comes after every candidate found so far but the filler (below), in its rank, so it
        // changes nothing where the first searches already fill the block.
        // Each candidate's cost counted once (the fill asks again as items come and go); a
        // passage's was counted when it was cut.
        let deeper_started = Instant::now();
        let mut costs: HashMap<Doc, u64> = candidates.iter().map(|c| (c.doc, estimate(&c.found))).collect();
        // What only the recent conversation's words found is filler: it steers a follow-up
        // that names nothing, but for a message with a subject of its own it is the turns
        // before it, about something else. It does not count as filling the room, and it
        // goes after what the deeper search adds (LoCoMo dev at 8k: 0.921 → 0.928;
        // docs/benchmarks.md).
        let filler = |c: &Candidate| c.searches.iter().all(|s| s == "words:recent");
        let pool: u64 = candidates.iter().filter(|c| !filler(c)).map(|c| costs[&c.doc]).sum();
        if pool < budget && started.elapsed() > search_budget {
            skipped.push("meaning:deeper".into());
        } else if pool < budget {
            if let (Some(vix), Some(v)) = (ix.vectors.as_ref().filter(|_| !catching_up), q.vectors.first()) {
                match vix.search(memory, v, DEEP_HITS) {
                    Ok(hits) => {
                        let name = "meaning:deeper";
                        let known: HashSet<Doc> = candidates.iter().map(|c| c.doc).collect();
                        let mut new: Vec<(u64, f32)> = hits
                            .into_iter()
                            .filter(|(k, _)| !known.contains(&Doc::of(*k)))
                            .collect();
                        // Read only as far as the room could take, twice over (an item may be
                        // left out, the render costs more than the estimates): past that a hit
                        // only fills a gap.
                        let room_left = budget - pool;
                        let mut added = 0;
                        let mut read = 0;
                        let _ = self.store.read(|r| {
                            for (rank, &(key, cos)) in new.iter().enumerate() {
                                if added >= 2 * room_left {
                                    break;
                                }
                                read = rank + 1;
                                let doc = Doc::of(key);
                                if let Some(found) = read_found(r, st, doc, hideable) {
                                    let cost = estimate(&found);
                                    added += cost;
                                    costs.insert(doc, cost);
                                    candidates.push(Candidate {
                                        doc,
                                        found,
                                        score: weight(name, doc) / (RRF_K + (HITS + rank) as f64 + 1.0),
                                        searches: vec![name.into()],
                                        cosine: Some(cos),
                                    });
                                }
                            }
                            Ok(())
                        });
                        new.truncate(read);
                        lists.push((name.into(), new.into_iter().map(|(k, _)| k).collect()));
                        // A stable sort: each group keeps its order.
                        candidates.sort_by_key(|c| filler(c));
                    }
                    Err(e) => errors.push(e.to_string()),
                }
            }
        }

        let deeper_ms = deeper_started.elapsed().as_secs_f64() * 1e3;
        // 5. Fill the budget, best first; a block that renders over it drops its last items. A
        // fact whose turns an excerpt in the block shows word for word is left out (it would
        // say again, in fewer words, what the excerpt says), and its room goes to the next.
        let fill_started = Instant::now();
        let header = tokens::text_tokens(blocks::RECALL_HEADER) as u64 + 12;
        let cost = |c: &Candidate| costs[&c.doc];
        // A fact noted with others from the same turns shares their date line (see push_groups):
        // it costs its words and its bullet only.
        let cost_beside = |chosen: &[&Candidate], c: &Candidate| match &c.found {
            Found::Fact(f) if chosen.iter().any(|g| same_turns(g, f)) => costs[&c.doc] - DATE_TOKENS,
            _ => costs[&c.doc],
        };
        let mut chosen: Vec<&Candidate> = Vec::new();
        let mut used = header;
        let leads = part_leads(&lists, q.parts.len(), &candidates, self.config.recall_relevant_cosine);
        for c in leads.into_iter().chain(&candidates) {
            if chosen.iter().any(|g| g.doc == c.doc) {
                continue;
            }
            if let Found::Fact(f) = &c.found {
                if chosen.iter().any(|p| shows_turns_of(p, f)) {
                    continue;
                }
            }
            let charge = cost_beside(&chosen, c);
            if used + charge > budget {
                continue;
            }
            if matches!(c.found, Found::Passage(_)) {
                let before = chosen.len();
                chosen.retain(|g| !matches!(&g.found, Found::Fact(f) if shows_turns_of(c, f)));
                if chosen.len() < before {
                    used = header
                        + (0..chosen.len())
                            .map(|i| cost_beside(&chosen[..i], chosen[i]))
                            .sum::<u64>();
                }
            }
            used += charge;
            chosen.push(c);
        }
        // A candidate passage's text is read once it is chosen (reading it reads and decodes its
        // messages: for every candidate, that was a third of recall's CPU at 10k messages of
        // agent traffic); one that cannot be read is left out.
        let chosen_docs: Vec<Doc> = chosen.iter().map(|c| c.doc).collect();
        let to_read: HashSet<Doc> = chosen_docs.iter().copied().collect();
        let _ = self.store.read(|r| {
            for c in candidates.iter_mut().filter(|c| to_read.contains(&c.doc)) {
                if let Found::Passage(p) = &mut c.found {
                    if super::state::passage_text(r, memory, p).is_err() {
                        p.text.clear();
                    }
                }
            }
            Ok(())
        });
        let by_doc: HashMap<Doc, &Candidate> = candidates.iter().map(|c| (c.doc, c)).collect();
        let chosen: Vec<&Candidate> = chosen_docs
            .iter()
            .map(|d| by_doc[d])
            .filter(|c| !matches!(&c.found, Found::Passage(p) if p.text.is_empty()))
            .collect();
        // The rendered block (headings, groups, dates) costs more than the items' estimates:
        // keep the longest prefix of the chosen items that renders within the budget. A render
        // only grows with the items, so a search finds it in a few renders, not one per dropped
        // item; tokenizing a render of thousands of tokens takes milliseconds (at 15k messages
        // a midpoint search's renders were half of decorate's CPU), so the first tries go where
        // the last render's tokens per item put the budget, and halve only after; and renders
        // are counted line by line, each line once.
        let mut counts = tokens::PieceCounts::default();
        let mut rendered = |k: usize| {
            let (text, excerpts_at) = render(st, &chosen[..k], &lists, &q.parts);
            let cost = counts.count(&text) as u64 + 4;
            ((text, excerpts_at), cost)
        };
        let mut fits = None;
        let (mut lo, mut hi) = (0, chosen.len());
        // The whole choice usually fits: try it first.
        let mut k = hi;
        let mut tries = 0;
        while lo < hi {
            let (text, cost) = rendered(k);
            if cost <= budget {
                lo = k;
                fits = Some((k, text, cost));
            } else {
                hi = k - 1;
            }
            tries += 1;
            let proportional = (k as u64 * budget / cost.max(1)) as usize;
            k = if tries <= 2 {
                proportional.clamp(lo + 1, hi.max(lo + 1))
            } else {
                (lo + hi).div_ceil(2)
            };
        }
        let shown = fits.as_ref().map_or(0, |f| f.0);
        // The live episodes it shows excerpts of (assembly holds them back while it is shown).
        let mut excerpted: Vec<u64> = chosen[..shown]
            .iter()
            .filter_map(|c| match &c.found {
                Found::Passage(p) if passage_in_view(st, p, &[]) => Some(p.episode),
                _ => None,
            })
            .collect();
        excerpted.sort_unstable();
        excerpted.dedup();
        let excerpts_at = fits.as_ref().map(|(_, (_, at), _)| *at);
        let block = fits.map(|(k, (text, _), cost)| RecallBlock {
            seq,
            turn: st.memory.turn,
            at: now,
            text,
            tokens: cost,
            items: chosen[..k].iter().map(|c| item(c)).collect(),
            distilled: false,
            across: None,
            excerpts: Vec::new(),
        });
        // The best candidates the block had no room for: where to look when something found
        // was not shown.
        let left_out: Vec<Value> = candidates
            .iter()
            .filter(|c| !chosen[..shown].iter().any(|g| g.doc == c.doc))
            .take(LEFT_OUT_LISTED)
            .map(|c| {
                let it = item(c);
                json!({"kind": it.kind, "n": it.n, "score": it.score, "turns": it.turns, "tokens": cost(c)})
            })
            .collect();
        let info = json!({
            "budget": budget,
            "left_out": left_out,
            "room": {"free": room.free, "reserved": room.reserved, "hideable": room.hideable},
            "holds_back": excerpted,
            "best_cosine": best_cosine,
            "relevant": relevant,
            "said_then": said_then,
            "tokens": block.as_ref().map_or(0, |b| b.tokens),
            "candidates": candidates.len(),
            "walked": walked,
            "prepared_walk": st.memory.walk.as_ref().map(|w| json!({
                "after_seq": w.after_seq,
                "facts": w.facts.len(),
                "ready": prepared.is_some(),
            })),
            "searches": lists.iter().map(|(n, k)| (n.clone(), json!(k.len()))).collect::<serde_json::Map<_, _>>(),
            // The stretches of time the message named, searched by the time search.
            "times": windows.iter().map(|w| json!({"from": w.from(), "to": w.to()})).collect::<Vec<_>>(),
            "items": block.as_ref().map(|b| &b.items),
            "errors": errors,
            "skipped": skipped,
            "searched_while_embedding": ahead,
            "ms": {
                "embed": q.embed_ms,
                "search": search_ms,
                "walk": walk_ms,
                "deeper": deeper_ms,
                "fill": fill_started.elapsed().as_secs_f64() * 1e3,
                "total": q.embed_ms + started.elapsed().as_secs_f64() * 1e3,
            },
        });
        Recalled {
            block,
            excerpts_at,
            info,
        }
    }

    /// What was said within `windows` or of their days, nearest `query` first: the passages
    /// first said then or speaking of those days from another (`Table::Mentions`; [`TIME_READ`]
    /// at most: some may be in view) and the facts recall may show noted from the episodes said
    /// then ([`HITS`] at most); and the passages found for windows closed before `now`. A
    /// memory's passages are numbered in the conversation's order (episodes are cut in order),
    /// so their times ascend with their numbers and binary searches find each window's. A
    /// window of a few hundred documents is ranked exactly, a larger one through the vector
    /// graph.
    fn said_in(
        &self,
        st: &State,
        windows: &[Window],
        vix: &crate::index::vectors::Vectors,
        query: &[f32],
        now: f64,
    ) -> Result<SaidIn, String> {
        let memory = st.memory.id.as_str();
        let prefix = keys::memory_prefix(memory);
        // Per window: the passages said in it, then those that speak of days within its named
        // ones from another day ("last month" said in April, for a question about March; a
        // day's leeway either side).
        let found: Vec<Vec<u64>> = self
            .store
            .read(|r| {
                let at = |n: u64| -> Result<f64, crate::store::StoreError> {
                    let p: Option<Passage> = r.get(Table::Passages, &keys::seq(memory, n))?;
                    Ok(p.map_or(f64::NEG_INFINITY, |p| p.at))
                };
                // The first passage said at or after `t`.
                let first_from = |t: f64| -> Result<u64, crate::store::StoreError> {
                    let (mut lo, mut hi) = (0, st.memory.next_passage);
                    while lo < hi {
                        let mid = lo + (hi - lo) / 2;
                        if at(mid)? < t {
                            lo = mid + 1;
                        } else {
                            hi = mid;
                        }
                    }
                    Ok(lo)
                };
                let mut found = Vec::new();
                for w in windows {
                    let mut docs: Vec<u64> = (first_from(w.from())?..first_from(w.to())?)
                        .map(|n| Doc::Passage(n).key())
                        .collect();
                    // Days within the named ones: "last month" for a question about March,
                    // not for one about a day of it.
                    let (first, last) = (w.days.0 - 1, w.days.1 + 1);
                    let start = keys::seq(memory, first.max(0) as u64);
                    r.visit(Table::Mentions, &prefix, &start, |k, until: u64| {
                        let from = keys::seq2_first(k) as i64;
                        if from > last {
                            return Ok(false);
                        }
                        if until as i64 <= last {
                            docs.push(Doc::Passage(keys::last_number(k)).key());
                        }
                        Ok(true)
                    })?;
                    found.push(docs);
                }
                Ok(found)
            })
            .map_err(|e| e.to_string())?;
        // What was said in or of a time that has passed (see `recall`'s budget).
        let past: HashSet<u64> = windows
            .iter()
            .zip(&found)
            .filter(|(w, _)| w.to() <= now)
            .flat_map(|(_, docs)| docs.iter().copied())
            .collect();
        let mut passages: Vec<u64> = found.into_iter().flatten().collect();
        passages.sort_unstable();
        passages.dedup();
        // An episode's messages run from the end of the one before to its own end.
        let mut facts: Vec<u64> = Vec::new();
        let mut began = f64::NEG_INFINITY;
        for e in &st.episodes {
            if windows.iter().any(|w| e.at >= w.from() && began < w.to()) {
                facts.extend(
                    e.facts
                        .iter()
                        .filter(|&&n| st.fact(n).is_none_or(|f| f.is_active() && !in_facts_block(st, f)))
                        .map(|&n| Doc::Fact(n).key()),
                );
            }
            began = e.at;
        }
        facts.sort_unstable();
        facts.dedup();
        let rank = |keys: &[u64], k: usize| {
            let mut hits = if keys.len() as u64 <= TIME_EXACT {
                vix.cosines(memory, query, keys)
            } else {
                let keys: HashSet<u64> = keys.iter().copied().collect();
                vix.search_where(memory, query, k, |key| keys.contains(&key))
            }
            .map_err(|e| e.to_string())?;
            hits.truncate(k);
            Ok::<_, String>(hits)
        };
        Ok(SaidIn {
            lists: [
                ("time:passages", rank(&passages, TIME_READ)?),
                ("time:facts", rank(&facts, HITS)?),
            ],
            past,
        })
    }

    /// Adds the facts one entity away from the best facts found, scored by their source's score
    /// and their cosine with the message. Returns how many it added.
    fn walk<'a>(&self, st: &'a State, q: &Query, candidates: &mut Vec<Candidate<'a>>) -> usize {
        let memory = st.memory.id.as_str();
        let present: HashSet<Doc> = candidates.iter().map(|c| c.doc).collect();
        let sources: Vec<(u64, Vec<u64>, f64)> = candidates
            .iter()
            .filter_map(|c| match &c.found {
                Found::Fact(f) => Some((f.n, entities(f).collect(), c.score)),
                Found::Passage(_) => None,
            })
            .take(WALK_FROM)
            .collect();
        let mut added: HashMap<u64, (f64, u64, Option<f32>, Cow<'a, Fact>)> = HashMap::new();
        // One read transaction for the whole walk; a neighbour reached twice is scored once. A
        // read that fails skips what it would have read (the walk only adds).
        let mut cosines: HashMap<u64, Option<f32>> = HashMap::new();
        let _ = self.store.read(|r| {
            for (source, source_entities, score) in &sources {
                let (source, score) = (*source, *score);
                for &e in source_entities {
                    // The entity's edges, newest first, read only as far as a hub's degree: the
                    // walk's cost does not grow with the graph.
                    let Some(edge_facts) = edge_facts(r, memory, e, HUB_DEGREE).ok().flatten() else {
                        continue;
                    };
                    let neighbours = edge_facts
                        .into_iter()
                        .filter(|&n| n != source && !present.contains(&Doc::Fact(n)))
                        .filter_map(|n| st.fact_or_read(r, n).ok().flatten())
                        .filter(|g| g.is_active() && !g.note.is_empty() && !in_facts_block(st, g))
                        .take(WALK_NEIGHBOURS);
                    for g in neighbours {
                        let cos = *cosines.entry(g.n).or_insert_with(|| {
                            let v = q.vectors.first()?;
                            let w: VectorRecord = r
                                .get(Table::Vectors, &keys::seq2(memory, VectorKind::Fact as u64, g.n))
                                .ok()
                                .flatten()?;
                            Some(cosine(v, &w.v))
                        });
                        let s = score * WALK_DECAY * f64::from(cos.unwrap_or(0.5).max(0.0));
                        match added.get_mut(&g.n) {
                            Some(e) if s <= e.0 => {}
                            Some(e) => (e.0, e.1, e.2) = (s, source, cos),
                            None => {
                                added.insert(g.n, (s, source, cos, g));
                            }
                        }
                    }
                }
            }
            Ok(())
        });
        let n = added.len();
        for (g, (score, source, cosine, f)) in added {
            candidates.push(Candidate {
                doc: Doc::Fact(g),
                found: Found::Fact(f),
                score,
                searches: vec![format!("walk from fact {source}")],
                cosine,
            });
        }
        candidates.sort_by(|a, b| b.score.total_cmp(&a.score).then(a.doc.cmp(&b.doc)));
        n
    }
}

/// Whether `c` is an excerpt holding every turn fact `f` was written from.
fn shows_turns_of(c: &Candidate, f: &Fact) -> bool {
    match &c.found {
        Found::Passage(p) => p.first_turn <= f.first_turn && f.last_turn <= p.last_turn,
        Found::Fact(_) => false,
    }
}

/// Whether a passage is in the request's view: its episode is live or leaving, unless it is a
/// live episode the block may hold back (`hideable`) whose messages are all still history (one
/// superseded since would show words the history no longer holds).
fn passage_in_view(st: &State, p: &Passage, hideable: &[u64]) -> bool {
    let Some(e) = st.episodes.get(p.episode as usize) else {
        return false;
    };
    match e.state {
        EpisodeState::Leaving => true,
        EpisodeState::Live => {
            !hideable.contains(&e.n)
                || st
                    .messages_in(p.first_seq, p.last_seq)
                    .any(|m| m.superseded_at.is_some() && !p.skipped.contains(&m.seq))
        }
        EpisodeState::Sealed | EpisodeState::Forgotten => false,
    }
}

/// The facts on entity `e`'s edges, newest first; None when it has more than `hub` (a hub).
pub(super) fn edge_facts(
    r: &crate::store::Reader<'_>,
    memory: &str,
    e: u64,
    hub: usize,
) -> Result<Option<Vec<u64>>, crate::store::StoreError> {
    let mut facts = Vec::new();
    r.visit_rev(Table::Edges, &keys::seq2_prefix(memory, e), |k, _other: u64| {
        facts.push(keys::last_number(k));
        Ok(facts.len() <= hub)
    })?;
    facts.dedup();
    Ok((facts.len() <= hub).then_some(facts))
}

pub(super) fn entities(f: &Fact) -> impl Iterator<Item = u64> + '_ {
    let mut v: Vec<u64> = f.subject_entity.into_iter().chain(f.object_entity).collect();
    v.dedup();
    v.into_iter()
}

fn cosine(a: &[f32], b: &[f32]) -> f32 {
    // Stored and query vectors are L2-normalised.
    a.iter().zip(b).map(|(x, y)| x * y).sum()
}

fn item(c: &Candidate) -> RecallItem {
    let (kind, n, turns, seqs) = match &c.found {
        Found::Fact(f) => ("fact", f.n, [f.first_turn, f.last_turn], [f.note_seq, f.note_seq]),
        Found::Passage(p) => ("passage", p.n, [p.first_turn, p.last_turn], [p.first_seq, p.last_seq]),
    };
    RecallItem {
        kind: kind.into(),
        n,
        score: c.score,
        searches: c.searches.clone(),
        cosine: c.cosine,
        turns,
        seqs,
    }
}

/// What a document costs in a block, about: its words, its bullet or header and its date.
fn estimate(found: &Found) -> u64 {
    let n = match found {
        Found::Fact(f) => tokens::line_tokens(&f.note) as u64,
        Found::Passage(p) if p.text_tokens > 0 => p.text_tokens,
        Found::Passage(p) => tokens::text_tokens(&p.text) as u64,
    };
    n + 12
}

/// Document `doc` as recall may show it: an active fact not in the facts block, or a passage
/// out of view. None when it is neither or cannot be read.
fn read_found<'a>(r: &crate::store::Reader<'_>, st: &'a State, doc: Doc, hideable: &[u64]) -> Option<Found<'a>> {
    match doc {
        Doc::Fact(n) => match st.fact_or_read(r, n) {
            Ok(Some(f)) if f.is_active() && !f.note.is_empty() && !in_facts_block(st, &f) => Some(Found::Fact(f)),
            _ => None,
        },
        Doc::Passage(n) => match r.get::<Passage>(Table::Passages, &keys::seq(&st.memory.id, n)) {
            Ok(Some(mut p)) if !passage_in_view(st, &p, hideable) => {
                text_if_uncounted(r, &st.memory.id, &mut p).ok()?;
                Some(Found::Passage(p))
            }
            _ => None,
        },
    }
}

/// Reads a candidate passage's text now only when [`estimate`] needs it: a passage stored before
/// its tokens were counted at the cut. The others' texts are read once the fill chooses them.
fn text_if_uncounted(
    r: &crate::store::Reader<'_>,
    memory: &str,
    p: &mut Passage,
) -> Result<(), crate::store::StoreError> {
    if p.text_tokens == 0 {
        super::state::passage_text(r, memory, p)?;
    }
    Ok(())
}

/// Whether `c` is a fact noted from the same turns as `f`.
fn same_turns(c: &Candidate, f: &Fact) -> bool {
    matches!(&c.found, Found::Fact(g) if (g.first_turn, g.last_turn) == (f.first_turn, f.last_turn))
}

/// The block's text: a section of facts per message part they were found for (headed when a
/// part found some), each grouped by the entity its facts share most (named for it,
/// newest first, each dated with its turns: facts noted together share one date line); then
/// excerpts in conversation order. And where the excerpts begin (see [`render_sections`]).
fn render(st: &State, chosen: &[&Candidate], lists: &[(String, Vec<u64>)], parts: &[String]) -> (String, usize) {
    let mut sections: Vec<(Option<usize>, Vec<&Fact>)> = Vec::new();
    for c in chosen {
        if let Found::Fact(f) = &c.found {
            let f: &Fact = f;
            let part = part_of(lists, c.doc.key());
            match sections.iter_mut().find(|(p, _)| *p == part) {
                Some((_, fs)) => fs.push(f),
                None => sections.push((part, vec![f])),
            }
        }
    }
    sections.sort_by_key(|(p, _)| *p);
    let sections: Vec<(Option<String>, Vec<&Fact>)> = sections
        .into_iter()
        .map(|(p, fs)| (p.and_then(|i| parts.get(i - 1)).map(|t| excerpt(t, 80)), fs))
        .collect();
    let passages: Vec<&Passage> = chosen
        .iter()
        .filter_map(|c| match &c.found {
            Found::Passage(p) => Some(p),
            Found::Fact(_) => None,
        })
        .collect();
    render_sections(st, &sections, &passages)
}

/// Each part's best documents (its meaning search's first hits that are relevant by meaning,
/// [`PART_LEADS`] of them), part by part: they go first, so a question at the end of a long
/// correction gets its own memories even when documents matching the correction's common words
/// collect more of the fused score.
fn part_leads<'c, 'a>(
    lists: &[(String, Vec<u64>)],
    parts: usize,
    candidates: &'c [Candidate<'a>],
    relevant: f32,
) -> Vec<&'c Candidate<'a>> {
    let mut leads: Vec<&Candidate> = Vec::new();
    for i in 1..=parts {
        let name = format!("meaning:part {i}");
        let Some((_, keys)) = lists.iter().find(|(n, _)| *n == name) else {
            continue;
        };
        let mut taken = 0;
        for &key in keys {
            if taken == PART_LEADS {
                break;
            }
            if leads.iter().any(|c| c.doc.key() == key) {
                continue;
            }
            let relevant = candidates
                .iter()
                .find(|c| c.doc.key() == key && c.cosine.is_some_and(|cos| cos >= relevant));
            if let Some(c) = relevant {
                leads.push(c);
                taken += 1;
            }
        }
    }
    leads
}

/// The message part (1-based) a document was found for: the part whose search ranked it best,
/// unless the message's own searches ranked it higher (the message holds the part's words, so
/// a tie is the part's); None for the message as a whole.
fn part_of(lists: &[(String, Vec<u64>)], key: u64) -> Option<usize> {
    let mut message = usize::MAX;
    let mut best: Option<(usize, usize)> = None;
    for (name, keys) in lists {
        let Some(rank) = keys.iter().position(|k| *k == key) else {
            continue;
        };
        let part = name
            .strip_prefix("words:part ")
            .or_else(|| name.strip_prefix("meaning:part "))
            .and_then(|i| i.parse::<usize>().ok());
        match part {
            Some(i) if best.is_none_or(|(r, _)| rank < r) => best = Some((rank, i)),
            Some(_) => {}
            None if name == "words:message" || name == "meaning:message" => message = message.min(rank),
            None => {}
        }
    }
    best.filter(|(rank, _)| *rank <= message).map(|(_, i)| i)
}

/// The first `max` characters of `text`, with an ellipsis when cut.
fn excerpt(text: &str, max: usize) -> String {
    match text.char_indices().nth(max) {
        Some((at, _)) => format!("{}…", &text[..at]),
        None => text.to_owned(),
    }
}

/// Renders a block from its facts (best first) and passages.
pub(super) fn render_parts(st: &State, facts: &[&Fact], passages: &[&Passage]) -> String {
    render_sections(st, &[(None, facts.to_vec())], passages).0
}

/// Renders a block from its sections of facts (each best first; a section headed with the
/// message part it answers when a part found some) and its passages; and where in the text its
/// excerpts begin (its length when there are none).
fn render_sections(st: &State, sections: &[(Option<String>, Vec<&Fact>)], passages: &[&Passage]) -> (String, usize) {
    let mut out = String::from(blocks::RECALL_HEADER);
    let headed = sections.iter().any(|(part, _)| part.is_some());
    for (part, facts) in sections {
        if headed {
            match part {
                Some(p) => out.push_str(&format!("\nFor “{p}”:")),
                None => out.push_str("\nFor the message as a whole:"),
            }
        }
        push_groups(&mut out, st, facts);
    }
    let excerpts_at = out.len();
    out.push_str(&excerpts_section(passages));
    (out, excerpts_at)
}

/// The end of a block that shows `passages`: its excerpts in conversation order, each headed
/// with its turns and date (empty without passages). A stored block keeps only the passages'
/// numbers for it (`state::write_recall`): passages never change, so the text is the same.
pub(super) fn excerpts_section(passages: &[&Passage]) -> String {
    let mut out = String::new();
    if !passages.is_empty() {
        let mut ps: Vec<&&Passage> = passages.iter().collect();
        ps.sort_by_key(|p| p.first_seq);
        out.push_str("\nExcerpts of the conversation:");
        for p in ps {
            out.push_str(&format!(
                "\n[{}, {}]\n{}",
                turns(p.first_turn, p.last_turn),
                date(p.at),
                p.text
            ));
        }
    }
    out
}

/// When what a fact says was said, as far as the memory knows: the end of the episodes it was
/// noted from. The note may come much later (an episode is noted when it leaves the view, which
/// in a conversation taken up again now and then is days after it was said), and a fact dated by
/// its note would tell the model that "last Saturday" was weeks later than it was. The note's
/// own time when it names no episode.
fn said(st: &State, f: &Fact) -> f64 {
    f.episodes
        .iter()
        .filter_map(|&e| st.episodes.get(e as usize))
        .map(|e| e.at)
        .reduce(f64::max)
        .unwrap_or(f.at)
}

/// Facts grouped by the entity they share most among themselves (named for it), each group in
/// the order its best fact came, newest first within.
fn push_groups(out: &mut String, st: &State, facts: &[&Fact]) {
    let mut within: HashMap<u64, usize> = HashMap::new();
    for f in facts {
        for e in entities(f) {
            *within.entry(e).or_default() += 1;
        }
    }
    let mut groups: Vec<(Option<u64>, Vec<&Fact>)> = Vec::new();
    for f in facts {
        let key = entities(f).max_by_key(|e| (within.get(e).copied().unwrap_or(0), std::cmp::Reverse(*e)));
        match groups.iter_mut().find(|(k, _)| *k == key) {
            Some((_, g)) => g.push(f),
            None => groups.push((key, vec![f])),
        }
    }
    for (key, mut group) in groups {
        group.sort_by(|a, b| b.at.total_cmp(&a.at).then(b.n.cmp(&a.n)));
        let name = key
            .and_then(|e| st.entities.get(e as usize))
            .map_or("Other facts".to_owned(), |e| format!("About {}", e.name));
        out.push_str(&format!("\n{name}:"));
        // Facts noted together (the same turns) share one date line.
        let mut i = 0;
        while i < group.len() {
            let f = group[i];
            let run = group[i..]
                .iter()
                .take_while(|g| (g.first_turn, g.last_turn) == (f.first_turn, f.last_turn))
                .count();
            let dated = format!("{}, {}", turns(f.first_turn, f.last_turn), date(said(st, f)));
            if run == 1 {
                out.push_str(&format!("\n- {} ({dated})", f.note));
            } else {
                out.push_str(&format!("\n- {dated}:"));
                for g in &group[i..i + run] {
                    out.push_str(&format!("\n  - {}", g.note));
                }
            }
            i += run;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::engine::records::{Episode, Restatement};

    #[test]
    fn the_facts_block_is_found_from_sealed_episodes_as_a_pass_over_every_fact_finds_it() {
        let dir = tempfile::tempdir().unwrap();
        let store = crate::store::Store::open(dir.path(), &Default::default()).unwrap();
        let mut st = store.read(|r| State::load(r, "m", 0.0)).unwrap();
        // Episodes 0–5: 0 and 1 forgotten, 2–4 sealed, 5 live.
        for k in 0..6u64 {
            st.push_episode(Episode {
                acknowledged: true,
                ..Episode::spanning(
                    (2 * k, 2 * k + 1),
                    (k + 1, k + 1),
                    10,
                    match k {
                        0 | 1 => EpisodeState::Forgotten,
                        5 => EpisodeState::Live,
                        _ => EpisodeState::Sealed,
                    },
                )
            });
        }
        // Two facts per episode, written as notes write them (each listed on its episode).
        for k in 0..6u64 {
            for i in 0..2 {
                let mut f = Fact::new(&format!("fact {i} of episode {k}"), "", "", false, 0.0);
                f.episodes = vec![k];
                let n = st.push_fact(f);
                st.episode_mut(k).facts.push(n);
            }
        }
        // Fact 6 (sealed episode 3) merged into fact 0 (forgotten episode 0): 0 is shown by
        // its restatement. Fact 1 merged into fact 10 (live): neither is shown. Fact 5 (sealed
        // episode 2) merged into 7, then 7 into 11 (live): 11 is shown only by 7's episodes.
        let merge = |st: &mut State, fact: u64, into: u64| {
            let episodes = st.fact(fact).unwrap().episodes.clone();
            st.fact_mut(fact).status = FactStatus::Merged { into, at: 1.0 };
            st.fact_mut(into).restated_by.push(Restatement {
                fact,
                note_seq: 0,
                episodes,
                at: 1.0,
            });
        };
        merge(&mut st, 6, 0);
        merge(&mut st, 1, 10);
        merge(&mut st, 5, 7);
        merge(&mut st, 7, 11);
        // Fact 8 (sealed episode 4) retired by a contradiction.
        st.fact_mut(8).status = FactStatus::Retired { by: 9, at: 1.0 };

        let mut found: Vec<u64> = facts_in_block(&st).iter().map(|f| f.n).collect();
        found.sort();
        let every: Vec<u64> = st
            .facts
            .iter()
            .filter(|f| in_facts_block(&st, f))
            .map(|f| f.n)
            .collect();
        assert_eq!(found, every);
        assert_eq!(found, vec![0, 4, 9, 11]);

        // Loaded again, the state reads only the facts of episodes not forgotten and what they
        // merged into: the same block, without facts 1–3 (forgotten episodes 0 and 1, merged
        // into nothing shown), which recall reads when it finds them.
        store.write(|w| st.save(w)).unwrap();
        let mut again = store.read(|r| State::load(r, "m", 0.0)).unwrap();
        let mut found_again: Vec<u64> = facts_in_block(&again).iter().map(|f| f.n).collect();
        found_again.sort();
        assert_eq!(found_again, found);
        let resident: Vec<u64> = again.facts.iter().map(|f| f.n).collect();
        assert_eq!(resident, vec![0, 4, 5, 6, 7, 8, 9, 10, 11]);
        assert_eq!(again.facts.len(), 12);
        let read = store
            .read(|r| Ok(again.fact_or_read(r, 2)?.map(|f| f.note.clone())))
            .unwrap();
        assert_eq!(read.as_deref(), Some("fact 0 of episode 1"));
        assert!(store.read(|r| again.fact_or_read(r, 12)).unwrap().is_none());
        // A lane job reads them all: from the store under the lock, or read before it.
        let mut read_before = store.read(|r| State::load(r, "m", 0.0)).unwrap();
        store.read(|r| again.load_facts(r)).unwrap();
        assert_eq!(again.facts.iter().count(), 12);
        assert!(again.facts.is_whole());
        let prefix = keys::memory_prefix("m");
        let mut all: Vec<Fact> = store.read(|r| r.scan(Table::Facts, &prefix)).unwrap();
        all.retain(|f| f.n != 2);
        read_before.add_read_facts(all);
        assert!(!read_before.facts.is_whole(), "fact 2 was not read: still missing");
        read_before.add_read_facts(vec![again.fact(2).unwrap().clone()]);
        assert!(read_before.facts.is_whole());
    }

    #[test]
    fn facts_noted_from_the_same_turns_share_one_date_line_and_every_fact_is_dated() {
        let dir = tempfile::tempdir().unwrap();
        let store = crate::store::Store::open(dir.path(), &Default::default()).unwrap();
        let st = store.read(|r| State::load(r, "m", 0.0)).unwrap();
        let fact = |note: &str, first_turn, last_turn, at| {
            let mut f = Fact::new(note, "", "", false, at);
            (f.first_turn, f.last_turn) = (first_turn, last_turn);
            f
        };
        let (day, later) = (1_700_000_000.0, 1_700_600_000.0);
        let moved = fact("Ana moved to Lisbon.", 4, 6, day);
        let job = fact("Ana started a new job.", 9, 9, later);
        let cat = fact("Ana adopted a cat.", 4, 6, day);
        let text = render_parts(&st, &[&moved, &job, &cat], &[]);
        assert_eq!(
            text,
            format!(
                "{}\nOther facts:\n- Ana started a new job. (turn 9, {})\n- turns 4–6, {}:\n  - Ana moved to \
                 Lisbon.\n  - Ana adopted a cat.",
                blocks::RECALL_HEADER,
                date(later),
                date(day)
            )
        );
    }

    #[test]
    fn a_fact_is_dated_by_the_episodes_it_was_noted_from_not_by_its_note() {
        let dir = tempfile::tempdir().unwrap();
        let store = crate::store::Store::open(dir.path(), &Default::default()).unwrap();
        let mut st = store.read(|r| State::load(r, "m", 0.0)).unwrap();
        // Said on 2023-05-25 and 2023-06-09; noted on 2023-07-12, when both left the view.
        let (said, later, noted) = (1_685_000_000.0, 1_686_300_000.0, 1_689_150_000.0);
        for (k, at) in [(0u64, said), (1, later)] {
            st.push_episode(Episode {
                at,
                ..Episode::spanning((2 * k, 2 * k + 1), (k + 1, k + 1), 10, EpisodeState::Sealed)
            });
        }
        let mut race = Fact::new("Melanie ran a charity race last Saturday.", "", "", false, noted);
        (race.first_turn, race.last_turn, race.episodes) = (1, 2, vec![0, 1]);
        let mut orphan = Fact::new("Noted with no episode leaving.", "", "", false, noted);
        (orphan.first_turn, orphan.last_turn) = (3, 3);
        let text = render_parts(&st, &[&race, &orphan], &[]);
        assert!(text.contains(&format!("(turns 1–2, {})", date(later))), "{text}");
        assert_eq!(
            (date(later).as_str(), date(noted).as_str()),
            ("2023-06-09", "2023-07-12")
        );
        assert!(text.contains(&format!("(turn 3, {})", date(noted))), "{text}");
    }

    #[test]
    fn a_document_belongs_to_the_part_whose_search_ranked_it_best() {
        let lists = |v: &[(&str, &[u64])]| -> Vec<(String, Vec<u64>)> {
            v.iter().map(|(n, k)| (n.to_string(), k.to_vec())).collect()
        };
        let l = lists(&[
            ("words:message", &[4, 2, 5]),
            ("meaning:message", &[6, 9, 2]),
            ("meaning:part 1", &[2, 4, 5]),
            ("words:part 2", &[8, 6]),
            ("words:recent", &[7]),
        ]);
        assert_eq!(part_of(&l, 2), Some(1), "rank 0 in part 1 beats rank 1 for the message");
        assert_eq!(part_of(&l, 4), None, "the message found it first");
        assert_eq!(part_of(&l, 6), None, "the message found it first");
        assert_eq!(part_of(&l, 5), Some(1), "a tie goes to the part");
        assert_eq!(part_of(&l, 9), None, "no part found it");
        assert_eq!(part_of(&l, 8), Some(2), "only a part found it");
        assert_eq!(part_of(&l, 7), None, "the recent conversation is not a part");
        assert_eq!(excerpt("abcdef", 3), "abc…");
        assert_eq!(excerpt("abc", 3), "abc");
    }

    #[test]
    fn doc_keys_round_trip() {
        for d in [Doc::Fact(0), Doc::Fact(7), Doc::Passage(0), Doc::Passage(9)] {
            assert_eq!(Doc::of(d.key()), d);
        }
        assert_ne!(Doc::Fact(3).key(), Doc::Passage(3).key());
    }

    #[test]
    fn a_question_after_a_long_correction_gets_its_own_part() {
        let text = "No, that's not what I meant. The deploy script must run after the migration, not before it, \
                    and the staging database needs the same order too.\nBy the way, what port did we pick for the cache?";
        let parts = split_parts(text);
        assert!(parts.len() >= 2, "{parts:?}");
        assert_eq!(
            parts.last().unwrap(),
            "By the way, what port did we pick for the cache?"
        );
    }

    #[test]
    fn a_long_message_embeds_its_last_parts_so_its_closing_question_is_one() {
        let log = "error: connection refused at line 12 of the loader\n".repeat(80);
        let text = format!("{log}Why does the loader keep failing after the upgrade?");
        let parts = split_parts(&text);
        let from = embedded_from(&parts);
        assert!(from > 0 && from < parts.len(), "{from} of {}", parts.len());
        let words: usize = parts[from..].iter().map(|p| p.split_whitespace().count()).sum();
        assert!(words <= EMBED_PART_WORDS, "{words}");
        assert!(parts[from..].last().unwrap().ends_with("after the upgrade?"));
        // Whole parts only: three windows of 60 words fit the 180, a fourth does not.
        let windows = vec!["word ".repeat(PART_MAX_WORDS).trim().to_owned(); 4];
        assert_eq!(embedded_from(&windows), 1);
        assert_eq!(embedded_from(&[]), 0);
    }

    #[test]
    fn short_messages_are_one_part_and_long_lines_are_windowed() {
        assert!(split_parts("What did we decide?").is_empty());
        let long = "word ".repeat(150);
        let parts = split_parts(&long);
        assert_eq!(parts.len(), 3);
        assert!(parts.iter().all(|p| p.split_whitespace().count() <= PART_MAX_WORDS));
    }

    #[test]
    fn a_passages_meaning_counts_no_more_than_its_words_and_a_facts_meaning_counts_most() {
        let (by_meaning, by_words) = (Doc::Passage(1).key(), Doc::Passage(2).key());
        let fact = Doc::Fact(3).key();
        let lists = |meaning: u64| {
            vec![
                ("meaning:message".to_owned(), vec![meaning]),
                ("words:message".to_owned(), vec![by_words]),
            ]
        };
        let score = |fused: &BTreeMap<u64, (f64, Vec<String>)>, k: u64| fused[&k].0;
        // Each first in its list: a passage's vector is a weak clue, no stronger than its words
        // (at full weight the passage found by meaning would lead).
        let fused = fuse(&lists(by_meaning));
        assert!(score(&fused, by_words) >= score(&fused, by_meaning));
        // A fact's vector is the strong clue: first by meaning, it leads.
        let fused = fuse(&lists(fact));
        assert!(score(&fused, fact) > score(&fused, by_words));
        assert_eq!(fused[&fact].1, vec!["meaning:message".to_owned()]);
    }
}
