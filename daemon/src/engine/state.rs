//! One memory's state, loaded for one op and saved back in one transaction. Changes are
//! tracked so only what changed is written; traces are only ever appended.

use std::borrow::Cow;
use std::collections::{BTreeMap, BTreeSet};
use std::sync::Arc;

use super::facts::Facts;
use super::records::{
    Chain, Entity, Episode, EpisodeState, Fact, Instructions, Job, JobKind, MemoryRecord, Passage, RecallBlock,
    StoredMessage, Trace, TraceKind, UnitScore, VectorKind, VectorRecord,
};
use crate::store::{keys, Read, Reader, StoreError, Table, Writer};

#[derive(Clone)]
pub struct State {
    pub memory: MemoryRecord,
    /// Stored messages from seq `loaded_from` on, superseded and note calls included, in seq
    /// order. Older ones belong to sealed or forgotten episodes (which never come back into
    /// view) before the recent turns: they stay in the store and are read when an op needs
    /// them ([`State::load_messages_from`]), so loading a memory costs what is in view, not
    /// everything it ever stored.
    pub messages: Vec<StoredMessage>,
    loaded_from: u64,
    /// Set when the client sends note calls back (checked against every note taken): the
    /// cached state then keeps every message instead of reading them again at each op.
    keep_whole: bool,
    /// Set when the whole history was read for a memory whose prints were not whole: the save
    /// writes every history message's print.
    write_prints: bool,
    /// Messages older than the loaded ones that an op changed (a late distill resizes its
    /// block's message): written with the save, not kept.
    older_changed: Vec<StoredMessage>,
    pub episodes: Vec<Episode>,
    /// Facts, traces and entities are shared between copies of a state until one of them
    /// changes (`Arc::make_mut`): a dry run copies the cached state, and at 100k facts cloning
    /// and dropping them was a third of its decorate.
    /// Facts: at load only those a request shows without a search (see [`Facts`]).
    pub facts: Arc<Facts>,
    pub traces: Arc<Vec<Trace>>,
    /// The graph's nodes, by number.
    pub entities: Arc<Vec<Entity>>,
    /// Boundary scores of units not cut yet, by first seq (older ones stay in the store).
    pub unit_scores: BTreeMap<u64, UnitScore>,
    /// Recall blocks by the seq of the user message each precedes, from `loaded_from` on: a
    /// block is shown only while its message is in view, so the older ones (the largest table
    /// of a long memory) stay in the store ([`State::load_recall`] reads one; export scans).
    pub recalls: BTreeMap<u64, RecallBlock>,
    /// Whether the memory existed before this op.
    pub existed: bool,
    dirty_messages: BTreeSet<u64>,
    dirty_recalls: BTreeSet<u64>,
    /// Where the excerpts begin in the text of blocks recall rendered since the last save.
    excerpts_at: BTreeMap<u64, usize>,
    /// Write-only: passages cut from sealed episodes (read back from the store by recall).
    new_passages: Vec<Passage>,
    /// Rows of table `mentions` for passages stored before it (`MemoryRecord::mentions_whole`).
    old_mentions: Vec<Mention>,
    dirty_episodes: BTreeSet<u64>,
    dirty_units: BTreeSet<u64>,
    dirty_facts: BTreeSet<u64>,
    dirty_entities: BTreeSet<u64>,
    /// Write-only graph records: (normalised name, entity), (entity, fact, other), vectors.
    new_aliases: Vec<(String, u64)>,
    new_edges: Vec<(u64, u64, u64)>,
    new_vectors: Vec<(VectorKind, u64, VectorRecord)>,
    new_facts: usize,
    new_traces: usize,
    new_jobs: Vec<Job>,
    done_jobs: Vec<u64>,
    /// Traces per episode, for numbering new ones without a scan.
    trace_counts: std::collections::HashMap<u64, u64>,
}

impl State {
    pub fn load(r: &Reader<'_>, memory: &str, now: f64) -> Result<State, StoreError> {
        let record = r.get::<MemoryRecord>(Table::Memories, &keys::memory(memory))?;
        let existed = record.is_some();
        let prefix = keys::memory_prefix(memory);
        let traces: Vec<Trace> = r.scan(Table::Traces, &prefix)?;
        let mut trace_counts = std::collections::HashMap::new();
        for t in &traces {
            *trace_counts.entry(t.episode).or_insert(0) += 1;
        }
        let episodes: Vec<Episode> = r.scan(Table::Episodes, &prefix)?;
        // Only the scores of units not cut yet matter; older ones stay in the store.
        let uncut_from = episodes.last().map(|e| e.last_seq + 1).unwrap_or(0);
        let mut unit_scores = BTreeMap::new();
        r.visit(
            Table::Units,
            &prefix,
            &keys::seq(memory, uncut_from),
            |_, u: UnitScore| {
                unit_scores.insert(u.start_seq, u);
                Ok(true)
            },
        )?;
        let mut memory_record = record.unwrap_or_else(|| MemoryRecord::new(memory, now));
        if memory_record.queued_jobs.is_none() {
            memory_record.queued_jobs = Some(r.count(Table::Jobs, &prefix)?);
        }
        let loaded_from = horizon(&episodes, memory_record.turn);
        let mut messages = Vec::new();
        r.visit(
            Table::Messages,
            &prefix,
            &keys::seq(memory, loaded_from),
            |_, m: StoredMessage| {
                messages.push(m);
                Ok(true)
            },
        )?;
        let facts = Facts::load(r, memory, &episodes, memory_record.next_fact)?;
        let mut recalls = BTreeMap::new();
        for table in [Table::Recall, Table::FreshRecall] {
            r.visit(table, &prefix, &keys::seq(memory, loaded_from), |_, b: RecallBlock| {
                recalls.insert(b.seq, b);
                Ok(true)
            })?;
        }
        for b in recalls.values_mut() {
            whole_recall(r, memory, b)?;
        }
        Ok(State {
            memory: memory_record,
            messages,
            loaded_from,
            keep_whole: false,
            write_prints: false,
            older_changed: Vec::new(),
            episodes,
            facts: Arc::new(facts),
            traces: Arc::new(traces),
            entities: Arc::new(r.scan(Table::Entities, &prefix)?),
            unit_scores,
            recalls,
            existed,
            dirty_messages: BTreeSet::new(),
            dirty_recalls: BTreeSet::new(),
            excerpts_at: BTreeMap::new(),
            new_passages: Vec::new(),
            old_mentions: Vec::new(),
            dirty_episodes: BTreeSet::new(),
            dirty_units: BTreeSet::new(),
            dirty_facts: BTreeSet::new(),
            dirty_entities: BTreeSet::new(),
            new_aliases: Vec::new(),
            new_edges: Vec::new(),
            new_vectors: Vec::new(),
            new_facts: 0,
            new_traces: 0,
            new_jobs: Vec::new(),
            done_jobs: Vec::new(),
            trace_counts,
        })
    }

    pub fn save(&self, w: &mut Writer<'_>) -> Result<(), StoreError> {
        let id = &self.memory.id;
        for seq in &self.dirty_messages {
            let m = &self.messages[self.message_index(*seq).expect("dirty message exists")];
            w.put(Table::Messages, &keys::seq(id, m.seq), m)?;
            // A superseded message (or a note call) leaves the history: its print goes.
            let print = keys::seq2(id, m.fingerprint, m.seq);
            if m.in_history() {
                w.put(Table::Prints, &print, &())?;
            } else {
                w.delete(Table::Prints, &print)?;
            }
        }
        for m in &self.older_changed {
            w.put(Table::Messages, &keys::seq(id, m.seq), m)?;
        }
        if self.write_prints {
            for m in self.messages.iter().filter(|m| m.in_history()) {
                w.put(Table::Prints, &keys::seq2(id, m.fingerprint, m.seq), &())?;
            }
        }
        for n in &self.dirty_episodes {
            w.put(Table::Episodes, &keys::seq(id, *n), &self.episodes[*n as usize])?;
        }
        // Passages first: a recall block is stored with the passages it shows read back.
        for p in &self.new_passages {
            w.put(Table::Passages, &keys::seq(id, p.n), &stored_passage(p))?;
            write_mentions(w, id, p)?;
        }
        for m in &self.old_mentions {
            write_mention(w, id, *m)?;
        }
        for seq in &self.dirty_recalls {
            if let Some(b) = self.recalls.get(seq) {
                write_recall_at(w, id, b, self.excerpts_at.get(seq).copied())?;
            }
        }
        for seq in &self.dirty_units {
            if let Some(u) = self.unit_scores.get(seq) {
                w.put(Table::Units, &keys::seq(id, *seq), u)?;
            }
        }
        let first_new = self.facts.len() - self.new_facts as u64;
        for f in self.facts.from(first_new) {
            w.put(Table::Facts, &keys::seq(id, f.n), f)?;
        }
        for n in self.dirty_facts.iter().filter(|n| **n < first_new) {
            if let Some(f) = self.facts.get(*n) {
                w.put(Table::Facts, &keys::seq(id, *n), f)?;
            }
        }
        for n in &self.dirty_entities {
            w.put(Table::Entities, &keys::seq(id, *n), &self.entities[*n as usize])?;
        }
        for (name, n) in &self.new_aliases {
            w.put(Table::Aliases, &keys::name(id, name), n)?;
        }
        for (entity, fact, other) in &self.new_edges {
            w.put(Table::Edges, &keys::seq2(id, *entity, *fact), other)?;
        }
        for (kind, n, v) in &self.new_vectors {
            w.put(Table::Vectors, &keys::seq2(id, *kind as u64, *n), v)?;
        }
        for t in &self.traces[self.traces.len() - self.new_traces..] {
            w.put(Table::Traces, &keys::seq2(id, t.episode, t.n), t)?;
        }
        for job in &self.new_jobs {
            w.put(Table::Jobs, &keys::seq(id, job.n), job)?;
        }
        for n in &self.done_jobs {
            w.delete(Table::Jobs, &keys::seq(id, *n))?;
        }
        if self.memory.instructions.is_empty() {
            return w.put(Table::Memories, &keys::memory(id), &self.memory);
        }
        // New versions of the instructions go to their table, not the record.
        let mut record = self.memory.clone();
        for (n, version) in record.take_instructions() {
            w.put(Table::Instructions, &keys::seq(id, n), &version)?;
        }
        w.put(Table::Memories, &keys::memory(id), &record)
    }

    /// After a successful save: nothing is pending any more, so the state can be kept and
    /// reused by the next op (it equals what the store holds).
    pub fn mark_saved(&mut self) {
        self.dirty_messages.clear();
        self.dirty_recalls.clear();
        self.excerpts_at.clear();
        self.new_passages.clear();
        self.old_mentions.clear();
        self.dirty_episodes.clear();
        self.dirty_units.clear();
        self.dirty_facts.clear();
        self.dirty_entities.clear();
        self.new_aliases.clear();
        self.new_edges.clear();
        self.new_vectors.clear();
        self.new_facts = 0;
        self.new_traces = 0;
        self.new_jobs.clear();
        self.done_jobs.clear();
        self.write_prints = false;
        self.older_changed.clear();
        self.memory.take_instructions();
        self.existed = true;
    }

    /// Queues background work; it is saved with everything else. A coalescing kind already
    /// queued is not queued again.
    pub fn push_job(&mut self, job: JobKind, at: f64) {
        if let Some(kind) = job.coalesces() {
            if self.memory.queued_kinds.iter().any(|k| k == kind) {
                return;
            }
            self.memory.queued_kinds.push(kind.to_owned());
        }
        let n = self.memory.next_job;
        self.memory.next_job += 1;
        *self.memory.queued_jobs.get_or_insert(0) += 1;
        self.new_jobs.push(Job {
            n,
            at,
            job,
            queued_at: wall_clock(),
            attempts: 0,
            error: None,
        });
    }

    /// Stores (or replaces) the recall block before user message `block.seq`.
    pub fn put_recall(&mut self, block: RecallBlock) {
        self.excerpts_at.remove(&block.seq);
        self.dirty_recalls.insert(block.seq);
        self.recalls.insert(block.seq, block);
    }

    /// Stores a block recall just rendered, whose excerpts begin at `excerpts_at` in its text:
    /// the save stores it without them as it is (see [`write_recall`]), not by reading its
    /// passages back to find them (a tenth of a decorate that recalls, at 10k messages of agent
    /// traffic).
    pub fn put_recalled(&mut self, block: RecallBlock, excerpts_at: Option<usize>) {
        let seq = block.seq;
        self.put_recall(block);
        if let Some(at) = excerpts_at {
            self.excerpts_at.insert(seq, at);
        }
    }

    /// Stores passages cut from episodes (numbered by the caller from `next_passage`).
    pub fn push_passages(&mut self, passages: Vec<Passage>) {
        if let Some(last) = passages.last() {
            self.memory.next_passage = self.memory.next_passage.max(last.n + 1);
        }
        self.new_passages.extend(passages);
    }

    /// The rows of table `mentions` of every passage stored before it, read by an `Index` job
    /// ([`mentions`]); from then on the memory's passages all have theirs.
    pub fn backfill_mentions(&mut self, rows: Vec<Mention>) {
        self.old_mentions = rows;
        self.memory.mentions_whole = true;
    }

    /// Whether this op wrote facts (they are to be indexed).
    pub fn wrote_facts(&self) -> bool {
        self.new_facts > 0
    }

    /// Whether episodes wait to be cut into passages.
    pub fn needs_passages(&self) -> bool {
        self.episodes.iter().any(|e| !e.passaged)
    }

    pub fn has_new_jobs(&self) -> bool {
        !self.new_jobs.is_empty()
    }

    /// Marks a job done: its record is removed when the state is saved.
    pub fn finish_job(&mut self, n: u64, kind: &JobKind) {
        if let Some(k) = kind.coalesces() {
            self.memory.queued_kinds.retain(|q| q != k);
        }
        if let Some(q) = &mut self.memory.queued_jobs {
            *q = q.saturating_sub(1);
        }
        self.done_jobs.push(n);
    }

    /// Reads the stored messages from `seq` on that are not loaded yet (older history an op
    /// needs: an export, a lane job judging or cutting sealed episodes, a handoff).
    pub fn load_messages_from(&mut self, r: &Reader<'_>, seq: u64) -> Result<(), StoreError> {
        if seq >= self.loaded_from {
            return Ok(());
        }
        let until = self.loaded_from;
        let mut older = Vec::new();
        r.visit(
            Table::Messages,
            &keys::memory_prefix(&self.memory.id),
            &keys::seq(&self.memory.id, seq),
            |_, m: StoredMessage| {
                if m.seq >= until {
                    return Ok(false);
                }
                older.push(m);
                Ok(true)
            },
        )?;
        older.append(&mut self.messages);
        self.messages = older;
        self.loaded_from = seq;
        Ok(())
    }

    /// Reads the recall block before user message `seq` when it is older than what is loaded
    /// (a late distill judges and rewrites it; no other op needs older blocks, and reading
    /// them all with older messages would double what a lane job reads under the lock).
    pub fn load_recall(&mut self, r: &Reader<'_>, seq: u64) -> Result<(), StoreError> {
        if !self.recalls.contains_key(&seq) {
            if let Some(b) = recall_block(r, &self.memory.id, seq)? {
                self.recalls.insert(seq, b);
            }
        }
        Ok(())
    }

    /// Every message is loaded (and the history's chains written where they are missing).
    pub fn load_whole(&mut self, r: &Reader<'_>) -> Result<(), StoreError> {
        self.load_messages_from(r, 0)?;
        if !self.memory.prints_whole {
            self.memory.prints_whole = true;
            self.write_prints = true;
        }
        let mut previous = None;
        for m in self.messages.iter_mut().filter(|m| m.in_history()) {
            let chain = Chain::next(previous, m.fingerprint);
            if m.chain != Some(chain) {
                m.chain = Some(chain);
                self.dirty_messages.insert(m.seq);
            }
            previous = Some(chain);
        }
        Ok(())
    }

    /// The cached state keeps every message (its client sends note calls back, checked
    /// against every note taken).
    pub fn keep_whole(&mut self) {
        self.keep_whole = true;
    }

    /// For a request resending the history from its first message: where its new messages
    /// begin, when everything before is the stored history. What is not loaded is checked by
    /// the chain of the first loaded history message (a hash of every fingerprint before it),
    /// the rest message by message. None when it cannot tell.
    pub fn resent_through(&self, incoming: &[u64]) -> Option<usize> {
        let first = self.history().next()?.chain?;
        let p = first.at as usize;
        if incoming.len() <= p {
            return None;
        }
        let mut chain = None;
        for &fp in &incoming[..=p] {
            chain = Some(Chain::next(chain, fp));
        }
        if chain != Some(first) {
            return None;
        }
        let loaded: Vec<u64> = self.history().map(|m| m.fingerprint).collect();
        let rest = &incoming[p..];
        (rest.len() >= loaded.len() && rest[..loaded.len()] == loaded[..]).then_some(p + loaded.len())
    }

    /// The first seq whose message the state holds.
    pub fn loaded_from(&self) -> u64 {
        self.loaded_from
    }

    /// Moves the size of message `seq`, older than the loaded ones, from a recall block of
    /// `before` tokens to one of `after` (a late distill): read alone and written with the save.
    pub fn resize_older(&mut self, r: &Reader<'_>, seq: u64, before: u64, after: u64) -> Result<(), StoreError> {
        if let Some(mut m) = r.get::<StoredMessage>(Table::Messages, &keys::seq(&self.memory.id, seq))? {
            m.resize_block(before, after);
            self.older_changed.push(m);
        }
        Ok(())
    }

    pub fn whole(&self) -> bool {
        self.loaded_from == 0
    }

    /// Whether a request whose first history message has fingerprint `fp` can stand anywhere
    /// in the history that is not loaded, from the prints (a prefix scan, no message read):
    /// false when no message before the loaded ones has that fingerprint, so lining the request
    /// up with the loaded history is exact. True when one has, or when the prints are not whole.
    pub fn may_stand_before_loaded(&self, r: &Reader<'_>, fp: u64) -> Result<bool, StoreError> {
        if !self.memory.prints_whole {
            return Ok(true);
        }
        let id = &self.memory.id;
        let mut older = false;
        let prefix = keys::seq2_prefix(id, fp);
        r.visit(Table::Prints, &prefix, &prefix, |k, _: serde::de::IgnoredAny| {
            older = keys::last_number(k) < self.loaded_from;
            Ok(!older)
        })?;
        Ok(older)
    }

    /// An estimate of the heap this state holds, which the state cache keeps under its bound:
    /// the texts of the messages and recall blocks it holds, and a size per record. About
    /// right is enough: it keeps a few large memories from taking the room of many small ones.
    pub fn resident_bytes(&self) -> usize {
        use std::mem::size_of;
        // A message's text is held twice (read out of the message as it came, which is kept)
        // with the JSON value's nodes around it, and the bytes it came as while it is cached.
        let messages: usize = self
            .messages
            .iter()
            .map(|m| {
                let calls: usize = m
                    .message
                    .tool_calls
                    .iter()
                    .map(|c| 2 * (c.id.len() + c.name.len() + c.arguments.len()) + 128)
                    .sum();
                let wire = m.message.wire.0.as_ref().map_or(0, |b| b.len());
                size_of::<StoredMessage>() + 2 * m.message.text.len() + 256 + calls + wire
            })
            .sum();
        let recalls: usize = self
            .recalls
            .values()
            .map(|b| size_of::<RecallBlock>() + b.text.len() + 160 * b.items.len())
            .sum();
        // The rest by count, so the estimate costs what is in view, not the memory's size: an
        // episode's fact list, an entity's name and aliases, a fact's texts on average.
        size_of::<State>()
            + messages
            + recalls
            + self.episodes.len() * (size_of::<Episode>() + 48)
            + self.entities.len() * (size_of::<Entity>() + 64)
            + self.facts.resident() * (size_of::<Fact>() + 256)
            + self.traces.len() * size_of::<Trace>()
            + self.unit_scores.len() * (size_of::<UnitScore>() + 48)
    }

    /// Before the state is cached: drops the messages (and recall blocks) an op read beyond what
    /// is in view and the recent turns (they equal the store's; nothing unsaved is dropped).
    pub fn trim(&mut self) {
        if self.keep_whole {
            return;
        }
        let from = horizon(&self.episodes, self.memory.turn);
        if from <= self.loaded_from {
            return;
        }
        let cut = self.messages.partition_point(|m| m.seq < from);
        if self.messages[..cut]
            .iter()
            .any(|m| self.dirty_messages.contains(&m.seq))
            || self.dirty_recalls.range(..from).next().is_some()
        {
            return;
        }
        self.messages.drain(..cut);
        self.recalls = self.recalls.split_off(&from);
        self.loaded_from = from;
    }

    fn message_index(&self, seq: u64) -> Option<usize> {
        self.messages.binary_search_by_key(&seq, |m| m.seq).ok()
    }

    /// Appends a message as the memory's next one.
    pub fn push_message(&mut self, mut m: StoredMessage) -> u64 {
        if m.in_history() {
            // Chained to the history's last message; unknown when that is not loaded and
            // has no chain (stored before chains existed).
            m.chain = match self.history().next_back() {
                Some(previous) => previous.chain.map(|c| Chain::next(Some(c), m.fingerprint)),
                None if self.whole() => Some(Chain::next(None, m.fingerprint)),
                None => None,
            };
        }
        m.seq = self.memory.next_seq;
        self.memory.next_seq += 1;
        let seq = m.seq;
        self.dirty_messages.insert(seq);
        self.messages.push(m);
        seq
    }

    /// A stored message without the bytes it came as (an assistant message is stored from a
    /// report, and a loaded one has none) takes those of `sent`, the request's copy of it, when
    /// that copy is the stored message exactly: later replies then write it as bytes too. Not a
    /// change to the record (the bytes are not stored).
    pub fn adopt_wire(&mut self, seq: u64, sent: &crate::formats::Message) {
        let Some(bytes) = &sent.wire.0 else { return };
        let Some(i) = self.message_index(seq) else { return };
        let stored = &mut self.messages[i].message;
        if stored.wire.0.is_none() && crate::formats::identical(&stored.raw, &sent.raw) {
            stored.wire.0 = Some(bytes::Bytes::copy_from_slice(bytes));
        }
    }

    pub fn message_mut(&mut self, seq: u64) -> &mut StoredMessage {
        let i = self.message_index(seq).expect("message exists");
        self.dirty_messages.insert(seq);
        &mut self.messages[i]
    }

    /// Messages in the history (not superseded, not note calls), in order.
    pub fn history(&self) -> impl DoubleEndedIterator<Item = &StoredMessage> {
        self.messages.iter().filter(|m| m.in_history())
    }

    /// History messages with seqs in `first..=last`: the loaded ones borrowed, older ones read
    /// from the store. A job on an old episode reads that episode alone instead of loading
    /// every message from it to the present (and trimming them again).
    pub fn history_between<'a>(
        &'a self,
        r: &Reader<'_>,
        first: u64,
        last: u64,
    ) -> Result<Vec<Cow<'a, StoredMessage>>, StoreError> {
        let mut out = Vec::new();
        if first < self.loaded_from {
            let older = history_in(r, &self.memory.id, first, last.min(self.loaded_from - 1))?;
            out.extend(older.into_iter().map(Cow::Owned));
        }
        out.extend(
            self.messages_in(first, last)
                .filter(|m| m.in_history())
                .map(Cow::Borrowed),
        );
        Ok(out)
    }

    /// Stored messages with seqs in `first..=last` (superseded and note calls included).
    pub fn messages_in(&self, first: u64, last: u64) -> impl Iterator<Item = &StoredMessage> {
        let from = self.messages.partition_point(|m| m.seq < first);
        self.messages[from..].iter().take_while(move |m| m.seq <= last)
    }

    /// Fact `n` to change. Only a resident fact can change: the lane reads them all first
    /// ([`State::load_facts`]); panics on one that is not (a bug, not bad input).
    pub fn fact_mut(&mut self, n: u64) -> &mut Fact {
        self.dirty_facts.insert(n);
        Arc::make_mut(&mut self.facts)
            .get_mut(n)
            .unwrap_or_else(|| panic!("fact {n} changed without being read"))
    }

    /// Takes facts read from the store into the state where it holds none of that number.
    pub fn add_read_facts(&mut self, facts: Vec<Fact>) {
        if !self.facts.is_whole() {
            Arc::make_mut(&mut self.facts).add_read(facts);
        }
    }

    /// Reads every fact into the state (a lane job or an export works on all of them); once
    /// whole, a cached state stays whole.
    pub fn load_facts(&mut self, r: &Reader<'_>) -> Result<(), StoreError> {
        if !self.facts.is_whole() {
            let id = self.memory.id.clone();
            Arc::make_mut(&mut self.facts).fill(r, &id)?;
        }
        Ok(())
    }

    /// Adds a node to the graph; returns its number.
    pub fn push_entity(&mut self, mut e: Entity) -> u64 {
        e.n = self.memory.next_entity;
        self.memory.next_entity += 1;
        let n = e.n;
        self.dirty_entities.insert(n);
        Arc::make_mut(&mut self.entities).push(e);
        n
    }

    pub fn entity_mut(&mut self, n: u64) -> &mut Entity {
        self.dirty_entities.insert(n);
        &mut Arc::make_mut(&mut self.entities)[n as usize]
    }

    /// Records that `name` (normalised) resolves to `entity`.
    pub fn put_alias(&mut self, name: String, entity: u64) {
        self.new_aliases.push((name, entity));
    }

    /// Records fact `fact` as an edge between `a` and `b` (stored from both ends).
    pub fn put_edge(&mut self, a: u64, fact: u64, b: u64) {
        self.new_edges.push((a, fact, b));
        if a != b {
            self.new_edges.push((b, fact, a));
        }
    }

    pub fn put_vector(&mut self, kind: VectorKind, n: u64, v: VectorRecord) {
        self.new_vectors.push((kind, n, v));
    }

    /// Fact number `n` (facts are numbered in order and never removed), if it is resident:
    /// every fact the facts block can show is; others only once read ([`State::load_facts`]),
    /// or read alone from the store ([`Facts::read`]).
    pub fn fact(&self, n: u64) -> Option<&Fact> {
        self.facts.get(n)
    }

    /// Fact `n`: the state's when resident, else as the store holds it (a fact of a forgotten
    /// episode, most of what recall finds, is read only when found).
    pub fn fact_or_read(&self, r: &Reader<'_>, n: u64) -> Result<Option<Cow<'_, Fact>>, StoreError> {
        if let Some(f) = self.fact(n) {
            return Ok(Some(Cow::Borrowed(f)));
        }
        if n >= self.facts.len() || self.facts.is_whole() {
            return Ok(None);
        }
        Ok(Facts::read(r, &self.memory.id, n)?.map(Cow::Owned))
    }

    /// The seq after the last episode: history from here on is not cut yet.
    pub fn uncut_from(&self) -> u64 {
        self.episodes.last().map(|e| e.last_seq + 1).unwrap_or(0)
    }

    pub fn episode_of(&self, seq: u64) -> Option<&Episode> {
        let i = self.episodes.partition_point(|e| e.last_seq < seq);
        self.episodes.get(i).filter(|e| e.first_seq <= seq)
    }

    pub fn episode_mut(&mut self, n: u64) -> &mut Episode {
        self.dirty_episodes.insert(n);
        &mut self.episodes[n as usize]
    }

    /// Records a unit's boundary scores (replacing an incomplete judgment of the same unit).
    pub fn set_unit_score(&mut self, u: UnitScore) {
        self.dirty_units.insert(u.start_seq);
        self.unit_scores.insert(u.start_seq, u);
    }

    /// Forgets (in memory only) the scores of units that are now inside episodes.
    pub fn prune_unit_scores(&mut self) {
        let from = self.uncut_from();
        let dirty = &self.dirty_units;
        self.unit_scores.retain(|seq, _| *seq >= from || dirty.contains(seq));
    }

    /// Adds a new episode with its encoding trace (score 1, at the time of its messages).
    pub fn push_episode(&mut self, mut e: Episode) {
        e.n = self.memory.next_episode;
        self.memory.next_episode += 1;
        let (n, at) = (e.n, e.at);
        self.dirty_episodes.insert(n);
        self.episodes.push(e);
        self.push_trace(n, TraceKind::Encoding, at, 1.0, true, None);
    }

    pub fn push_trace(&mut self, episode: u64, kind: TraceKind, at: f64, score: f64, counted: bool, fact: Option<u64>) {
        let count = self.trace_counts.entry(episode).or_insert(0);
        let n = *count;
        *count += 1;
        Arc::make_mut(&mut self.traces).push(Trace {
            episode,
            n,
            kind,
            at,
            score,
            counted,
            fact,
        });
        self.new_traces += 1;
    }

    pub fn push_fact(&mut self, mut f: Fact) -> u64 {
        f.n = self.memory.next_fact;
        self.memory.next_fact += 1;
        let n = f.n;
        Arc::make_mut(&mut self.facts).push(f);
        self.new_facts += 1;
        n
    }

    pub fn episodes_in(&self, state: EpisodeState) -> impl Iterator<Item = &Episode> {
        self.episodes.iter().filter(move |e| e.state == state)
    }

    pub fn any_leaving(&self) -> bool {
        self.episodes.iter().any(|e| e.state == EpisodeState::Leaving)
    }
}

/// Unix seconds by the wall clock (job ages are real time, whatever `now` the ops inject).
/// The first seq an op on the memory reads by default: the earliest of what can be in view
/// (a live or leaving episode, history not cut yet) and the recent turns the budget measures.
/// Sealed and forgotten episodes never return to view, so what lies before is only read when
/// asked for.
fn horizon(episodes: &[Episode], turn: u64) -> u64 {
    let uncut = episodes.last().map_or(0, |e| e.last_seq + 1);
    let recent_turns = turn.saturating_sub(super::budget::TURNS_FOR_TYPICAL as u64 + 1);
    episodes
        .iter()
        .find(|e| matches!(e.state, EpisodeState::Live | EpisodeState::Leaving) || e.last_turn >= recent_turns)
        .map_or(uncut, |e| e.first_seq.min(uncut))
}

pub fn wall_clock() -> f64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.as_secs_f64())
        .unwrap_or(0.0)
}

/// Passage `n` of `memory` with its text (see [`Passage`] for why the store keeps it without).
pub fn read_passage(r: &impl Read, memory: &str, n: u64) -> Result<Option<Passage>, StoreError> {
    let Some(mut p) = r.get::<Passage>(Table::Passages, &keys::seq(memory, n))? else {
        return Ok(None);
    };
    passage_text(r, memory, &mut p)?;
    Ok(Some(p))
}

/// Puts back the text of a passage the store keeps without it, from its messages.
pub fn passage_text(r: &impl Read, memory: &str, p: &mut Passage) -> Result<(), StoreError> {
    if !p.text.is_empty() {
        return Ok(());
    }
    let mut messages = Vec::with_capacity((p.last_seq + 1).saturating_sub(p.first_seq) as usize);
    for seq in (p.first_seq..=p.last_seq).filter(|s| !p.skipped.contains(s)) {
        if let Some(m) = r.get::<StoredMessage>(Table::Messages, &keys::seq(memory, seq))? {
            messages.push(m);
        }
    }
    p.text = super::passages::excerpt(messages.iter());
    Ok(())
}

/// A row of table `mentions`: the first and last day (days since 1970) a passage speaks of
/// other than its own, and the passage.
pub type Mention = (i64, i64, u64);

/// The days a passage's text speaks of other than its own: the time search finds "last month"
/// said in April for a question about March.
pub fn mentions(p: &Passage) -> impl Iterator<Item = Mention> + '_ {
    super::when::mentioned(&p.text, p.at)
        .into_iter()
        .map(|(first, last)| (first, last, p.n))
}

/// Writes a passage's rows of table `mentions` (with the passage).
pub fn write_mentions(w: &mut Writer<'_>, memory: &str, p: &Passage) -> Result<(), StoreError> {
    mentions(p).try_for_each(|m| write_mention(w, memory, m))
}

fn write_mention(w: &mut Writer<'_>, memory: &str, (first, last, n): Mention) -> Result<(), StoreError> {
    w.put(Table::Mentions, &keys::seq2(memory, first as u64, n), &(last as u64))
}

/// A passage as the store keeps it: without its text.
pub fn stored_passage(p: &Passage) -> Passage {
    Passage {
        text: String::new(),
        skipped: p.skipped.clone(),
        ..*p
    }
}

/// The stored history messages with seqs in `first..=last`, read from the store.
pub fn history_in(r: &Reader<'_>, memory: &str, first: u64, last: u64) -> Result<Vec<StoredMessage>, StoreError> {
    let mut out = Vec::new();
    r.visit(
        Table::Messages,
        &keys::memory_prefix(memory),
        &keys::seq(memory, first),
        |_, m: StoredMessage| {
            if m.seq > last {
                return Ok(false);
            }
            if m.in_history() {
                out.push(m);
            }
            Ok(true)
        },
    )?;
    Ok(out)
}

/// The stored messages of the turn user message `seq` opens, read from the store alone (a
/// late distill judges its block against that turn, without loading everything since).
pub fn turn_messages(r: &Reader<'_>, memory: &str, seq: u64) -> Result<Vec<StoredMessage>, StoreError> {
    let mut out: Vec<StoredMessage> = Vec::new();
    r.visit(
        Table::Messages,
        &keys::memory_prefix(memory),
        &keys::seq(memory, seq),
        |_, m: StoredMessage| {
            if out.first().is_some_and(|first| m.turn != first.turn) {
                return Ok(false);
            }
            out.push(m);
            Ok(true)
        },
    )?;
    Ok(out)
}

/// The oldest queued job of a memory that is not parked.
pub fn oldest_job(r: &Reader<'_>, memory: &str) -> Result<Option<Job>, StoreError> {
    let prefix = keys::memory_prefix(memory);
    let mut found = None;
    r.visit(Table::Jobs, &prefix, &prefix, |_, job: Job| {
        if job.parked() {
            return Ok(true);
        }
        found = Some(job);
        Ok(false)
    })?;
    Ok(found)
}

/// One memory's lane as `stats` and `info` show it.
#[derive(Debug, Default, Clone, serde::Serialize)]
pub struct LaneDepth {
    pub memory: String,
    /// Jobs waiting to run (parked ones not counted).
    pub depth: u64,
    /// Wall-clock seconds since the oldest waiting job was queued.
    pub oldest_age_s: f64,
    /// Jobs that failed repeatedly, kept with their last error.
    pub parked: Vec<ParkedJob>,
}

impl LaneDepth {
    /// Reads a job at the head of the lane, oldest first: a parked one is listed and the head
    /// goes on (true); the first runnable one gives the oldest age and ends it (false).
    fn read_head(&mut self, job: Job, now: f64) -> bool {
        if job.parked() {
            self.parked.push(ParkedJob {
                n: job.n,
                kind: job.job.name().to_owned(),
                attempts: job.attempts,
                error: job.error,
            });
            return true;
        }
        if job.queued_at > 0.0 {
            self.oldest_age_s = (now - job.queued_at).max(0.0);
        }
        false
    }
}

#[derive(Debug, Clone, serde::Serialize)]
pub struct ParkedJob {
    pub n: u64,
    pub kind: String,
    pub attempts: u32,
    pub error: Option<String>,
}

/// Every memory's lane with jobs in it (`stats`). A lane runs its oldest runnable job until it
/// is done or parked, so its parked jobs come first: each lane's jobs are decoded up to its
/// first runnable one (the oldest age) and only counted after it, which keeps this cheap with
/// tens of thousands queued.
pub fn lane_depths(r: &Reader<'_>) -> Result<Vec<LaneDepth>, StoreError> {
    let now = wall_clock();
    let mut lanes: Vec<LaneDepth> = Vec::new();
    let mut at_head = false;
    r.visit_keys(Table::Jobs, b"", |key| {
        let id = key.split(|b| *b == 0).next().unwrap_or_default();
        if lanes.last().is_none_or(|l| l.memory.as_bytes() != id) {
            lanes.push(LaneDepth {
                memory: String::from_utf8_lossy(id).into_owned(),
                ..LaneDepth::default()
            });
            at_head = true;
        }
        let lane = lanes.last_mut().expect("pushed above");
        if at_head {
            if let Some(job) = r.get::<Job>(Table::Jobs, key)? {
                if lane.read_head(job, now) {
                    return Ok(true);
                }
            }
            at_head = false;
        }
        lane.depth += 1;
        Ok(true)
    })?;
    Ok(lanes)
}

/// One memory's lane, for decorate's `info`: its parked jobs and oldest age read from the head of
/// its queue, its depth from the record's count (no walk over a deep backlog on every request);
/// `None` when the lane is empty.
pub fn lane_of(r: &Reader<'_>, record: &MemoryRecord) -> Result<Option<LaneDepth>, StoreError> {
    let queued = record.queued_jobs.unwrap_or(0);
    if queued == 0 {
        return Ok(None);
    }
    let prefix = keys::memory_prefix(&record.id);
    let now = wall_clock();
    let mut lane = LaneDepth {
        memory: record.id.clone(),
        ..LaneDepth::default()
    };
    r.visit(
        Table::Jobs,
        &prefix,
        &prefix,
        |_, job: Job| Ok(lane.read_head(job, now)),
    )?;
    lane.depth = queued.saturating_sub(lane.parked.len() as u64);
    Ok(Some(lane))
}

/// Every recall block of a memory, oldest first (a loaded state holds those from its horizon
/// on): for export and what reads a whole conversation's blocks.
pub fn all_recalls(r: &Reader<'_>, memory: &str) -> Result<Vec<RecallBlock>, StoreError> {
    let mut blocks = BTreeMap::new();
    for table in [Table::Recall, Table::FreshRecall] {
        for b in r.scan::<RecallBlock>(table, &keys::memory_prefix(memory))? {
            blocks.insert(b.seq, b);
        }
    }
    let mut blocks: Vec<RecallBlock> = blocks.into_values().collect();
    for b in &mut blocks {
        whole_recall(r, memory, b)?;
    }
    Ok(blocks)
}

/// Every version of a memory's instructions, oldest first: those in table `instructions`, then
/// those its record holds until its next save.
pub fn all_instructions(r: &Reader<'_>, record: &MemoryRecord) -> Result<Vec<Instructions>, StoreError> {
    let mut all: Vec<Instructions> = r.scan(Table::Instructions, &keys::memory_prefix(&record.id))?;
    all.extend(record.instructions.iter().cloned());
    Ok(all)
}

/// The stored recall block before user message `seq`, read alone.
pub fn recall_block(r: &Reader<'_>, memory: &str, seq: u64) -> Result<Option<RecallBlock>, StoreError> {
    let key = keys::seq(memory, seq);
    let mut block: Option<RecallBlock> = match r.get(Table::FreshRecall, &key)? {
        Some(b) => Some(b),
        None => r.get(Table::Recall, &key)?,
    };
    if let Some(b) = &mut block {
        whole_recall(r, memory, b)?;
    }
    Ok(block)
}

/// Stores a recall block. Its excerpts are most of a block not distilled yet, and each is a
/// passage's text, which never changes: when the text ends with exactly the excerpts of the
/// passages it shows, only their numbers are stored with the rest ([`whole_recall`] puts the
/// text back together); otherwise the text is stored whole. A block not distilled yet is in
/// table `fresh_recall`, a distilled one (facts only, a fraction of the size) in `recall`.
pub fn write_recall(w: &mut Writer<'_>, memory: &str, b: &RecallBlock) -> Result<(), StoreError> {
    write_recall_at(w, memory, b, None)
}

/// [`write_recall`], told where the excerpts begin in the text when the caller knows (recall,
/// which rendered them from the passages it had read); else they are found by reading the
/// passages back and rendering their excerpts again.
fn write_recall_at(
    w: &mut Writer<'_>,
    memory: &str,
    b: &RecallBlock,
    excerpts_at: Option<usize>,
) -> Result<(), StoreError> {
    let key = keys::seq(memory, b.seq);
    if b.distilled {
        w.delete(Table::FreshRecall, &key)?;
        return w.put(Table::Recall, &key, b);
    }
    // Where a store written before `fresh_recall` kept it.
    w.delete(Table::Recall, &key)?;
    // In conversation order, as the excerpts are shown.
    let mut shown: Vec<(u64, u64)> = b
        .items
        .iter()
        .filter(|i| i.kind == "passage")
        .map(|i| (i.seqs[0], i.n))
        .collect();
    shown.sort_unstable();
    if shown.is_empty() || !b.excerpts.is_empty() {
        return w.put(Table::FreshRecall, &key, b);
    }
    let rest = match excerpts_at.filter(|&at| b.text.is_char_boundary(at)) {
        Some(at) => &b.text[..at],
        None => {
            let mut passages: Vec<Passage> = Vec::with_capacity(shown.len());
            for &(_, n) in &shown {
                match read_passage(w, memory, n)? {
                    Some(p) => passages.push(p),
                    None => return w.put(Table::FreshRecall, &key, b),
                }
            }
            let refs: Vec<&Passage> = passages.iter().collect();
            match b.text.strip_suffix(&super::recall::excerpts_section(&refs)) {
                Some(rest) => rest,
                None => return w.put(Table::FreshRecall, &key, b),
            }
        }
    };
    let stored = RecallBlock {
        seq: b.seq,
        turn: b.turn,
        at: b.at,
        text: rest.to_owned(),
        tokens: b.tokens,
        items: b.items.clone(),
        distilled: false,
        across: b.across.clone(),
        excerpts: shown.into_iter().map(|(_, n)| n).collect(),
    };
    w.put(Table::FreshRecall, &key, &stored)
}

/// Puts back the excerpts a stored block left out (see [`write_recall`]).
fn whole_recall(r: &impl Read, memory: &str, b: &mut RecallBlock) -> Result<(), StoreError> {
    if b.excerpts.is_empty() {
        return Ok(());
    }
    let mut passages: Vec<Passage> = Vec::with_capacity(b.excerpts.len());
    for n in std::mem::take(&mut b.excerpts) {
        match read_passage(r, memory, n)? {
            Some(p) => passages.push(p),
            // Passages leave only with their memory; a block without one is shown without it.
            None => tracing::warn!(memory, passage = n, "a recall block's passage is missing"),
        }
    }
    let refs: Vec<&Passage> = passages.iter().collect();
    b.text.push_str(&super::recall::excerpts_section(&refs));
    Ok(())
}

/// Memories that have runnable jobs, and how many such jobs in all.
pub fn pending_jobs(r: &Reader<'_>) -> Result<(Vec<String>, u64), StoreError> {
    let lanes = lane_depths(r)?;
    let count = lanes.iter().map(|l| l.depth).sum();
    Ok((
        lanes.into_iter().filter(|l| l.depth > 0).map(|l| l.memory).collect(),
        count,
    ))
}

/// Records a failed run of job `n`: parked once it failed [`super::records::PARK_AFTER`] times.
pub fn fail_job(w: &mut Writer<'_>, memory: &str, n: u64, error: &str) -> Result<(), StoreError> {
    let key = keys::seq(memory, n);
    if let Some(mut job) = w.get::<Job>(Table::Jobs, &key)? {
        job.attempts += 1;
        job.error = Some(error.to_owned());
        w.put(Table::Jobs, &key, &job)?;
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::engine::records::{RecallItem, Source};
    use crate::formats::{Format, Message, Role};
    use crate::store::{Store, StoreOptions};

    /// 60 turns (a user message and a reply each); turns 1–40 in sealed episodes, 41–50 in
    /// live ones, 51–60 not cut yet.
    fn sixty_turns(st: &mut State) {
        for turn in 1..=60u64 {
            for role in [Role::User, Role::Assistant] {
                let m = StoredMessage::new(
                    &st.memory,
                    Message::new(Format::ChatCompletions, role, format!("turn {turn}")),
                    turn as f64,
                    Source::Request,
                );
                if role == Role::User {
                    st.memory.turn = m.turn;
                }
                st.push_message(m);
            }
        }
        for k in 0..25u64 {
            st.push_episode(Episode {
                acknowledged: k < 20,
                ..Episode::spanning(
                    (4 * k, 4 * k + 3),
                    (2 * k + 1, 2 * k + 2),
                    10,
                    if k < 20 {
                        EpisodeState::Sealed
                    } else {
                        EpisodeState::Live
                    },
                )
            });
        }
    }

    /// A new store holding nothing yet, and memory "m" with [`sixty_turns`] not saved.
    fn sixty_turns_unsaved() -> (tempfile::TempDir, Store, State) {
        let dir = tempfile::tempdir().unwrap();
        let store = Store::open(dir.path(), &StoreOptions::default()).unwrap();
        let mut st = store.read(|r| State::load(r, "m", 0.0)).unwrap();
        sixty_turns(&mut st);
        (dir, store, st)
    }

    #[test]
    fn a_passage_is_stored_without_its_text_and_read_back_with_it_from_its_messages() {
        let (_dir, store, mut st) = sixty_turns_unsaved();
        // A note call inside the stretch and a message superseded before the cut: neither is
        // in the passage, and neither may come back into it.
        st.message_mut(2).note = true;
        st.message_mut(5).superseded_at = Some(1.0);
        let history: Vec<&StoredMessage> = st.messages_in(0, 7).filter(|m| m.in_history()).collect();
        let passages = super::super::passages::passages_of(0, &history, 0, 1_000);
        assert_eq!(passages.len(), 1);
        let cut = passages[0].clone();
        assert_eq!(cut.skipped, vec![2, 5]);
        assert_eq!(cut.text.lines().count(), 6);
        st.push_passages(passages);
        store.write(|w| st.save(w)).unwrap();
        st.mark_saved();
        let kept: Passage = store
            .read(|r| r.get(Table::Passages, &keys::seq("m", 0)))
            .unwrap()
            .unwrap();
        assert!(kept.text.is_empty(), "the text lives in the messages only");
        // Superseded later: a passage shows what was said when it was cut.
        st.message_mut(6).superseded_at = Some(2.0);
        store.write(|w| st.save(w)).unwrap();
        let read = store.read(|r| read_passage(r, "m", 0)).unwrap().unwrap();
        assert_eq!(read, cut);
        // One stored with its text (before this) is read as it was.
        let old = Passage {
            n: 1,
            text: "user: as stored".into(),
            ..cut.clone()
        };
        store
            .write(|w| w.put(Table::Passages, &keys::seq("m", 1), &old))
            .unwrap();
        assert_eq!(store.read(|r| read_passage(r, "m", 1)).unwrap().unwrap(), old);
    }

    #[test]
    fn distilled_blocks_leave_no_pages_of_the_blocks_they_replace_mostly_empty() {
        let dir = tempfile::tempdir().unwrap();
        let store = Store::open(dir.path(), &StoreOptions::default()).unwrap();
        // Blocks as recall stores them (long, a few to a page), then as distill rewrites them.
        let block = |seq: u64, distilled: bool| RecallBlock {
            seq,
            turn: seq,
            at: seq as f64,
            text: if distilled {
                "Recalled: the parcel left on Monday.".into()
            } else {
                (0..40)
                    .map(|i| format!("- fact {i} of block {seq} ({})\n", seq * 31 + i))
                    .collect()
            },
            tokens: 10,
            items: Vec::new(),
            distilled,
            across: None,
            excerpts: Vec::new(),
        };
        for distilled in [false, true] {
            store
                .write(|w| (0..400).try_for_each(|seq| write_recall(w, "m", &block(seq, distilled))))
                .unwrap();
        }
        let size = |table| store.read(|r| r.table_size(table)).unwrap();
        let ((entries, bytes), (fresh, fresh_bytes)) = (size(Table::Recall), size(Table::FreshRecall));
        assert_eq!((entries, fresh), (400, 0));
        // 400 small blocks fit in a few pages; rewritten in place they kept the long ones' pages
        // (53 of them).
        assert!(
            bytes + fresh_bytes <= 16 * 4096,
            "{bytes} + {fresh_bytes} bytes of pages for 400 blocks of about 80 bytes"
        );
        let read = store.read(|r| recall_block(r, "m", 7)).unwrap();
        assert_eq!(read, Some(block(7, true)));

        // A block a store kept in `recall` before it was distilled (before `fresh_recall`) is
        // read there, and rewritten it moves.
        store
            .write(|w| w.put(Table::Recall, &keys::seq("m", 500), &block(500, false)))
            .unwrap();
        let all = store.read(|r| all_recalls(r, "m")).unwrap();
        assert_eq!((all.len(), all.last()), (401, Some(&block(500, false))));
        store.write(|w| write_recall(w, "m", &block(500, false))).unwrap();
        assert_eq!((size(Table::Recall).0, size(Table::FreshRecall).0), (400, 1));
        assert_eq!(store.read(|r| all_recalls(r, "m")).unwrap(), all);
    }

    #[test]
    fn a_recall_block_is_stored_without_its_excerpts_and_read_back_the_same() {
        let (_dir, store, mut st) = sixty_turns_unsaved();
        let passage = |n: u64, first_seq: u64, text: &str| Passage {
            n,
            episode: first_seq / 4,
            first_seq,
            last_seq: first_seq + 1,
            first_turn: first_seq / 2 + 1,
            last_turn: first_seq / 2 + 1,
            at: 86_400.0 * (n + 1) as f64,
            tokens: 40,
            text: text.to_owned(),
            skipped: Vec::new(),
            text_tokens: 0,
        };
        let (p0, p1) = (
            passage(0, 0, "user: turn 1\nassistant: turn 1"),
            passage(1, 4, "user: turn 3\nassistant: turn 3"),
        );
        st.push_passages(vec![p0.clone(), p1.clone()]);
        let item = |p: &Passage| RecallItem {
            kind: "passage".into(),
            n: p.n,
            score: 0.1,
            searches: vec!["words:message".into()],
            cosine: None,
            turns: [p.first_turn, p.last_turn],
            seqs: [p.first_seq, p.last_seq],
        };
        let facts =
            "Recalled from earlier in this conversation:\nAbout Dana:\n- Dana owns checkout. (turn 2, 1970-01-01)";
        // Found best-first, shown in conversation order.
        let shown = format!("{facts}{}", crate::engine::recall::excerpts_section(&[&p1, &p0]));
        let block = |seq: u64, text: &str| RecallBlock {
            seq,
            turn: 60,
            at: 60.0,
            text: text.to_owned(),
            tokens: 90,
            items: vec![item(&p1), item(&p0)],
            distilled: false,
            across: None,
            excerpts: Vec::new(),
        };
        // The last user messages: 116 (turn 59) and 118 (turn 60), both loaded.
        st.put_recall(block(116, &shown));
        // A text that does not end with its passages' excerpts is stored whole.
        let edited = shown.replace("turn 3", "turn three");
        st.put_recall(block(118, &edited));
        store.write(|w| st.save(w)).unwrap();

        let raw = |seq: u64| -> RecallBlock {
            store
                .read(|r| r.get(Table::FreshRecall, &keys::seq("m", seq)))
                .unwrap()
                .unwrap()
        };
        assert_eq!((raw(116).text.as_str(), raw(116).excerpts), (facts, vec![0, 1]));
        assert_eq!((raw(118).text, raw(118).excerpts), (edited.clone(), vec![]));
        // Every way a block is read gives it back as it was shown.
        let loaded = store.read(|r| State::load(r, "m", 0.0)).unwrap();
        assert_eq!(loaded.recalls[&116], block(116, &shown));
        assert_eq!(loaded.recalls[&118], block(118, &edited));
        let alone = store.read(|r| recall_block(r, "m", 116)).unwrap().unwrap();
        assert_eq!(alone, block(116, &shown));
        let all = store.read(|r| all_recalls(r, "m")).unwrap();
        assert_eq!(all, vec![block(116, &shown), block(118, &edited)]);

        // A block recall rendered, put with where its excerpts begin, is stored the same without
        // reading its passages back.
        let stored = raw(116);
        st.mark_saved();
        st.put_recalled(block(116, &shown), Some(facts.len()));
        store.write(|w| st.save(w)).unwrap();
        assert_eq!(raw(116), stored);
    }

    #[test]
    fn the_lane_count_on_the_record_follows_queued_and_finished_jobs_and_is_counted_when_missing() {
        let dir = tempfile::tempdir().unwrap();
        let store = Store::open(dir.path(), &StoreOptions::default()).unwrap();
        let mut st = store.read(|r| State::load(r, "m", 0.0)).unwrap();
        for f in 0..5 {
            st.push_job(JobKind::Graph { facts: vec![f] }, 1.0);
        }
        let save = |st: &mut State| {
            store.write(|w| st.save(w)).unwrap();
            st.mark_saved();
        };
        save(&mut st);
        for n in [0, 2] {
            st.finish_job(n, &JobKind::Graph { facts: vec![n] });
        }
        save(&mut st);
        for _ in 0..crate::engine::records::PARK_AFTER {
            store.write(|w| fail_job(w, "m", 1, "judge down")).unwrap();
        }
        let lane = store.read(|r| lane_of(r, &st.memory)).unwrap().unwrap();
        assert_eq!(
            (lane.depth, lane.parked.len()),
            (2, 1),
            "jobs 3 and 4 wait, job 1 is parked"
        );
        assert_eq!(lane.parked[0].n, 1);
        let all = store.read(lane_depths).unwrap();
        assert_eq!(
            (all[0].depth, all[0].parked.len()),
            (2, 1),
            "the walk over the table agrees"
        );

        // A record written before the count was kept: counted from the table at load.
        st.memory.queued_jobs = None;
        save(&mut st);
        let mut st = store.read(|r| State::load(r, "m", 0.0)).unwrap();
        assert_eq!(st.memory.queued_jobs, Some(3));
        for n in [1, 3, 4] {
            st.finish_job(n, &JobKind::Graph { facts: vec![n] });
        }
        save(&mut st);
        assert!(
            store.read(|r| lane_of(r, &st.memory)).unwrap().is_none(),
            "an empty lane"
        );
        assert!(store.read(lane_depths).unwrap().is_empty());
    }

    #[test]
    fn an_older_turn_is_read_alone_and_an_older_message_resized_without_loading_what_follows() {
        let (_dir, store, st) = sixty_turns_unsaved();
        store.write(|w| st.save(w)).unwrap();
        let mut st = store.read(|r| State::load(r, "m", 0.0)).unwrap();
        let loaded = st.loaded_from();
        assert!(loaded > 20, "{loaded}");
        // Turn 6 is seqs 10 and 11 (a user message and its reply), long before the loaded ones.
        let turn = store.read(|r| turn_messages(r, "m", 10)).unwrap();
        assert_eq!(turn.iter().map(|m| m.seq).collect::<Vec<_>>(), vec![10, 11]);
        assert!(turn.iter().all(|m| m.turn == 6));

        let before = turn[0].tokens;
        store.read(|r| st.resize_older(r, 10, 3, 1)).unwrap();
        assert_eq!(st.loaded_from(), loaded, "nothing older was loaded");
        store.write(|w| st.save(w)).unwrap();
        st.mark_saved();
        let m: StoredMessage = store
            .read(|r| r.get(Table::Messages, &keys::seq("m", 10)))
            .unwrap()
            .unwrap();
        assert_eq!(m.tokens, before - 2, "the block's 3 tokens became 1");
        // Saved once: a later save writes it no more.
        assert!(st.older_changed.is_empty());
    }

    #[test]
    fn an_older_episode_is_read_alone_and_across_the_loaded_edge_joined_in_order() {
        let (_dir, store, mut whole) = sixty_turns_unsaved();
        // A superseded message is no part of history, loaded or not.
        whole.messages[5].superseded_at = Some(1.0);
        store.write(|w| whole.save(w)).unwrap();
        let st = store.read(|r| State::load(r, "m", 0.0)).unwrap();
        let loaded = st.loaded_from();
        assert!(loaded > 20, "{loaded}");
        let seqs = |first, last| -> Vec<u64> {
            let ms = store.read(|r| st.history_between(r, first, last)).unwrap();
            ms.iter().map(|m| m.seq).collect()
        };
        let whole_seqs = |first, last| -> Vec<u64> {
            whole
                .messages_in(first, last)
                .filter(|m| m.in_history())
                .map(|m| m.seq)
                .collect()
        };
        assert_eq!(seqs(4, 7), vec![4, 6, 7], "an old episode, seq 5 superseded");
        assert_eq!(seqs(loaded - 3, loaded + 2), whole_seqs(loaded - 3, loaded + 2));
        assert_eq!(seqs(0, 119), whole_seqs(0, 119));
        assert_eq!(st.loaded_from(), loaded, "nothing was loaded into the state");
    }

    #[test]
    fn a_loaded_state_holds_what_can_be_in_view_and_the_recent_turns_and_reads_the_rest_on_demand() {
        let (_dir, store, mut st) = sixty_turns_unsaved();
        // A recall block before every user message.
        let users: Vec<(u64, u64)> = st
            .messages
            .iter()
            .filter(|m| m.message.role == Role::User)
            .map(|m| (m.seq, m.turn))
            .collect();
        for &(seq, turn) in &users {
            st.put_recall(RecallBlock {
                seq,
                turn,
                at: 0.0,
                text: format!("block {seq}"),
                tokens: 3,
                items: Vec::new(),
                distilled: true,
                across: None,
                excerpts: Vec::new(),
            });
        }
        store.write(|w| st.save(w)).unwrap();

        let mut st = store.read(|r| State::load(r, "m", 0.0)).unwrap();
        // The live episodes start at turn 41 (seq 80); the 21 turns the budget measures reach
        // back into the sealed episode of turns 39–40 (seq 76).
        assert_eq!(st.messages.first().map(|m| m.seq), Some(76));
        assert_eq!(st.messages.len(), 120 - 76);
        assert!(!st.whole());
        // The recall blocks of those messages only.
        assert_eq!(st.recalls.keys().next(), Some(&76));
        assert_eq!(st.recalls.len(), users.iter().filter(|(s, _)| *s >= 76).count());

        store.read(|r| st.load_messages_from(r, 10)).unwrap();
        assert_eq!(st.messages.len(), 110);
        assert!(st.messages.windows(2).all(|w| w[0].seq + 1 == w[1].seq));
        // Older blocks stay in the store unless one is asked for (a late distill).
        assert_eq!(st.recalls.keys().next(), Some(&76));
        store.read(|r| st.load_recall(r, 10)).unwrap();
        assert_eq!(st.recalls[&10].text, "block 10");
        // Cached again, it keeps only what a load would read.
        st.trim();
        assert_eq!(st.messages.first().map(|m| m.seq), Some(76));
        assert_eq!(st.recalls.keys().next(), Some(&76));

        // A state that needed everything (a client sending note calls back) keeps it.
        store.read(|r| st.load_whole(r)).unwrap();
        st.keep_whole();
        st.trim();
        assert_eq!(st.messages.len(), 120);
        assert!(st.whole());
    }

    #[test]
    fn a_history_resent_from_its_first_message_lines_up_without_reading_what_is_not_loaded() {
        let (_dir, store, st) = sixty_turns_unsaved();
        store.write(|w| st.save(w)).unwrap();
        let all: Vec<u64> = st.history().map(|m| m.fingerprint).collect();

        let st = store.read(|r| State::load(r, "m", 0.0)).unwrap();
        assert!(!st.whole());
        assert_eq!(st.resent_through(&all), Some(120));
        let mut more = all.clone();
        more.extend([7, 8]);
        assert_eq!(
            st.resent_through(&more),
            Some(120),
            "new messages follow the stored ones"
        );
        let mut edited_early = all.clone();
        edited_early[5] ^= 1;
        assert_eq!(st.resent_through(&edited_early), None, "an edit before what is loaded");
        let mut edited_late = all.clone();
        edited_late[100] ^= 1;
        assert_eq!(st.resent_through(&edited_late), None, "an edit in what is loaded");
        assert_eq!(st.resent_through(&all[..50]), None, "shorter than the stored history");
    }

    #[test]
    fn messages_stored_before_chains_get_them_when_the_whole_history_is_read() {
        let (_dir, store, mut st) = sixty_turns_unsaved();
        for m in &mut st.messages {
            m.chain = None;
        }
        store.write(|w| st.save(w)).unwrap();
        let all: Vec<u64> = st.history().map(|m| m.fingerprint).collect();

        let mut st = store.read(|r| State::load(r, "m", 0.0)).unwrap();
        assert_eq!(st.resent_through(&all), None, "no chain to check with");
        store.read(|r| st.load_whole(r)).unwrap();
        store.write(|w| st.save(w)).unwrap();
        let st = store.read(|r| State::load(r, "m", 0.0)).unwrap();
        assert_eq!(st.resent_through(&all), Some(120));
    }

    #[test]
    fn trimming_never_drops_a_message_not_saved_yet() {
        let (_dir, store, mut st) = sixty_turns_unsaved();
        st.trim();
        assert_eq!(st.messages.len(), 120);
        store.write(|w| st.save(w)).unwrap();
        st.mark_saved();
        st.trim();
        assert_eq!(st.messages.len(), 120 - 76);
    }

    /// What loading costs at 100k stored messages (not a test; in release):
    /// `cargo test --release -p recalld --lib load_at_scale -- --ignored --nocapture`
    #[test]
    #[ignore]
    fn load_at_scale() {
        let dir = tempfile::tempdir().unwrap();
        let store = Store::open(dir.path(), &StoreOptions::default()).unwrap();
        let mut st = store.read(|r| State::load(r, "m", 0.0)).unwrap();
        let n = 100_000u64;
        for i in 0..n {
            let role = if i % 2 == 0 { Role::User } else { Role::Assistant };
            let text = format!(
                "message {i}: {}",
                "the customer asked about the refund of booking ".repeat(8)
            );
            let m = StoredMessage::new(
                &st.memory,
                Message::new(Format::ChatCompletions, role, &text),
                i as f64,
                Source::Request,
            );
            if role == Role::User {
                st.memory.turn = m.turn;
                // A recall block before each user message, as undistilled blocks are: a few
                // facts and an excerpt (about 1.5 KB).
                st.put_recall(RecallBlock {
                    seq: m.seq,
                    turn: m.turn,
                    at: i as f64,
                    text: format!("Recalled from earlier turns {i}: {}", text.repeat(3)),
                    tokens: 400,
                    items: Vec::new(),
                    distilled: false,
                    across: None,
                    excerpts: Vec::new(),
                });
            }
            st.push_message(m);
            // Episodes of 10 messages, all sealed but the last 20.
            if i % 10 == 9 {
                let k = i / 10;
                st.push_episode(Episode {
                    at: i as f64,
                    acknowledged: true,
                    passaged: true,
                    ..Episode::spanning(
                        (i - 9, i),
                        ((i - 9) / 2 + 1, i / 2 + 1),
                        900,
                        if k + 20 < n / 10 {
                            EpisodeState::Sealed
                        } else {
                            EpisodeState::Live
                        },
                    )
                });
            }
            if i % 10_000 == 9_999 {
                store.write(|w| st.save(w)).unwrap();
                st.mark_saved();
            }
        }
        let time = |f: &dyn Fn() -> usize| {
            let mut ms: Vec<f64> = (0..5)
                .map(|_| {
                    let t = std::time::Instant::now();
                    std::hint::black_box(f());
                    t.elapsed().as_secs_f64() * 1e3
                })
                .collect();
            ms.sort_by(f64::total_cmp);
            ms[2]
        };
        let horizon = time(&|| store.read(|r| State::load(r, "m", 0.0)).unwrap().messages.len());
        let whole = time(&|| {
            store
                .read(|r| {
                    let mut st = State::load(r, "m", 0.0)?;
                    st.load_whole(r)?;
                    Ok(st)
                })
                .unwrap()
                .messages
                .len()
        });
        println!(
            "{n} messages: a load from the horizon {horizon:.1} ms, the whole history {whole:.1} ms (medians of 5)"
        );
    }
}
