//! Meaning search: a cosine index of u64 keys → f32 vectors, one usearch index per memory.
//! The only module that imports usearch.
//!
//! Each memory's index is opened as a read-only view of its file (mapped, not read), loaded
//! into memory at its first change, and written to disk by [`Vectors::save`]
//! (`<stem>.usearch`, plus `<stem>.keys`: the keys it holds, since usearch cannot list them).
//! A save rewrites the whole file, so after a job the lane saves only when enough changed
//! ([`Vectors::save_if_due`]: an eighth of the index): saving after every job rewrote a memory's
//! 100k vectors (about 100 MB) for each note. Only the few most recently written indexes stay
//! loaded; an older one is saved if it must be and becomes a view again, so at most those few
//! hold changes not on disk (after a crash, what they lacked is added again from the store).
//! The stem names what is indexed: one memory directory holds several such indexes (recall's
//! facts and passages, the graph's entities), each with its own files.
//! Both files are written to a temporary name and renamed; at load a keys file that does not
//! match the index (a crash between the renames, a foreign file) makes the index count as empty,
//! so the start-up check rebuilds it from the store. The keys file begins with the identity
//! (device, inode, length) of the index file written with it: when the index file is still that
//! one, the keys are trusted as they are; otherwise (an older keys file without it, a copied
//! directory, a crash between the renames) each key is looked up in the index, which took 11–16
//! ms of a memory's first search at 200k vectors. An index of another dimension (the
//! embedding model changed) also counts as empty.
//!
//! usearch does not grow by itself: capacity is reserved ahead of each add, doubling. Each
//! memory's index is used under its own lock, one call at a time, so its thread slots (one per
//! core) are never exhausted.
//!
//! usearch is never handed a path to view: we map the file and give it the bytes. Its own
//! mapping (`memory_mapped_file_t`, usearch 2.26) closes descriptor 0 when the path cannot be
//! opened (its close runs `close(file_descriptor_)` with the 0 it started with), and in a
//! daemon descriptor 0 is by then some other file's, socket's or lock's: a debug build aborts
//! when that owner closes it ("IO Safety violation: owned file descriptor already closed"), a
//! release build closes or writes the wrong file.

use std::collections::{BTreeSet, VecDeque};
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};

use usearch::{Index, IndexOptions, MetricKind, ScalarKind};

use super::open::OpenHandles;
use super::{ensure_memory_dir, memory_dir, IndexError};

const FIRST_CAPACITY: usize = 64;
/// Memories whose saved index stays loaded in RAM (the ones the lanes are writing; the rest are
/// read-only views of their files, loaded again at their next change): 64 loaded indexes of
/// 20k vectors took about a gigabyte, and a memory written job after job is not read again.
const LOADED_INDEXES: usize = 4;
/// Changes after which a loaded index is saved at the end of a job whatever its size; a larger
/// one waits for an eighth of its size ([`SAVE_FRACTION`]), so saving costs O(1) per vector.
const SAVE_MIN_CHANGES: usize = 64;
const SAVE_FRACTION: usize = 8;

fn err(e: impl std::fmt::Display) -> IndexError {
    IndexError::Vectors(e.to_string())
}

/// Cosine vector indexes of every memory under one root directory, all of one dimension.
pub struct Vectors {
    root: PathBuf,
    dim: usize,
    /// The name of this index's files in each memory directory.
    stem: &'static str,
    open: OpenHandles<Handle>,
    /// Memories whose index stays loaded after its save, least recently written first.
    loaded: Mutex<VecDeque<String>>,
}

struct Handle {
    index: Index,
    keys: Keys,
    /// Slots taken by removed vectors (usearch deletes softly; they still need capacity).
    removed: usize,
    /// Changed since the last save.
    dirty: bool,
    /// Vectors added or removed since the last save.
    unsaved: usize,
    /// The file the index is a read-only view of (mapped, not read: opening a memory's index
    /// of 200k vectors to search it took 300 ms when loaded), until the first change loads it.
    viewed: Option<String>,
    /// The mapping a viewed `index` reads from (None once loaded). Declared after `index`, so
    /// it is unmapped only after the view is dropped.
    map: Option<memmap2::Mmap>,
}

/// The keys an index holds: as read from its keys file (ascending) until the index first
/// changes, then a set (building it at every open took 2–4 ms at 200k keys).
enum Keys {
    Sorted(Vec<u64>),
    Set(BTreeSet<u64>),
}

impl Keys {
    fn len(&self) -> usize {
        match self {
            Keys::Sorted(v) => v.len(),
            Keys::Set(s) => s.len(),
        }
    }

    fn ascending(&self) -> Vec<u64> {
        match self {
            Keys::Sorted(v) => v.clone(),
            Keys::Set(s) => s.iter().copied().collect(),
        }
    }

    fn set(&mut self) -> &mut BTreeSet<u64> {
        if let Keys::Sorted(v) = self {
            *self = Keys::Set(std::mem::take(v).into_iter().collect());
        }
        match self {
            Keys::Set(s) => s,
            Keys::Sorted(_) => unreachable!("made a set above"),
        }
    }
}

/// Marks a keys file that begins with its index file's identity (no key is `u64::MAX`: keys
/// are a document's number shifted left by one).
const KEYS_STAMPED: u64 = u64::MAX;

/// Flushes a written file's data to the disk (the name it is renamed to is journaled after).
fn sync_data(path: &Path) -> Result<(), IndexError> {
    std::fs::File::open(path)
        .and_then(|f| f.sync_data())
        .map_err(|e| IndexError::io(path, e))
}

/// What tells one written index file from another: its device, inode and length. Two files
/// that exist at once never share an inode, so after a crash between the renames the index
/// file left in place is not the one the new keys file names.
fn identity(path: &Path) -> Result<[u64; 3], IndexError> {
    use std::os::unix::fs::MetadataExt;
    let m = std::fs::metadata(path).map_err(|e| IndexError::io(path, e))?;
    Ok([m.dev(), m.ino(), m.len()])
}

fn options(dim: usize) -> IndexOptions {
    IndexOptions {
        dimensions: dim,
        metric: MetricKind::Cos,
        quantization: ScalarKind::F16,
        connectivity: 0,
        expansion_add: 0,
        expansion_search: 0,
        multi: false,
    }
}

/// A search's matches as (key, cosine): cosine distance is 1 − cosine.
fn cosines_of(found: usearch::ffi::Matches) -> Vec<(u64, f32)> {
    found
        .keys
        .into_iter()
        .zip(found.distances)
        .map(|(key, d)| (key, 1.0 - d))
        .collect()
}

/// A read-only view of the index saved at `path` (mapped, not read), and the mapping it reads
/// from, to be kept for as long as the view (see the module doc for why usearch does not map
/// the file itself).
fn view_of(path: &str, dim: usize) -> Result<(Index, memmap2::Mmap), IndexError> {
    let file = std::fs::File::open(path).map_err(|e| IndexError::io(Path::new(path), e))?;
    // SAFETY: a saved index file is never changed in place (a save writes a temporary file
    // and renames it over this one; a drop unlinks it), so the mapped bytes stay as they are.
    let map = unsafe { memmap2::Mmap::map(&file) }.map_err(|e| IndexError::io(Path::new(path), e))?;
    let index = Index::new(&options(dim)).map_err(err)?;
    // SAFETY: the caller keeps `map` (whose address never moves) alive for as long as `index`
    // (`Handle` drops its `index` before its `map`); on an error `index` is dropped first here.
    unsafe { index.view_from_buffer(&map) }.map_err(err)?;
    Ok((index, map))
}

fn threads() -> usize {
    std::thread::available_parallelism().map(|n| n.get()).unwrap_or(2)
}

impl Handle {
    fn empty(dim: usize) -> Result<Handle, IndexError> {
        Ok(Handle {
            index: Index::new(&options(dim)).map_err(err)?,
            keys: Keys::Set(BTreeSet::new()),
            removed: 0,
            dirty: false,
            unsaved: 0,
            viewed: None,
            map: None,
        })
    }

    /// The saved index in `dir`, or an empty one when there is none or it cannot be trusted.
    fn load(files: &Files, dim: usize) -> Result<Handle, IndexError> {
        let (index_path, keys_path) = (&files.index, &files.keys);
        if !index_path.exists() || !keys_path.exists() {
            return Handle::empty(dim);
        }
        match Handle::read(index_path, keys_path, dim) {
            Ok(h) => Ok(h),
            Err(e) => {
                tracing::warn!(error = %e, path = %index_path.display(), "vector index unusable; starting empty");
                Handle::empty(dim)
            }
        }
    }

    fn read(index_path: &Path, keys_path: &Path, dim: usize) -> Result<Handle, IndexError> {
        let path = index_path.to_string_lossy();
        let meta = Index::metadata(&path).map_err(err)?;
        if meta.dimensions as usize != dim {
            return Err(IndexError::Dimension {
                got: meta.dimensions as usize,
                want: dim,
            });
        }
        let (index, map) = view_of(&path, dim)?;
        let bytes = std::fs::read(keys_path).map_err(|e| IndexError::io(keys_path, e))?;
        if bytes.len() % 8 != 0 {
            return Err(err("keys file of a partial length"));
        }
        let mut keys: Vec<u64> = bytes
            .chunks_exact(8)
            .map(|c| u64::from_le_bytes(c.try_into().expect("8 bytes")))
            .collect();
        let stamp = match keys.as_slice() {
            [KEYS_STAMPED, dev, ino, len, ..] => {
                let stamp = [*dev, *ino, *len];
                keys.drain(..4);
                Some(stamp)
            }
            _ => None,
        };
        let ascending = keys.windows(2).all(|w| w[0] < w[1]);
        let same_file = stamp.is_some() && stamp == identity(index_path).ok();
        if !ascending || keys.len() != index.size() || !(same_file || keys.iter().all(|&k| index.contains(k))) {
            return Err(err("keys file does not match the index"));
        }
        Ok(Handle {
            index,
            keys: Keys::Sorted(keys),
            removed: meta.count_deleted as usize,
            dirty: false,
            unsaved: 0,
            viewed: Some(path.into_owned()),
            map: Some(map),
        })
    }

    /// Loads a viewed index into memory, with room to grow, before its first change. The file
    /// still holds what the view showed: it is only rewritten by a save, after a change.
    fn writable(&mut self) -> Result<(), IndexError> {
        let Some(path) = &self.viewed else {
            return Ok(());
        };
        let index = Index::new(&options(self.index.dimensions())).map_err(err)?;
        index.load(path).map_err(err)?;
        index
            .reserve_capacity_and_threads(index.capacity().max(FIRST_CAPACITY), threads())
            .map_err(err)?;
        // Only now: a failed load leaves the view, searchable, and the next change tries again.
        self.index = index;
        self.viewed = None;
        self.map = None;
        Ok(())
    }

    fn add(&mut self, key: u64, vector: &[f32]) -> Result<(), IndexError> {
        self.writable()?;
        self.fits(vector)?;
        if self.index.contains(key) {
            self.remove(key)?;
        }
        let needed = self.index.size() + self.removed + 1;
        if needed > self.index.capacity() {
            let capacity = (self.index.capacity() * 2).max(needed).max(FIRST_CAPACITY);
            self.index
                .reserve_capacity_and_threads(capacity, threads())
                .map_err(err)?;
        }
        self.index.add(key, vector).map_err(err)?;
        self.keys.set().insert(key);
        self.dirty = true;
        self.unsaved += 1;
        Ok(())
    }

    fn remove(&mut self, key: u64) -> Result<(), IndexError> {
        self.writable()?;
        if self.index.contains(key) {
            self.index.remove(key).map_err(err)?;
            self.removed += 1;
        }
        if self.keys.set().remove(&key) {
            self.dirty = true;
            self.unsaved += 1;
        }
        Ok(())
    }

    fn search(&self, query: &[f32], k: usize) -> Result<Vec<(u64, f32)>, IndexError> {
        self.fits(query)?;
        if k == 0 || self.index.size() == 0 {
            return Ok(Vec::new());
        }
        Ok(cosines_of(self.index.search(query, k).map_err(err)?))
    }

    /// The `k` nearest keys to `query` among those `keep` accepts (the graph's search, skipping
    /// the others: approximate, like [`Handle::search`]).
    fn search_where(&self, query: &[f32], k: usize, keep: impl Fn(u64) -> bool) -> Result<Vec<(u64, f32)>, IndexError> {
        self.fits(query)?;
        if k == 0 || self.index.size() == 0 {
            return Ok(Vec::new());
        }
        Ok(cosines_of(self.index.filtered_search(query, k, keep).map_err(err)?))
    }

    /// The cosine of `query` with each of `keys` the index holds, nearest first: exact, read
    /// key by key (for a few hundred keys; past that, [`Handle::search_where`]).
    fn cosines(&self, query: &[f32], keys: &[u64]) -> Result<Vec<(u64, f32)>, IndexError> {
        self.fits(query)?;
        let norm = |v: &[f32]| v.iter().map(|x| x * x).sum::<f32>().sqrt();
        let q = norm(query);
        let mut v = vec![0f32; query.len()];
        let mut out = Vec::new();
        for &key in keys {
            if !self.index.contains(key) || self.index.get(key, &mut v).map_err(err)? == 0 {
                continue;
            }
            let dot: f32 = query.iter().zip(&v).map(|(a, b)| a * b).sum();
            let n = q * norm(&v);
            out.push((key, if n > 0.0 { dot / n } else { 0.0 }));
        }
        out.sort_by(|a, b| b.1.total_cmp(&a.1).then(a.0.cmp(&b.0)));
        Ok(out)
    }

    /// Whether a vector has the index's dimensions.
    fn fits(&self, vector: &[f32]) -> Result<(), IndexError> {
        if vector.len() == self.index.dimensions() {
            Ok(())
        } else {
            Err(IndexError::Dimension {
                got: vector.len(),
                want: self.index.dimensions(),
            })
        }
    }

    fn save(&mut self, files: &Files) -> Result<(), IndexError> {
        if !self.dirty {
            return Ok(());
        }
        let (index_tmp, keys_tmp) = (
            files.index.with_extension("usearch.tmp"),
            files.keys.with_extension("keys.tmp"),
        );
        self.index.save(&index_tmp.to_string_lossy()).map_err(err)?;
        // Both files reach the disk before their names move: the marks that say what the index
        // holds are written after a save, and must never be ahead of it after a power loss.
        sync_data(&index_tmp)?;
        // The rename keeps the file's identity: the keys file names the index written with it.
        let [dev, ino, len] = identity(&index_tmp)?;
        let bytes: Vec<u8> = [KEYS_STAMPED, dev, ino, len]
            .into_iter()
            .chain(self.keys.ascending())
            .flat_map(|k| k.to_le_bytes())
            .collect();
        std::fs::write(&keys_tmp, bytes).map_err(|e| IndexError::io(&keys_tmp, e))?;
        sync_data(&keys_tmp)?;
        std::fs::rename(&keys_tmp, &files.keys).map_err(|e| IndexError::io(&files.keys, e))?;
        std::fs::rename(&index_tmp, &files.index).map_err(|e| IndexError::io(&files.index, e))?;
        self.dirty = false;
        self.unsaved = 0;
        Ok(())
    }

    /// Whether enough changed for a save at the end of a job.
    fn save_due(&self) -> bool {
        self.dirty && self.unsaved >= SAVE_MIN_CHANGES.max(self.keys.len() / SAVE_FRACTION)
    }

    /// Goes back to a view of its saved file, dropping the copy in RAM (its next change loads
    /// it again). Failing that, the loaded copy stays.
    fn view_saved(&mut self, files: &Files) {
        let path = files.index.to_string_lossy().into_owned();
        match view_of(&path, self.index.dimensions()) {
            Ok((view, map)) if view.size() == self.index.size() => {
                self.index = view;
                self.map = Some(map);
                self.viewed = Some(path);
            }
            Ok(_) => tracing::warn!(path, "vector index: the saved file differs; kept in RAM"),
            Err(e) => tracing::warn!(error = %e, path, "vector index: no view after save; kept in RAM"),
        }
    }
}

/// Where one memory's index and its keys are written.
struct Files {
    index: PathBuf,
    keys: PathBuf,
}

impl Vectors {
    /// Vector indexes of `dim` dimensions (the embedder's) under `root` (e.g. `<data>/index`),
    /// in files named `stem` (`vectors` for recall's, `entities` for the graph's); at most
    /// `max_open` memories' indexes are kept in RAM at once (the least recently used one that
    /// nobody is using and that holds nothing unsaved is dropped first, and loaded again when
    /// next used).
    pub fn open(root: &Path, dim: usize, stem: &'static str, max_open: usize) -> Result<Vectors, IndexError> {
        std::fs::create_dir_all(root).map_err(|e| IndexError::io(root, e))?;
        Ok(Vectors {
            root: root.to_path_buf(),
            dim,
            stem,
            open: OpenHandles::new(max_open),
            loaded: Mutex::default(),
        })
    }

    fn files(&self, dir: &Path) -> Files {
        Files {
            index: dir.join(format!("{}.usearch", self.stem)),
            keys: dir.join(format!("{}.keys", self.stem)),
        }
    }

    pub fn dim(&self) -> usize {
        self.dim
    }

    fn dir(&self, memory: &str) -> PathBuf {
        memory_dir(&self.root, memory)
    }

    fn handle(&self, memory: &str) -> Result<Arc<Mutex<Handle>>, IndexError> {
        // A handle with unsaved vectors stays open: it is saved when due, or when it leaves
        // the few kept loaded.
        self.open.get(
            memory,
            || Handle::load(&self.files(&self.dir(memory)), self.dim),
            |h| !h.dirty,
        )
    }

    fn with<T>(&self, memory: &str, f: impl FnOnce(&mut Handle) -> Result<T, IndexError>) -> Result<T, IndexError> {
        let h = self.handle(memory)?;
        let mut h = h.lock().unwrap_or_else(|e| e.into_inner());
        f(&mut h)
    }

    /// Adds (or replaces) the vector of `key`. Kept in memory until saved.
    pub fn add(&self, memory: &str, key: u64, vector: &[f32]) -> Result<(), IndexError> {
        self.with(memory, |h| h.add(key, vector))?;
        self.keep_loaded(memory);
        Ok(())
    }

    pub fn remove(&self, memory: &str, key: u64) -> Result<(), IndexError> {
        self.with(memory, |h| h.remove(key))?;
        self.keep_loaded(memory);
        Ok(())
    }

    /// The `k` nearest keys to `query` by cosine, nearest first, with their cosine.
    pub fn search(&self, memory: &str, query: &[f32], k: usize) -> Result<Vec<(u64, f32)>, IndexError> {
        self.with(memory, |h| h.search(query, k))
    }

    /// The cosine of `query` with each of `keys` the memory's index holds, nearest first
    /// (exact: for a few hundred keys).
    pub fn cosines(&self, memory: &str, query: &[f32], keys: &[u64]) -> Result<Vec<(u64, f32)>, IndexError> {
        self.with(memory, |h| h.cosines(query, keys))
    }

    /// The `k` nearest keys to `query` among those `keep` accepts, nearest first.
    pub fn search_where(
        &self,
        memory: &str,
        query: &[f32],
        k: usize,
        keep: impl Fn(u64) -> bool,
    ) -> Result<Vec<(u64, f32)>, IndexError> {
        self.with(memory, |h| h.search_where(query, k, keep))
    }

    /// The keys the memory's index holds, ascending (what the start-up check compares).
    pub fn ids(&self, memory: &str) -> Result<Vec<u64>, IndexError> {
        self.with(memory, |h| Ok(h.keys.ascending()))
    }

    /// Whether the memory's index was ever written to disk (and is still there).
    pub fn saved(&self, memory: &str) -> bool {
        self.files(&self.dir(memory)).index.exists()
    }

    /// Writes the memory's index to disk if it changed.
    pub fn save(&self, memory: &str) -> Result<(), IndexError> {
        let files = self.files(&ensure_memory_dir(&self.root, memory)?);
        self.with(memory, |h| h.save(&files))
    }

    /// Writes the memory's index to disk if enough changed since its last save (see the module
    /// doc; [`Vectors::unsaved`] says what is left).
    pub fn save_if_due(&self, memory: &str) -> Result<(), IndexError> {
        let Some(h) = self.open.peek(memory) else {
            return Ok(()); // not open: nothing unsaved
        };
        let mut h = h.lock().unwrap_or_else(|e| e.into_inner());
        if h.save_due() {
            h.save(&self.files(&ensure_memory_dir(&self.root, memory)?))?;
        }
        Ok(())
    }

    /// Whether the memory's index is open (used lately).
    pub fn is_open(&self, memory: &str) -> bool {
        self.open.peek(memory).is_some()
    }

    /// Opens the memory's index ahead of a search: a view's open reads every key (23 ms at 200k
    /// vectors), which can run while the query is embedded.
    pub fn open_memory(&self, memory: &str) -> Result<(), IndexError> {
        self.handle(memory).map(drop)
    }

    /// Whether the memory's index holds changes not on disk.
    pub fn unsaved(&self, memory: &str) -> bool {
        self.open
            .peek(memory)
            .is_some_and(|h| h.lock().unwrap_or_else(|e| e.into_inner()).dirty)
    }

    /// Notes the memory's index as just written (loaded, to change again without reading its
    /// file); past [`LOADED_INDEXES`] the least recently written one is saved if it changed and
    /// goes back to a view, when nobody holds it (else it is tried again at the next write).
    fn keep_loaded(&self, memory: &str) {
        let mut loaded = self.loaded.lock().unwrap_or_else(|e| e.into_inner());
        loaded.retain(|m| m != memory);
        loaded.push_back(memory.to_owned());
        let mut tries = loaded.len();
        while loaded.len() > LOADED_INDEXES && tries > 0 {
            tries -= 1;
            let Some(old) = loaded.pop_front() else { break };
            let Some(h) = self.open.peek(&old) else { continue };
            let viewed = match h.try_lock() {
                Ok(mut h) => {
                    let saved = match ensure_memory_dir(&self.root, &old) {
                        Ok(dir) => h.save(&self.files(&dir)),
                        Err(e) => Err(e),
                    };
                    match saved {
                        // An index never saved empty has no file to view.
                        Ok(()) if h.viewed.is_none() && self.saved(&old) => {
                            h.view_saved(&self.files(&self.dir(&old)));
                            true
                        }
                        Ok(()) => true,
                        Err(e) => {
                            tracing::warn!(memory = old, error = %e, "vector index not saved; kept loaded");
                            false
                        }
                    }
                }
                Err(_) => false,
            };
            if !viewed {
                loaded.push_back(old);
            }
        }
    }

    /// Writes every changed index to disk (at shutdown).
    pub fn save_all(&self) -> Result<(), IndexError> {
        for (m, _) in self.open.all() {
            self.save(&m)?;
        }
        Ok(())
    }

    /// Throws the memory's index away and builds it again from `pairs`, saved.
    pub fn rebuild<V: AsRef<[f32]>>(
        &self,
        memory: &str,
        pairs: impl IntoIterator<Item = (u64, V)>,
    ) -> Result<(), IndexError> {
        let mut fresh = Handle::empty(self.dim)?;
        for (key, v) in pairs {
            fresh.add(key, v.as_ref())?;
        }
        fresh.dirty = true;
        fresh.save(&self.files(&ensure_memory_dir(&self.root, memory)?))?;
        self.open.replace(memory, fresh);
        self.keep_loaded(memory);
        Ok(())
    }

    /// Forgets the memory's vector index, in memory and on disk.
    pub fn drop_memory(&self, memory: &str) -> Result<(), IndexError> {
        self.open.remove(memory, |h| {
            // Closed before its files go (unless a search still holds it); the files go, so
            // there is nothing to go back to a view of.
            drop(h);
            self.loaded
                .lock()
                .unwrap_or_else(|e| e.into_inner())
                .retain(|m| m != memory);
            let files = self.files(&self.dir(memory));
            for f in [files.index, files.keys] {
                match std::fs::remove_file(&f) {
                    Ok(()) => {}
                    Err(e) if e.kind() == std::io::ErrorKind::NotFound => {}
                    Err(e) => return Err(IndexError::io(&f, e)),
                }
            }
            Ok(())
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const DIM: usize = 8;

    /// Runs `f` with a file of the test's own at descriptor 0 (where usearch's mapping of a
    /// path it cannot open strikes, see the module doc) and says whether descriptor 0 is still
    /// that file afterwards (not closed, nor closed and taken by another file). One at a time:
    /// descriptor 0 is the process's.
    fn descriptor_0_survives(f: impl FnOnce()) -> bool {
        use std::os::fd::AsRawFd;
        use std::os::unix::fs::MetadataExt;
        static ONE: Mutex<()> = Mutex::new(());
        let _one = ONE.lock().unwrap_or_else(|e| e.into_inner());
        let dir = tempfile::tempdir().unwrap();
        let ours = std::fs::File::create(dir.path().join("ours")).unwrap();
        let (dev, ino) = (ours.metadata().unwrap().dev(), ours.metadata().unwrap().ino());
        // SAFETY: dup/dup2/fstat/close on descriptors this test owns (0 is put back after).
        let stdin = unsafe { libc::dup(0) };
        assert_eq!(unsafe { libc::dup2(ours.as_raw_fd(), 0) }, 0);
        f();
        let mut st: libc::stat = unsafe { std::mem::zeroed() };
        let open = unsafe { libc::fstat(0, &mut st) } == 0 && st.st_dev == dev && st.st_ino == ino;
        unsafe {
            if stdin >= 0 {
                libc::dup2(stdin, 0);
                libc::close(stdin);
            } else {
                libc::close(0);
            }
        }
        open
    }

    #[test]
    fn a_view_of_a_missing_file_fails_and_closes_no_other_descriptor() {
        let dir = tempfile::tempdir().unwrap();
        let missing = dir.path().join("missing.usearch");
        assert!(descriptor_0_survives(|| {
            assert!(view_of(&missing.to_string_lossy(), DIM).is_err());
        }));
    }

    #[test]
    fn a_dropped_memory_is_not_taken_back_to_a_view_of_its_deleted_file() {
        let dir = tempfile::tempdir().unwrap();
        let v = Vectors::open(dir.path(), DIM, "vectors", 64).unwrap();
        assert!(descriptor_0_survives(|| {
            for i in 0..LOADED_INDEXES {
                v.add(&format!("m{i}"), 1, &unit(i, 0.0)).unwrap();
                v.save(&format!("m{i}")).unwrap();
            }
            // m0 is loaded with a saved file; dropped, then opened again empty (no file).
            v.drop_memory("m0").unwrap();
            assert!(v.search("m0", &unit(0, 0.0), 1).unwrap().is_empty());
            // Later saves send the least recently written back to views: never m0's.
            for i in LOADED_INDEXES..3 * LOADED_INDEXES {
                v.add(&format!("m{i}"), 1, &unit(i, 0.0)).unwrap();
                v.save(&format!("m{i}")).unwrap();
            }
        }));
        assert!(v.ids("m0").unwrap().is_empty());
        assert_eq!(v.ids("m5").unwrap(), vec![1]);
    }

    /// A unit vector pointing mostly along axis `i`, tilted by `t`.
    fn unit(i: usize, t: f32) -> Vec<f32> {
        let mut v = [0.0; DIM];
        v[i % DIM] = 1.0;
        v[(i + 1) % DIM] = t;
        let n = v.iter().map(|x| x * x).sum::<f32>().sqrt();
        v.iter().map(|x| x / n).collect()
    }

    fn keys(hits: &[(u64, f32)]) -> Vec<u64> {
        hits.iter().map(|h| h.0).collect()
    }

    #[test]
    fn nearest_first_with_cosine_scores() {
        let dir = tempfile::tempdir().unwrap();
        let v = Vectors::open(dir.path(), DIM, "vectors", 8).unwrap();
        v.add("m", 10, &unit(0, 0.0)).unwrap();
        v.add("m", 11, &unit(0, 0.5)).unwrap();
        v.add("m", 12, &unit(3, 0.0)).unwrap();
        let hits = v.search("m", &unit(0, 0.1), 3).unwrap();
        assert_eq!(keys(&hits), vec![10, 11, 12]);
        assert!(hits[0].1 > 0.99 && hits[2].1.abs() < 0.01, "{hits:?}");
    }

    #[test]
    fn exact_cosines_of_chosen_keys_and_a_search_among_some_keys() {
        let dir = tempfile::tempdir().unwrap();
        let v = Vectors::open(dir.path(), DIM, "vectors", 8).unwrap();
        for (k, (i, tilt)) in [(10, (0, 0.0)), (11, (0, 0.5)), (12, (3, 0.0)), (13, (0, 0.05))] {
            v.add("m", k, &unit(i, tilt)).unwrap();
        }
        let check = |v: &Vectors| {
            // Only the keys asked for, nearest first; one the index lacks is left out.
            let c = v.cosines("m", &unit(0, 0.0), &[12, 11, 99, 10]).unwrap();
            assert_eq!(keys(&c), vec![10, 11, 12], "{c:?}");
            assert!((c[0].1 - 1.0).abs() < 0.01 && c[2].1.abs() < 0.01, "{c:?}");
            let among = v.search_where("m", &unit(0, 0.0), 2, |k| k != 10).unwrap();
            assert_eq!(keys(&among), vec![13, 11], "{among:?}");
        };
        check(&v);
        // The same from a view of the saved file.
        v.save("m").unwrap();
        let reopened = Vectors::open(dir.path(), DIM, "vectors", 8).unwrap();
        check(&reopened);
    }

    #[test]
    fn a_search_in_one_memory_never_returns_another_memorys_vectors() {
        let dir = tempfile::tempdir().unwrap();
        let v = Vectors::open(dir.path(), DIM, "vectors", 8).unwrap();
        v.add("a", 1, &unit(0, 0.0)).unwrap();
        v.add("b", 2, &unit(0, 0.0)).unwrap();
        assert_eq!(keys(&v.search("a", &unit(0, 0.0), 10).unwrap()), vec![1]);
        assert_eq!(keys(&v.search("b", &unit(0, 0.0), 10).unwrap()), vec![2]);
        assert!(v.search("c", &unit(0, 0.0), 10).unwrap().is_empty());
    }

    #[test]
    fn two_stems_in_one_root_are_two_indexes() {
        let dir = tempfile::tempdir().unwrap();
        let (a, b) = (
            Vectors::open(dir.path(), DIM, "vectors", 8).unwrap(),
            Vectors::open(dir.path(), DIM, "entities", 8).unwrap(),
        );
        a.add("m", 1, &unit(0, 0.0)).unwrap();
        b.add("m", 2, &unit(0, 0.0)).unwrap();
        a.save("m").unwrap();
        b.save("m").unwrap();
        b.drop_memory("m").unwrap();
        let (a, b) = (
            Vectors::open(dir.path(), DIM, "vectors", 8).unwrap(),
            Vectors::open(dir.path(), DIM, "entities", 8).unwrap(),
        );
        assert_eq!(a.ids("m").unwrap(), vec![1], "dropping one index leaves the other");
        assert!(b.ids("m").unwrap().is_empty());
    }

    #[test]
    fn many_memories_stay_bounded_in_ram_and_unsaved_vectors_are_never_dropped() {
        let dir = tempfile::tempdir().unwrap();
        let v = Vectors::open(dir.path(), DIM, "vectors", 4).unwrap();
        // Saved ones are dropped from RAM past the bound and loaded again when used.
        for m in 0..10u64 {
            v.add(&format!("m{m}"), m, &unit(m as usize, 0.0)).unwrap();
            v.save(&format!("m{m}")).unwrap();
        }
        assert!(v.open.len() <= 4, "{} open", v.open.len());
        for m in 0..10u64 {
            assert_eq!(
                keys(&v.search(&format!("m{m}"), &unit(m as usize, 0.0), 3).unwrap()),
                vec![m]
            );
        }
        // Ones with unsaved vectors stay open until saved; only the few most recently written
        // hold unsaved vectors (an older one is saved as it leaves them), none is lost.
        for m in 10..16u64 {
            v.add(&format!("m{m}"), m, &unit(m as usize, 0.0)).unwrap();
        }
        let unsaved = (10..16u64).filter(|m| v.unsaved(&format!("m{m}"))).count();
        assert!(unsaved <= LOADED_INDEXES, "{unsaved} unsaved");
        for m in 10..16u64 {
            assert_eq!(v.ids(&format!("m{m}")).unwrap(), vec![m], "m{m} kept its vector");
        }
        v.save_all().unwrap();
        v.add("m0", 100, &unit(0, 0.5)).unwrap();
        v.save("m0").unwrap();
        v.search("m1", &unit(1, 0.0), 1).unwrap();
        assert!(v.open.len() <= 4, "{} open once saved", v.open.len());
    }

    #[test]
    fn grows_past_its_first_capacity_replaces_and_removes() {
        let dir = tempfile::tempdir().unwrap();
        let v = Vectors::open(dir.path(), DIM, "vectors", 8).unwrap();
        for k in 0..1000u64 {
            v.add("m", k, &unit(k as usize, (k % 10) as f32 / 10.0)).unwrap();
        }
        assert_eq!(v.ids("m").unwrap().len(), 1000);
        // Replacing a key moves it; removing one takes it out of results.
        v.add("m", 5, &unit(7, 0.0)).unwrap();
        v.remove("m", 7).unwrap();
        let near7: Vec<u64> = keys(&v.search("m", &unit(7, 0.0), 200).unwrap());
        assert!(near7.contains(&5) && !near7.contains(&7));
        assert_eq!(v.ids("m").unwrap().len(), 999);
        assert!(v.add("m", 1, &[1.0, 0.0]).is_err(), "a wrong dimension is refused");
        assert!(v.search("m", &[1.0], 3).is_err());
    }

    #[test]
    fn a_job_saves_only_once_an_eighth_of_the_index_changed_and_an_older_written_index_is_saved_as_it_leaves() {
        let dir = tempfile::tempdir().unwrap();
        let v = Vectors::open(dir.path(), DIM, "vectors", 16).unwrap();
        let file = |m: &str| v.files(&v.dir(m)).index;
        let modified = |m: &str| std::fs::metadata(file(m)).unwrap().modified().unwrap();
        // Small: saved every SAVE_MIN_CHANGES changes.
        for k in 0..(SAVE_MIN_CHANGES as u64 - 1) {
            v.add("m", k, &unit(k as usize, 0.1)).unwrap();
        }
        v.save_if_due("m").unwrap();
        assert!(v.unsaved("m") && !file("m").exists());
        v.add("m", 1_000, &unit(1, 0.2)).unwrap();
        v.save_if_due("m").unwrap();
        assert!(!v.unsaved("m") && file("m").exists());
        // Larger: an eighth of its size.
        for k in 0..1_000u64 {
            v.add("m", 2_000 + k, &unit(k as usize, 0.3)).unwrap();
            v.save_if_due("m").unwrap();
        }
        v.save("m").unwrap();
        let size = v.ids("m").unwrap().len();
        for k in 0..(size / SAVE_FRACTION - 1) as u64 {
            v.add("m", 10_000 + k, &unit(k as usize, 0.4)).unwrap();
        }
        let before = modified("m");
        v.save_if_due("m").unwrap();
        assert!(v.unsaved("m"), "{size} vectors: not due yet");
        assert_eq!(modified("m"), before);
        // Indexes written after it push it out of the loaded few: it is saved as it goes.
        for i in 0..LOADED_INDEXES {
            v.add(&format!("other{i}"), 1, &unit(1, 0.5)).unwrap();
        }
        assert!(!v.unsaved("m"), "saved on leaving the loaded indexes");
        let reopened = Vectors::open(dir.path(), DIM, "vectors", 16).unwrap();
        assert_eq!(reopened.ids("m").unwrap(), v.ids("m").unwrap());
    }

    #[test]
    fn save_and_load_round_trip_gives_the_same_results() {
        let dir = tempfile::tempdir().unwrap();
        let queries: Vec<Vec<f32>> = (0..5).map(|i| unit(i, 0.3)).collect();
        let before: Vec<_> = {
            let v = Vectors::open(dir.path(), DIM, "vectors", 8).unwrap();
            for k in 0..100u64 {
                v.add("m", k, &unit(k as usize, k as f32 / 100.0)).unwrap();
            }
            v.save_all().unwrap();
            queries.iter().map(|q| v.search("m", q, 10).unwrap()).collect()
        };
        let v = Vectors::open(dir.path(), DIM, "vectors", 8).unwrap();
        // Opened ahead of a search (while a query embeds), then searched.
        assert!(!v.is_open("m"));
        v.open_memory("m").unwrap();
        assert!(v.is_open("m"));
        assert_eq!(v.ids("m").unwrap(), (0..100).collect::<Vec<_>>());
        let after: Vec<_> = queries.iter().map(|q| v.search("m", q, 10).unwrap()).collect();
        assert_eq!(before, after, "searched in a view of the file");
        // A view is loaded at the first change; then it grows, loses keys and saves.
        v.add("m", 500, &unit(2, 0.0)).unwrap();
        v.remove("m", 3).unwrap();
        assert_eq!(v.ids("m").unwrap().len(), 100);
        assert_eq!(v.search("m", &unit(2, 0.0), 1).unwrap()[0].0, 500);
        v.save_all().unwrap();
        let v = Vectors::open(dir.path(), DIM, "vectors", 8).unwrap();
        let ids = v.ids("m").unwrap();
        assert!(ids.contains(&500) && !ids.contains(&3) && ids.len() == 100, "{ids:?}");
        let found: Vec<u64> = v
            .search("m", &unit(3, 0.03), 100)
            .unwrap()
            .iter()
            .map(|h| h.0)
            .collect();
        assert!(!found.contains(&3) && found.contains(&500), "{found:?}");
    }

    #[test]
    fn only_the_latest_written_indexes_stay_loaded_the_others_go_back_to_views() {
        let dir = tempfile::tempdir().unwrap();
        let v = Vectors::open(dir.path(), DIM, "vectors", 16).unwrap();
        let viewed = |m: &str| v.handle(m).unwrap().lock().unwrap().viewed.is_some();
        let memories: Vec<String> = (0..LOADED_INDEXES + 2).map(|i| format!("m{i}")).collect();
        let mut before = Vec::new();
        for (i, m) in memories.iter().enumerate() {
            for k in 0..50u64 {
                v.add(m, k, &unit(k as usize + i, 0.1)).unwrap();
            }
            assert!(!viewed(m), "loaded to change");
            before.push(v.search(m, &unit(3, 0.1), 10).unwrap());
            v.save(m).unwrap();
        }
        for (i, m) in memories.iter().enumerate() {
            assert_eq!(viewed(m), i < 2, "{m}");
            assert_eq!(v.search(m, &unit(3, 0.1), 10).unwrap(), before[i], "{m}");
        }
        // A view changes again: loaded, saved, and the file holds what it then shows.
        v.remove("m0", 0).unwrap();
        v.add("m0", 99, &unit(7, 0.0)).unwrap();
        v.save("m0").unwrap();
        assert!(!viewed("m0") && viewed("m2"), "m0 written last, m2 now the oldest");
        let ids = v.ids("m0").unwrap();
        assert!(ids.len() == 50 && ids.contains(&99) && !ids.contains(&0), "{ids:?}");
        let reopened = Vectors::open(dir.path(), DIM, "vectors", 16).unwrap();
        assert_eq!(reopened.ids("m0").unwrap(), ids);
    }

    #[test]
    fn an_index_of_another_dimension_or_with_wrong_keys_counts_as_empty() {
        let dir = tempfile::tempdir().unwrap();
        {
            let v = Vectors::open(dir.path(), DIM, "vectors", 8).unwrap();
            v.add("m", 1, &unit(0, 0.0)).unwrap();
            v.add("n", 1, &unit(0, 0.0)).unwrap();
            v.save_all().unwrap();
        }
        let v = Vectors::open(dir.path(), 16, "vectors", 8).unwrap();
        assert!(v.ids("m").unwrap().is_empty(), "a model change makes the index stale");
        std::fs::write(memory_dir(dir.path(), "n").join("vectors.keys"), 9u64.to_le_bytes()).unwrap();
        let v = Vectors::open(dir.path(), DIM, "vectors", 8).unwrap();
        assert!(v.ids("n").unwrap().is_empty(), "keys that do not match are not trusted");
        assert_eq!(v.ids("m").unwrap(), vec![1]);
    }

    #[test]
    fn keys_written_with_another_index_file_are_checked_key_by_key() {
        let dir = tempfile::tempdir().unwrap();
        let mdir = memory_dir(dir.path(), "m");
        let (index, keys) = (mdir.join("vectors.usearch"), mdir.join("vectors.keys"));
        let v = Vectors::open(dir.path(), DIM, "vectors", 8).unwrap();
        v.add("m", 1, &unit(0, 0.0)).unwrap();
        v.add("m", 2, &unit(1, 0.0)).unwrap();
        v.save("m").unwrap();
        let first_index = std::fs::read(&index).unwrap();
        // The same number of keys, one of them another: only a lookup tells the files apart.
        v.remove("m", 1).unwrap();
        v.add("m", 3, &unit(2, 0.0)).unwrap();
        v.save("m").unwrap();
        drop(v);
        let reopened = Vectors::open(dir.path(), DIM, "vectors", 8).unwrap();
        assert_eq!(
            reopened.ids("m").unwrap(),
            vec![2, 3],
            "a keys file naming its own index is trusted"
        );
        drop(reopened);
        // A crash between the renames: the new keys file beside the index file before it. The
        // old file is written beside the current one and renamed over it, as a save does, so it
        // is another inode (removed first and written again, the file system may give it the
        // inode just freed, and with the same length it would be the same file by identity).
        let older = mdir.join("vectors.usearch.older");
        std::fs::write(&older, first_index).unwrap();
        std::fs::rename(&older, &index).unwrap();
        let stamped = std::fs::read(&keys).unwrap();
        assert_eq!(stamped.len(), 8 * (4 + 2), "the index file's identity, then the keys");
        let v = Vectors::open(dir.path(), DIM, "vectors", 8).unwrap();
        assert!(
            v.ids("m").unwrap().is_empty(),
            "keys of another index file are not trusted"
        );
    }

    #[test]
    fn rebuild_after_the_files_are_deleted_gives_the_same_results() {
        let dir = tempfile::tempdir().unwrap();
        let pairs: Vec<(u64, Vec<f32>)> = (0..64u64).map(|k| (k, unit(k as usize, k as f32 / 64.0))).collect();
        let queries: Vec<Vec<f32>> = (0..4).map(|i| unit(i * 2, 0.2)).collect();
        let before: Vec<_> = {
            let v = Vectors::open(dir.path(), DIM, "vectors", 8).unwrap();
            for (k, x) in &pairs {
                v.add("m", *k, x).unwrap();
            }
            v.save("m").unwrap();
            queries.iter().map(|q| keys(&v.search("m", q, 5).unwrap())).collect()
        };
        std::fs::remove_dir_all(memory_dir(dir.path(), "m")).unwrap();
        let v = Vectors::open(dir.path(), DIM, "vectors", 8).unwrap();
        let truth: Vec<u64> = pairs.iter().map(|p| p.0).collect();
        assert_eq!(super::super::diff(&v.ids("m").unwrap(), &truth).missing, truth);
        v.rebuild("m", pairs.iter().map(|(k, x)| (*k, x.as_slice()))).unwrap();
        let after: Vec<_> = queries.iter().map(|q| keys(&v.search("m", q, 5).unwrap())).collect();
        assert_eq!(before, after);
        // And the rebuilt index was saved: a fresh open sees it.
        let v = Vectors::open(dir.path(), DIM, "vectors", 8).unwrap();
        assert_eq!(v.ids("m").unwrap(), truth);
    }
}
