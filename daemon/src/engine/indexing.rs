//! Keeping a memory's search indexes current (the `Index` lane job): episodes are cut into
//! passages as soon as they exist (live), embedded without the lock and stored under it; then
//! the facts, passages and entities past the index's marks are added to the word and vector
//! indexes, which are committed before the marks move. After each `Graph` job its new fact and
//! entity vectors are added too, so the next job resolves names against an entity index that
//! holds them. LMDB stays the truth: indexes behind their memory (or missing) are brought up to
//! date or rebuilt, by the next job or by the check at start (which only reads the store).

use super::passages::passages_of;
use super::recall::Doc;
use super::records::{Fact, MemoryRecord, Passage, StoredMessage, VectorKind, VectorRecord};
use super::state::{self, State};
use super::{cut, graph, units, Engine, EngineError};
use crate::index::{IndexError, Marks};
use crate::models::CallCtx;
use crate::store::{keys, Reader, StoreError, Table};

/// Passages cut per job at most (whole episodes; more are left to the next job).
const PASSAGES_PER_JOB: usize = 256;

/// The passages of episodes not cut yet (live ones too, see
/// [`Episode::passaged`](super::records::Episode::passaged)), numbered from the memory's next
/// passage, with the text each is embedded from: a passage that is one whole tool step is
/// embedded from the text the unit-scoring job embedded when the unit closed
/// ([`cut::unit_text`]), so the embedding cache answers it (agent turns are mostly one large step
/// each); any other passage from its own text. An episode older than the loaded state is read alone from the store.
pub(super) fn passage_drafts(st: &State, r: &Reader<'_>, passage_tokens: u64) -> Result<Drafts, StoreError> {
    let mut next = st.memory.next_passage;
    let mut out = Vec::new();
    let mut texts = Vec::new();
    let mut episodes = Vec::new();
    for e in st.episodes.iter().filter(|e| !e.passaged) {
        if out.len() >= PASSAGES_PER_JOB {
            break;
        }
        let owned = st.history_between(r, e.first_seq, e.last_seq)?;
        let ms: Vec<&StoredMessage> = owned.iter().map(|m| m.as_ref()).collect();
        let ps = passages_of(e.n, &ms, next, passage_tokens);
        for p in &ps {
            // A passage is a contiguous run of the episode's messages.
            let from = ms.partition_point(|m| m.seq < p.first_seq);
            let to = ms.partition_point(|m| m.seq <= p.last_seq);
            texts.push(embedding_text(p, &ms[from..to]));
        }
        next += ps.len() as u64;
        out.extend(ps);
        episodes.push(e.n);
    }
    Ok(Drafts {
        passages: out,
        texts,
        episodes,
        backfill: !st.memory.mentions_whole,
    })
}

/// The rows of table `mentions` of every passage `memory` has stored (a memory stored before
/// that table: read once, by an `Index` job without the memory's lock, since it reads every
/// passage's messages).
pub(super) fn stored_mentions(r: &Reader<'_>, memory: &str) -> Result<Vec<state::Mention>, StoreError> {
    let prefix = keys::memory_prefix(memory);
    let mut rows = Vec::new();
    r.visit(Table::Passages, &prefix, &prefix, |_, mut p: Passage| {
        state::passage_text(r, memory, &mut p)?;
        rows.extend(state::mentions(&p));
        Ok(true)
    })?;
    Ok(rows)
}

/// The passages cut from some episodes, the texts to embed them from, and the episodes cut
/// (one whose messages are all notes or superseded has none, and is cut all the same).
pub(super) struct Drafts {
    pub passages: Vec<Passage>,
    pub texts: Vec<String>,
    pub episodes: Vec<u64>,
    /// A memory stored before table `mentions`: its stored passages' rows are to be written
    /// ([`stored_mentions`]).
    pub backfill: bool,
}

/// The text passage `p` is embedded from, given its history messages (see [`passage_drafts`]):
/// a tool step (one unit of several messages) from the text unit scoring embedded, so the
/// embedding cache answers it; a message alone as the excerpt shows it, with its speaker (from
/// the unit's text, LoCoMo's evidence availability at 4k fell from 0.844 to 0.839).
pub(super) fn embedding_text(p: &Passage, messages: &[&StoredMessage]) -> String {
    if messages.len() > 1 && units::units(messages).len() == 1 {
        cut::unit_text(messages)
    } else {
        p.text.clone()
    }
}

/// Stores the passages (and their vectors) cut from `episodes`, not cut yet, and marks those
/// episodes cut. False when the state moved since the snapshot (plan again).
pub(super) fn apply_passages(
    st: &mut State,
    passages: Vec<Passage>,
    vectors: Option<ModelVectors>,
    episodes: Vec<u64>,
) -> bool {
    if passages.first().is_some_and(|p| p.n != st.memory.next_passage) {
        return false;
    }
    if episodes
        .iter()
        .any(|&e| st.episodes.get(e as usize).is_none_or(|e| e.passaged))
    {
        return false;
    }
    if let Some((model, vs)) = vectors {
        for (p, v) in passages.iter().zip(vs) {
            st.put_vector(
                VectorKind::Passage,
                p.n,
                VectorRecord {
                    model: model.clone(),
                    v,
                },
            );
        }
    }
    for e in episodes {
        st.episode_mut(e).passaged = true;
    }
    st.push_passages(passages);
    true
}

/// Vectors made by one model: its name and a vector per text.
pub(super) type ModelVectors = (String, Vec<Vec<f32>>);

impl Engine {
    /// Embeds the passages' texts (from [`passage_drafts`]) for the index (no lock held). None
    /// without an embedder.
    pub(super) fn embed_passages(&self, memory: &str, texts: &[String]) -> Result<Option<ModelVectors>, String> {
        let Some(models) = &self.models else { return Ok(None) };
        if texts.is_empty() {
            return Ok(None);
        }
        let texts: Vec<&str> = texts.iter().map(String::as_str).collect();
        let vs = models
            .embedder
            .embed(&CallCtx::new(memory), &texts)
            .map_err(|e| e.to_string())?;
        if vs.len() != texts.len() {
            return Err("embedder gave the wrong number of vectors".into());
        }
        Ok(Some((models.embedder.id().name, vs)))
    }

    /// Adds what the store holds past the index's marks to both indexes, commits them, then
    /// moves the marks; rebuilds from nothing when the marks are missing or ahead of the store.
    /// Runs in the lane, without the memory's lock (only this lane writes the memory's indexes),
    /// under its index lock, so a memory forgotten meanwhile is not written back.
    pub(super) fn update_indexes(&self, memory: &str) -> Result<(), EngineError> {
        let Some(ix) = &self.indexes else { return Ok(()) };
        let lock = self.index_lock(memory);
        let _held = lock.lock().unwrap_or_else(|e| e.into_inner());
        let Some(record) = self
            .store
            .read(|r| r.get::<MemoryRecord>(Table::Memories, &keys::memory(memory)))?
        else {
            return Ok(());
        };
        let truth = marks_of(&record);
        let held = ix.marks(memory);
        if held == Some(truth) {
            return Ok(());
        }
        let from = match held {
            Some(m) if m.within(&truth) => m,
            _ => {
                tracing::info!(memory, "rebuilding the memory's search indexes from the store");
                ix.drop_memory(memory).map_err(index_error)?;
                Marks::default()
            }
        };
        let model = self.models.as_ref().map(|m| m.embedder.id().name);
        let vector = |r: &crate::store::Reader<'_>,
                      kind: VectorKind,
                      n: u64|
         -> Result<Option<Vec<f32>>, crate::store::StoreError> {
            let v: Option<VectorRecord> = r.get(Table::Vectors, &keys::seq2(memory, kind as u64, n))?;
            Ok(v.filter(|v| Some(&v.model) == model.as_ref()).map(|v| v.v))
        };
        let prefix = keys::memory_prefix(memory);
        let mut docs: Vec<(Doc, String, Option<Vec<f32>>)> = Vec::new();
        let mut entities: Vec<(u64, Vec<f32>)> = Vec::new();
        self.store.read(|r| {
            r.visit(Table::Facts, &prefix, &keys::seq(memory, from.facts), |_, f: Fact| {
                if f.n < truth.facts && !f.note.is_empty() {
                    let text = format!("{} ({}; {})", f.note, f.subject, f.object);
                    docs.push((Doc::Fact(f.n), text, vector(r, VectorKind::Fact, f.n)?));
                }
                Ok(true)
            })?;
            r.visit(
                Table::Passages,
                &prefix,
                &keys::seq(memory, from.passages),
                |_, mut p: Passage| {
                    if p.n < truth.passages {
                        state::passage_text(r, memory, &mut p)?;
                        docs.push((Doc::Passage(p.n), p.text, vector(r, VectorKind::Passage, p.n)?));
                    }
                    Ok(true)
                },
            )?;
            entities = graph::entity_vectors(r, memory, from.entities, model.as_deref())?;
            Ok(())
        })?;
        for (doc, text, v) in &docs {
            ix.words.add(memory, doc.key(), text).map_err(index_error)?;
            if let (Some(vix), Some(v)) = (&ix.vectors, v) {
                vix.add(memory, doc.key(), v).map_err(index_error)?;
            }
        }
        if let Some(eix) = &ix.entities {
            for (n, v) in &entities {
                eix.add(memory, *n, v).map_err(index_error)?;
            }
        }
        ix.commit(memory).map_err(index_error)?;
        ix.set_marks(memory, truth).map_err(index_error)?;
        tracing::debug!(
            memory,
            added = docs.len(),
            entities = entities.len(),
            "search indexes updated"
        );
        Ok(())
    }

    /// Saves what the indexes hold only in RAM (a vector index waits for enough changes) and
    /// writes their marks: at shutdown, once the lanes stopped. Failing that, the next start
    /// adds what they lack from the store.
    pub fn flush_indexes(&self) {
        if let Some(ix) = &self.indexes {
            if let Err(e) = ix.flush() {
                tracing::error!(error = %e, "search indexes not saved at shutdown; the next start catches them up");
            }
        }
    }

    /// After a `Graph` job: adds the vectors it stored for `facts` to the vector index (an
    /// `Index` job that ran before them indexed those facts by words only) and the entities it
    /// made to the entity index, then moves the entity mark, so the next job's names are
    /// resolved against them without a scan. Adding is idempotent.
    pub(super) fn index_graph(&self, memory: &str, facts: &[u64]) -> Result<(), EngineError> {
        let (Some(ix), Some(models)) = (&self.indexes, &self.models) else {
            return Ok(());
        };
        let model = models.embedder.id().name;
        let lock = self.index_lock(memory);
        let _held = lock.lock().unwrap_or_else(|e| e.into_inner());
        let marks = ix.marks(memory);
        let read = self.store.read(|r| {
            let Some(record) = r.get::<MemoryRecord>(Table::Memories, &keys::memory(memory))? else {
                return Ok(None); // forgotten meanwhile
            };
            let mut out = Vec::new();
            for &n in facts {
                let v: Option<VectorRecord> = r.get(Table::Vectors, &keys::seq2(memory, VectorKind::Fact as u64, n))?;
                if let Some(v) = v.filter(|v| v.model == model) {
                    out.push((n, v.v));
                }
            }
            let from = marks.map_or(0, |m| m.entities);
            Ok(Some((
                out,
                graph::entity_vectors(r, memory, from, Some(&model))?,
                record.next_entity,
            )))
        })?;
        let Some((fact_vectors, entities, next_entity)) = read else {
            return Ok(());
        };
        if let Some(vix) = &ix.vectors {
            for (n, v) in &fact_vectors {
                vix.add(memory, Doc::Fact(*n).key(), v).map_err(index_error)?;
            }
            vix.save_if_due(memory).map_err(index_error)?;
        }
        if let Some(eix) = &ix.entities {
            for (n, v) in &entities {
                eix.add(memory, *n, v).map_err(index_error)?;
            }
            eix.save_if_due(memory).map_err(index_error)?;
            // Without marks the memory's indexes are rebuilt whole by its next `Index` job.
            if let Some(m) = marks.filter(|m| m.entities < next_entity) {
                ix.set_marks(
                    memory,
                    Marks {
                        entities: next_entity,
                        ..m
                    },
                )
                .map_err(index_error)?;
            }
        }
        if let Some(first) = fact_vectors.iter().map(|(n, _)| *n).min() {
            ix.hold_back_facts(memory, first).map_err(index_error)?;
        }
        Ok(())
    }

    /// What the memory's entity index holds and how far its mark says it is current: for
    /// tests and diagnostics. None without an entity index.
    pub fn entity_index(&self, memory: &str) -> Result<Option<(Vec<u64>, u64)>, EngineError> {
        let Some(eix) = self.indexes.as_ref().and_then(|ix| ix.entities.as_ref()) else {
            return Ok(None);
        };
        let marks = self
            .indexes
            .as_ref()
            .and_then(|ix| ix.marks(memory))
            .unwrap_or_default();
        Ok(Some((eix.ids(memory).map_err(index_error)?, marks.entities)))
    }

    /// Where the graph finds a memory's held entities by meaning: its entity index, and the
    /// number below which the index holds every entity. None when there is no entity index.
    pub(super) fn entity_lookup(&self, memory: &str) -> Option<graph::EntityIndex<'_>> {
        let ix = self.indexes.as_ref()?;
        Some(graph::EntityIndex {
            vectors: ix.entities.as_ref()?,
            indexed: ix.marks(memory).map_or(0, |m| m.entities),
        })
    }

    /// At start, before serving: finds the memories whose indexes are behind the store (or
    /// missing: deleted while stopped) or ahead of it (a restored backup) and marks them for
    /// [`Engine::catch_up_indexes`], which runs once the socket is open, so a daemon over much
    /// data answers at once. The agents' knowledge bases are rebuilt here, whole, when behind.
    /// Reads the store, never writes it. Returns how many memories and agents it found.
    pub fn find_indexes_behind(&self) -> Result<usize, EngineError> {
        let Some(ix) = &self.indexes else { return Ok(0) };
        let behind: Vec<(String, bool)> = self.store.read(|r| {
            let mut ids = Vec::new();
            r.visit(Table::Memories, b"", b"", |_, m: MemoryRecord| {
                let truth = marks_of(&m);
                let held = ix.marks(&m.id);
                if truth != Marks::default() && held != Some(truth) {
                    ids.push((m.id, held.is_some_and(|h| h.within(&truth))));
                }
                Ok(true)
            })?;
            Ok(ids)
        })?;
        let found = behind.len();
        self.behind().extend(behind);
        Ok(found + self.check_document_indexes()?)
    }

    /// Brings every memory [`Engine::find_indexes_behind`] marked up to the store, one after
    /// another, logging progress. One that fails stays marked (its lane tries again before its
    /// next job). Returns how many it caught up.
    pub fn catch_up_indexes(&self) -> usize {
        let behind: Vec<String> = self.behind().keys().cloned().collect();
        let mut done = 0;
        for (i, memory) in behind.iter().enumerate() {
            tracing::info!(memory = %memory, done = i, of = behind.len(), "bringing search indexes up to the store");
            match self.settle_indexes(memory) {
                Ok(()) => done += 1,
                Err(e) => {
                    tracing::error!(memory = %memory, error = %e, "cannot bring the search indexes up to the store")
                }
            }
        }
        done
    }

    /// Both at once: what a test or tool that does not serve uses.
    pub fn check_indexes(&self) -> Result<usize, EngineError> {
        let found = self.find_indexes_behind()?;
        self.catch_up_indexes();
        match self.behind().keys().next() {
            Some(m) => Err(EngineError::Index(format!(
                "cannot bring the indexes of {m} up to the store"
            ))),
            None => Ok(found),
        }
    }

    /// Brings the memory's indexes up to the store if the start found them behind (its lane
    /// calls this before each job, the catch-up thread for every such memory).
    pub(super) fn settle_indexes(&self, memory: &str) -> Result<(), EngineError> {
        if self.behind().contains_key(memory) {
            self.update_indexes(memory)?;
            self.behind().remove(memory);
        }
        Ok(())
    }

    /// Whether the memory's indexes are still being caught up with the store.
    pub(super) fn indexes_behind(&self, memory: &str) -> bool {
        self.behind().contains_key(memory)
    }

    /// Whether the memory's indexes may be searched: not when the start found them ahead of
    /// the store (a restored backup) or gone, until they are rebuilt; ones that only lack the
    /// newest documents are searched as they are.
    pub(super) fn indexes_searchable(&self, memory: &str) -> bool {
        self.behind().get(memory).is_none_or(|s| *s)
    }

    fn behind(&self) -> std::sync::MutexGuard<'_, std::collections::BTreeMap<String, bool>> {
        self.indexes_behind.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Throws away a memory's indexes (the memory was forgotten).
    pub(super) fn drop_indexes(&self, memory: &str) {
        if let Some(ix) = &self.indexes {
            let lock = self.index_lock(memory);
            let _held = lock.lock().unwrap_or_else(|e| e.into_inner());
            if let Err(e) = ix.drop_memory(memory) {
                tracing::warn!(memory, error = %e, "cannot remove the memory's search indexes");
            }
        }
    }
}

/// What a memory's indexes hold when they are current.
fn marks_of(record: &MemoryRecord) -> Marks {
    Marks {
        facts: record.next_fact,
        passages: record.next_passage,
        entities: record.next_entity,
    }
}

fn index_error(e: IndexError) -> EngineError {
    EngineError::Index(e.to_string())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::formats::Role;

    fn msg(mem: &mut MemoryRecord, role: Role, text: &str) -> StoredMessage {
        crate::engine::passages::tests::msg(mem, role, text, 0.0)
    }

    /// Live episodes are cut too, and an edit can leave one with no history to show: it is cut
    /// all the same, or every index job would find it waiting and queue another.
    #[test]
    fn an_episode_with_nothing_to_show_is_cut_all_the_same() {
        use crate::engine::records::{Episode, EpisodeState};
        let dir = tempfile::tempdir().unwrap();
        let store = crate::store::Store::open(dir.path(), &Default::default()).unwrap();
        let mut st = store.read(|r| State::load(r, "m", 0.0)).unwrap();
        for (role, text) in [
            (Role::User, "first"),
            (Role::Assistant, "reply"),
            (Role::User, "edited away"),
            (Role::Assistant, "gone too"),
        ] {
            // Numbered by the push (the record's counter is the push's to move).
            let mut record = st.memory.clone();
            let m = msg(&mut record, role, text);
            st.memory.turn = record.turn;
            st.push_message(m);
        }
        st.message_mut(2).superseded_at = Some(1.0);
        st.message_mut(3).superseded_at = Some(1.0);
        for (first, last) in [(0, 1), (2, 3)] {
            st.push_episode(Episode::spanning(
                (first, last),
                (first / 2 + 1, last / 2 + 1),
                10,
                EpisodeState::Live,
            ));
        }
        assert!(st.needs_passages());
        let drafts = store
            .read(|r| passage_drafts(&st, r, crate::engine::passages::PASSAGE_TOKENS))
            .unwrap();
        assert_eq!(drafts.episodes, vec![0, 1], "live episodes are cut");
        assert!(!drafts.passages.is_empty());
        assert!(
            drafts.passages.iter().all(|p| p.episode == 0),
            "the second shows nothing"
        );
        assert!(apply_passages(&mut st, drafts.passages, None, drafts.episodes));
        assert!(!st.needs_passages(), "nothing is left to cut again at every job");
    }

    /// A memory stored before table `mentions` has none: its next `Index` job writes the rows
    /// of every passage stored, once.
    #[test]
    fn a_memory_stored_before_mentions_gets_them_at_its_next_index_job() {
        use crate::engine::records::{Episode, EpisodeState};
        let dir = tempfile::tempdir().unwrap();
        let store = crate::store::Store::open(dir.path(), &Default::default()).unwrap();
        let day = crate::engine::notes::days_from_civil(2023, 5, 8);
        let at = day as f64 * 86_400.0 + 12.0 * 3600.0;
        let mut st = store.read(|r| State::load(r, "m", at)).unwrap();
        for (role, text) in [
            (Role::User, "I ran a charity race yesterday!"),
            (Role::Assistant, "Well done!"),
        ] {
            let mut record = st.memory.clone();
            let m = crate::engine::passages::tests::msg(&mut record, role, text, at);
            st.memory.turn = record.turn;
            st.push_message(m);
        }
        st.push_episode(Episode::spanning((0, 1), (1, 1), 10, EpisodeState::Live));
        let drafts = store
            .read(|r| passage_drafts(&st, r, crate::engine::passages::PASSAGE_TOKENS))
            .unwrap();
        assert!(!drafts.backfill, "a new memory's passages are written with theirs");
        assert!(apply_passages(&mut st, drafts.passages, None, drafts.episodes));
        store.write(|w| st.save(w)).unwrap();
        let prefix = keys::memory_prefix("m");
        let rows = || {
            store
                .read(|r| {
                    let mut out = Vec::new();
                    r.visit(Table::Mentions, &prefix, &prefix, |k, last: u64| {
                        out.push((keys::seq2_first(k), last, keys::last_number(k)));
                        Ok(true)
                    })?;
                    Ok(out)
                })
                .unwrap()
        };
        let yesterday = (day - 1) as u64;
        assert_eq!(rows(), vec![(yesterday, yesterday, 0)]);

        // As stored before the table.
        store
            .write(|w| {
                let mut record: MemoryRecord =
                    crate::store::Read::get(w, Table::Memories, &keys::memory("m"))?.unwrap();
                record.mentions_whole = false;
                w.put(Table::Memories, &keys::memory("m"), &record)?;
                w.delete_prefix(Table::Mentions, &prefix).map(|_| ())
            })
            .unwrap();
        assert_eq!(rows(), vec![]);
        let mut st = store.read(|r| State::load(r, "m", at)).unwrap();
        let drafts = store
            .read(|r| passage_drafts(&st, r, crate::engine::passages::PASSAGE_TOKENS))
            .unwrap();
        assert!(drafts.backfill);
        let read = store.read(|r| stored_mentions(r, "m")).unwrap();
        assert_eq!(read, vec![(day - 1, day - 1, 0)]);
        st.backfill_mentions(read);
        store.write(|w| st.save(w)).unwrap();
        assert_eq!(rows(), vec![(yesterday, yesterday, 0)]);
        let st = store.read(|r| State::load(r, "m", at)).unwrap();
        let drafts = store
            .read(|r| passage_drafts(&st, r, crate::engine::passages::PASSAGE_TOKENS))
            .unwrap();
        assert!(!drafts.backfill, "read once");
    }

    #[test]
    fn a_tool_step_is_embedded_from_the_units_scored_text_and_a_message_alone_from_its_excerpt() {
        let mut mem = MemoryRecord::new("m", 0.0);
        let long = "the build log repeats itself ".repeat(40);
        let ms = [
            msg(&mut mem, Role::User, "hi"),
            msg(&mut mem, Role::Assistant, "hello"),
            msg(&mut mem, Role::User, &long),
            msg(&mut mem, Role::Assistant, &long),
            msg(&mut mem, Role::Tool, &long),
        ];
        let refs: Vec<&StoredMessage> = ms.iter().collect();
        let ps = passages_of(0, &refs, 0, 160);
        assert_eq!(
            ps.len(),
            3,
            "the long message and the tool step are passages of their own"
        );
        let of = |p: &Passage| -> Vec<&StoredMessage> {
            refs.iter()
                .copied()
                .filter(|m| (p.first_seq..=p.last_seq).contains(&m.seq))
                .collect()
        };
        assert_eq!(
            embedding_text(&ps[0], &of(&ps[0])),
            ps[0].text,
            "two units: the passage's text"
        );
        assert_eq!(
            embedding_text(&ps[1], &of(&ps[1])),
            ps[1].text,
            "a message alone: the passage's text, with its speaker"
        );
        assert_eq!(
            embedding_text(&ps[2], &of(&ps[2])),
            cut::unit_text(&of(&ps[2])),
            "a tool step: what scoring embedded"
        );
        assert_ne!(cut::unit_text(&of(&ps[2])), ps[2].text);
    }
}
