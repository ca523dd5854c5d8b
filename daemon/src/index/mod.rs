//! Search indexes: words (BM25, tantivy) and meaning (cosine, usearch), one per memory.
//!
//! Both are derived data: the store (LMDB) is the source of truth, and everything here can be
//! thrown away and rebuilt from it. Each index says which ids it holds ([`words::Words::ids`],
//! [`vectors::Vectors::ids`]) so the engine can compare with the store at start ([`diff`]) and
//! add what is missing or rebuild from scratch.
//!
//! Layout under the data dir: `index/<memory dir>/words/` (a tantivy index),
//! `index/<memory dir>/vectors.usearch` + `vectors.keys` (facts and passages, for recall) and
//! `entities.usearch` + `entities.keys` (the graph's entities, for resolving a new name). The
//! memory dir is a hash of the memory id (ids may hold any UTF-8 and be 256 bytes long), with
//! the id itself written in `memory.id`.
//!
//! Why one index per memory rather than one shared index with a memory field: BM25's statistics
//! (document frequencies, average length) are then the memory's own, so one memory's documents
//! never change another's ranking (seed 000: nothing reads across memories); forgetting a memory
//! is removing a directory; a rebuild touches one memory; and usearch's filtered search is slow
//! at low selectivity and buggy with mmap views (DEPENDENCIES.md). The cost is one open tantivy
//! reader (and, while writing, one writer) per active memory: kept bounded by an LRU of open
//! handles (`open_memories`). Measured figures are in `examples/index_bench.rs`.

mod open;
pub mod vectors;
pub mod words;

use std::collections::{BTreeSet, HashMap};
use std::path::{Path, PathBuf};
use std::sync::Mutex;

use sha2::{Digest, Sha256};

#[derive(Debug, thiserror::Error)]
pub enum IndexError {
    #[error("index io at {path}: {source}")]
    Io { path: PathBuf, source: std::io::Error },
    #[error("words index: {0}")]
    Words(String),
    #[error("vector index: {0}")]
    Vectors(String),
    #[error("vector of {got} dimensions for an index of {want}")]
    Dimension { got: usize, want: usize },
}

impl IndexError {
    fn io(path: &Path, source: std::io::Error) -> IndexError {
        IndexError::Io {
            path: path.to_path_buf(),
            source,
        }
    }
}

/// The directory of one memory's indexes under `root` (created on first write).
pub fn memory_dir(root: &Path, memory: &str) -> PathBuf {
    let digest = Sha256::digest(memory.as_bytes());
    let hex: String = digest[..16].iter().map(|b| format!("{b:02x}")).collect();
    root.join(hex)
}

/// Creates the memory's directory and names the memory in it (for people reading the disk).
/// The name is written beside and renamed into place, so a crash never leaves it empty or cut
/// (a process killed between creating the file and writing it did, and `memory.id` then named
/// nothing for good); one that is not the memory's id is written again.
fn ensure_memory_dir(root: &Path, memory: &str) -> Result<PathBuf, IndexError> {
    static WRITES: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(0);
    let dir = memory_dir(root, memory);
    std::fs::create_dir_all(&dir).map_err(|e| IndexError::io(&dir, e))?;
    let name = dir.join("memory.id");
    if std::fs::read(&name).ok().as_deref() != Some(memory.as_bytes()) {
        let n = WRITES.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        let part = dir.join(format!("memory.id.{}.{n}.part", std::process::id()));
        std::fs::write(&part, memory.as_bytes()).map_err(|e| IndexError::io(&part, e))?;
        std::fs::rename(&part, &name).map_err(|e| IndexError::io(&name, e))?;
    }
    Ok(dir)
}

/// A memory's indexes under one root, and the marks that say what they hold.
pub struct Indexes {
    root: PathBuf,
    pub words: words::Words,
    /// None without an embedder (then recall searches by words only).
    pub vectors: Option<vectors::Vectors>,
    /// The graph's entities by the embedding of their name (None without an embedder).
    pub entities: Option<vectors::Vectors>,
    /// Marks the indexes reached in RAM while a vector index still holds changes not saved
    /// (it is saved when enough changed, [`vectors::Vectors::save_if_due`]): `marks.json` is
    /// written once every index of the memory is on disk.
    pending: Mutex<HashMap<String, Marks>>,
}

/// What a memory's indexes hold: every fact numbered below `facts`, every passage below
/// `passages` and every entity below `entities` (written to disk only once the indexes are
/// durable, so a crash leaves them behind, never ahead: the next indexing adds again what may
/// be missing, and adding is idempotent).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct Marks {
    pub facts: u64,
    pub passages: u64,
    /// Absent in marks written before entities were indexed: 0, so they are added.
    #[serde(default)]
    pub entities: u64,
}

impl Marks {
    /// Whether every mark is at or below `other`'s: an index with these marks only lacks the
    /// newest documents of a store whose marks are `other`.
    pub fn within(&self, other: &Marks) -> bool {
        self.facts <= other.facts && self.passages <= other.passages && self.entities <= other.entities
    }
}

const MARKS_FILE: &str = "marks.json";
/// Memories whose word index stays open at once.
pub(crate) const OPEN_WORD_INDEXES: usize = 64;
/// Memories whose vector indexes (recall's, the graph's) stay open at once, as mapped views of
/// their files (loaded in RAM only while the lanes write a few of them). Each vector takes
/// about 1 KB (384 16-bit floats and its graph links), so a memory with 10k facts and passages
/// maps about 15 MB: a daemon serving a thousand memories keeps the recently used ones, not
/// gigabytes.
pub(crate) const OPEN_VECTOR_INDEXES: usize = 64;

impl Indexes {
    /// The indexes under `root`, with a vector index of `dim` dimensions when there is an
    /// embedder.
    pub fn open(root: &Path, dim: Option<usize>) -> Result<Indexes, IndexError> {
        Ok(Indexes {
            root: root.to_path_buf(),
            words: words::Words::open(root, OPEN_WORD_INDEXES)?,
            vectors: dim
                .map(|d| vectors::Vectors::open(root, d, "vectors", OPEN_VECTOR_INDEXES))
                .transpose()?,
            entities: dim
                .map(|d| vectors::Vectors::open(root, d, "entities", OPEN_VECTOR_INDEXES))
                .transpose()?,
            pending: Mutex::default(),
        })
    }

    fn pending(&self) -> std::sync::MutexGuard<'_, HashMap<String, Marks>> {
        self.pending.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// What the memory's indexes hold; None when they were never written (or were deleted).
    pub fn marks(&self, memory: &str) -> Option<Marks> {
        if let Some(m) = self.pending().get(memory) {
            return Some(*m);
        }
        self.marks_on_disk(memory)
    }

    fn marks_on_disk(&self, memory: &str) -> Option<Marks> {
        let path = memory_dir(&self.root, memory).join(MARKS_FILE);
        let bytes = std::fs::read(path).ok()?;
        let mut marks: Marks = serde_json::from_slice(&bytes).ok()?;
        // An entity index whose files are gone holds none, whatever the marks say: its
        // entities are added again (the other indexes are left as they are).
        if marks.entities > 0 && self.entities.as_ref().is_some_and(|e| !e.saved(memory)) {
            marks.entities = 0;
        }
        Some(marks)
    }

    /// Records what the memory's indexes hold (after [`Indexes::commit`]): on disk when every
    /// index of the memory is, else in RAM until then.
    pub fn set_marks(&self, memory: &str, marks: Marks) -> Result<(), IndexError> {
        if self.vector_indexes().any(|v| v.unsaved(memory)) {
            self.pending().insert(memory.to_owned(), marks);
            return Ok(());
        }
        self.pending().remove(memory);
        self.write_marks(memory, marks)
    }

    /// Vectors of facts from `first` on went into a vector index not saved yet, facts the marks
    /// already count (the graph embeds a fact after an `Index` job took its words): until that
    /// index is saved, the marks on disk count no fact from `first` on, so after a crash those
    /// are added again.
    pub fn hold_back_facts(&self, memory: &str, first: u64) -> Result<(), IndexError> {
        if !self.vectors.as_ref().is_some_and(|v| v.unsaved(memory)) {
            return Ok(());
        }
        let Some(current) = self.marks(memory) else {
            return Ok(());
        };
        self.pending().entry(memory.to_owned()).or_insert(current);
        match self.marks_on_disk(memory) {
            Some(disk) if disk.facts > first => self.write_marks(memory, Marks { facts: first, ..disk }),
            _ => Ok(()),
        }
    }

    fn write_marks(&self, memory: &str, marks: Marks) -> Result<(), IndexError> {
        let dir = ensure_memory_dir(&self.root, memory)?;
        let (tmp, path) = (dir.join("marks.json.tmp"), dir.join(MARKS_FILE));
        let bytes = serde_json::to_vec(&marks).unwrap_or_default();
        std::fs::write(&tmp, bytes).map_err(|e| IndexError::io(&tmp, e))?;
        std::fs::rename(&tmp, &path).map_err(|e| IndexError::io(&path, e))
    }

    /// Makes staged writes durable: the word index's always, a vector index's when enough
    /// changed (see [`Indexes::set_marks`] for what the marks then say).
    pub fn commit(&self, memory: &str) -> Result<(), IndexError> {
        self.words.commit(memory)?;
        for v in self.vector_indexes() {
            v.save_if_due(memory)?;
        }
        Ok(())
    }

    fn vector_indexes(&self) -> impl Iterator<Item = &vectors::Vectors> {
        self.vectors.iter().chain(&self.entities)
    }

    /// Throws away everything held for the memory (marks first, so a crash midway rebuilds).
    pub fn drop_memory(&self, memory: &str) -> Result<(), IndexError> {
        self.pending().remove(memory);
        let marks = memory_dir(&self.root, memory).join(MARKS_FILE);
        match std::fs::remove_file(&marks) {
            Ok(()) => {}
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => {}
            Err(e) => return Err(IndexError::io(&marks, e)),
        }
        self.words.drop_memory(memory)?;
        for v in self.vector_indexes() {
            v.drop_memory(memory)?;
        }
        Ok(())
    }

    /// Commits and saves every open index, then writes the marks held in RAM (at shutdown).
    pub fn flush(&self) -> Result<(), IndexError> {
        self.words.commit_all()?;
        for v in self.vector_indexes() {
            v.save_all()?;
        }
        let pending: Vec<(String, Marks)> = self.pending().drain().collect();
        for (memory, marks) in pending {
            self.write_marks(&memory, marks)?;
        }
        Ok(())
    }
}

/// How an index stands against the store's ids.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct Diff {
    /// In the store, not in the index: to add.
    pub missing: Vec<u64>,
    /// In the index, not in the store: to remove.
    pub extra: Vec<u64>,
}

impl Diff {
    pub fn is_current(&self) -> bool {
        self.missing.is_empty() && self.extra.is_empty()
    }
}

/// Compares what an index holds with what the store says it should hold.
pub fn diff(held: &[u64], truth: &[u64]) -> Diff {
    let held: BTreeSet<u64> = held.iter().copied().collect();
    let truth: BTreeSet<u64> = truth.iter().copied().collect();
    Diff {
        missing: truth.difference(&held).copied().collect(),
        extra: held.difference(&truth).copied().collect(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn marks_reach_the_disk_only_once_the_vector_indexes_are_saved() {
        let dir = tempfile::tempdir().unwrap();
        let ix = Indexes::open(dir.path(), Some(4)).unwrap();
        let marks = |facts| Marks {
            facts,
            passages: 0,
            entities: 0,
        };
        let unit = |k: u64| {
            let mut v = vec![0.1f32; 4];
            v[(k % 4) as usize] = 1.0;
            v
        };
        let vectors = ix.vectors.as_ref().unwrap();
        for k in 0..100 {
            ix.words.add("m", k, &format!("fact {k}")).unwrap();
            vectors.add("m", k, &unit(k)).unwrap();
        }
        ix.commit("m").unwrap();
        ix.set_marks("m", marks(100)).unwrap();
        assert_eq!(ix.marks_on_disk("m"), Some(marks(100)), "100 changes: saved");
        // Five more: the word index commits, the vector index waits; the marks move in RAM only.
        for k in 100..105 {
            ix.words.add("m", k, &format!("fact {k}")).unwrap();
            vectors.add("m", k, &unit(k)).unwrap();
        }
        ix.commit("m").unwrap();
        ix.set_marks("m", marks(105)).unwrap();
        assert_eq!(ix.marks("m"), Some(marks(105)));
        assert_eq!(ix.marks_on_disk("m"), Some(marks(100)), "a crash now adds 100.. again");
        // The graph embeds facts 20 and 21 after their words were indexed: until saved, the
        // disk counts no fact from 20 on.
        vectors.add("m", 20, &unit(1)).unwrap();
        vectors.add("m", 21, &unit(2)).unwrap();
        ix.hold_back_facts("m", 20).unwrap();
        assert_eq!(ix.marks("m"), Some(marks(105)));
        assert_eq!(ix.marks_on_disk("m"), Some(marks(20)));
        // At shutdown everything is saved and the marks written.
        ix.flush().unwrap();
        assert_eq!(ix.marks_on_disk("m"), Some(marks(105)));
        let reopened = Indexes::open(dir.path(), Some(4)).unwrap();
        assert_eq!(reopened.marks("m"), Some(marks(105)));
        assert_eq!(reopened.vectors.as_ref().unwrap().ids("m").unwrap().len(), 105);
    }

    #[test]
    fn diff_names_what_to_add_and_remove() {
        let d = diff(&[1, 2, 3], &[2, 3, 4, 5]);
        assert_eq!(d.missing, vec![4, 5]);
        assert_eq!(d.extra, vec![1]);
        assert!(!d.is_current());
        assert!(diff(&[3, 1], &[1, 3]).is_current());
    }

    #[test]
    fn a_memory_id_left_empty_by_a_crash_is_written_again() {
        let root = tempfile::tempdir().unwrap();
        let dir = ensure_memory_dir(root.path(), "u0/notes").unwrap();
        let name = dir.join("memory.id");
        assert_eq!(std::fs::read_to_string(&name).unwrap(), "u0/notes");
        std::fs::write(&name, "").unwrap(); // as a kill between creating and writing left it
        ensure_memory_dir(root.path(), "u0/notes").unwrap();
        assert_eq!(std::fs::read_to_string(&name).unwrap(), "u0/notes");
        let files: Vec<_> = std::fs::read_dir(&dir)
            .unwrap()
            .map(|e| e.unwrap().file_name())
            .collect();
        assert_eq!(files, ["memory.id"], "nothing left beside it");
    }

    #[test]
    fn memory_dirs_differ_and_are_stable() {
        let root = Path::new("/x");
        assert_eq!(memory_dir(root, "a"), memory_dir(root, "a"));
        assert_ne!(memory_dir(root, "a"), memory_dir(root, "ab"));
        assert_eq!(memory_dir(root, &"é".repeat(128)).file_name().unwrap().len(), 32);
    }
}
