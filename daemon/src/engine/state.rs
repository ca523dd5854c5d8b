//! One memory's state, loaded for one op and saved back in one transaction. Changes are
//! tracked so only what changed is written; traces are only ever appended.

use std::collections::BTreeSet;

use super::records::{Episode, EpisodeState, Fact, Job, JobKind, MemoryRecord, StoredMessage, Trace, TraceKind};
use crate::store::{keys, Reader, StoreError, Table, Writer};

#[derive(Clone)]
pub struct State {
    pub memory: MemoryRecord,
    /// Every stored message, superseded and note calls included, in seq order.
    pub messages: Vec<StoredMessage>,
    pub episodes: Vec<Episode>,
    pub facts: Vec<Fact>,
    pub traces: Vec<Trace>,
    /// Whether the memory existed before this op.
    pub existed: bool,
    dirty_messages: BTreeSet<u64>,
    dirty_episodes: BTreeSet<u64>,
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
        Ok(State {
            memory: record.unwrap_or_else(|| MemoryRecord::new(memory, now)),
            messages: r.scan(Table::Messages, &prefix)?,
            episodes: r.scan(Table::Episodes, &prefix)?,
            facts: r.scan(Table::Facts, &prefix)?,
            traces,
            existed,
            dirty_messages: BTreeSet::new(),
            dirty_episodes: BTreeSet::new(),
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
        }
        for n in &self.dirty_episodes {
            w.put(Table::Episodes, &keys::seq(id, *n), &self.episodes[*n as usize])?;
        }
        for f in &self.facts[self.facts.len() - self.new_facts..] {
            w.put(Table::Facts, &keys::seq(id, f.n), f)?;
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
        w.put(Table::Memories, &keys::memory(id), &self.memory)
    }

    /// After a successful save: nothing is pending any more, so the state can be kept and
    /// reused by the next op (it equals what the store holds).
    pub fn mark_saved(&mut self) {
        self.dirty_messages.clear();
        self.dirty_episodes.clear();
        self.new_facts = 0;
        self.new_traces = 0;
        self.new_jobs.clear();
        self.done_jobs.clear();
        self.existed = true;
    }

    /// Queues background work; it is saved with everything else.
    pub fn push_job(&mut self, job: JobKind, at: f64) {
        let n = self.memory.next_job;
        self.memory.next_job += 1;
        self.new_jobs.push(Job { n, at, job });
    }

    pub fn has_new_jobs(&self) -> bool {
        !self.new_jobs.is_empty()
    }

    /// Marks a job done: its record is removed when the state is saved.
    pub fn finish_job(&mut self, n: u64) {
        self.done_jobs.push(n);
    }

    fn message_index(&self, seq: u64) -> Option<usize> {
        self.messages.binary_search_by_key(&seq, |m| m.seq).ok()
    }

    /// Appends a message as the memory's next one.
    pub fn push_message(&mut self, mut m: StoredMessage) -> u64 {
        m.seq = self.memory.next_seq;
        self.memory.next_seq += 1;
        let seq = m.seq;
        self.dirty_messages.insert(seq);
        self.messages.push(m);
        seq
    }

    pub fn message_mut(&mut self, seq: u64) -> &mut StoredMessage {
        let i = self.message_index(seq).expect("message exists");
        self.dirty_messages.insert(seq);
        &mut self.messages[i]
    }

    /// Messages in the history (not superseded, not note calls), in order.
    pub fn history(&self) -> impl Iterator<Item = &StoredMessage> {
        self.messages.iter().filter(|m| m.in_history())
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
        self.traces.push(Trace {
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
        self.facts.push(f);
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

/// The oldest queued job of a memory.
pub fn oldest_job(r: &Reader<'_>, memory: &str) -> Result<Option<Job>, StoreError> {
    let prefix = keys::memory_prefix(memory);
    let mut found = None;
    r.visit(Table::Jobs, &prefix, &prefix, |_, job: Job| {
        found = Some(job);
        Ok(false)
    })?;
    Ok(found)
}

/// Memories that have queued jobs, and how many jobs in all.
pub fn pending_jobs(r: &Reader<'_>) -> Result<(Vec<String>, u64), StoreError> {
    let mut memories: Vec<String> = Vec::new();
    let mut count = 0;
    r.visit(Table::Jobs, b"", b"", |key, _: Job| {
        count += 1;
        let id = key.split(|b| *b == 0).next().unwrap_or_default();
        let id = String::from_utf8_lossy(id).into_owned();
        if memories.last() != Some(&id) {
            memories.push(id);
        }
        Ok(true)
    })?;
    Ok((memories, count))
}
