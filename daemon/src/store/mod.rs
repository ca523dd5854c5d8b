//! The store: one LMDB environment with named tables, the one source of truth.
//!
//! Only this module imports lmdb-rkv. Callers see tables, byte keys and serde values, and run
//! their reads and writes inside closures: a transaction never outlives the closure, so it
//! never crosses an `.await` and never leaves its thread. Every write closure is one
//! transaction; when the map is full the closure is run again on a grown map, so a write is
//! never lost to MDB_MAP_FULL.

pub mod backup;
mod group;
pub mod keys;

use std::path::{Path, PathBuf};
use std::sync::RwLock;

use lmdb::{Cursor, Database, DatabaseFlags, Environment, EnvironmentFlags, Transaction, WriteFlags};
use serde::de::DeserializeOwned;
use serde::Serialize;

/// The on-disk schema this build writes. A store written by a newer schema is refused.
/// 2: values of [`COMPRESS_FROM`] bytes or more may be stored compressed ([`encode`]). A
/// version-1 store is read as it is and marked 2 when opened (an older recalld then refuses it
/// instead of failing on its first compressed value).
/// 3: the per-memory `decisions` table (an older recalld would leave its entries behind when
/// it forgets a memory). Older stores are read as they are and marked 3.
/// 4: embeddings stored as 16-bit floats in one binary value (`records::compact_vector`); the
/// arrays of 32-bit floats written before are read as they are, and the store is marked 4.
/// 5: the per-memory `prints` table (where each history message's fingerprint stands); a
/// memory stored before it gets its prints the first time its whole history is read.
/// 6: a recall block may be stored without the excerpts that end it, with the numbers of their
/// passages (`state::write_recall`); an older recalld would show such a block cut short.
/// Blocks stored before are read as they are.
/// 7: a stored message may be stored as it came (`raw` and its format) without the text read
/// from it, which is read again when it is loaded (`records::stored_body`); an older recalld
/// would fail to read it. Messages stored before are read as they are. The versions of a
/// memory's instructions moved from its record to table `instructions` (a record stored before
/// keeps them until its next write moves them). Recall blocks not distilled yet are in table
/// `fresh_recall` (those stored before in `recall` are read there until they are rewritten).
/// Embeddings are stored as one byte per dimension and a scale (`records::compact_vector`);
/// the 16-bit floats written before are read as they are.
/// 8: a passage is stored without its text, which is read back from its messages
/// (`state::read_passage`); an older recalld would fail to read it. Passages stored before keep
/// their text and are read as they are.
/// 9: values from 32 bytes are compressed against a dictionary of the records' skeletons
/// ([`encode`]); an older recalld would fail to read them. Values stored before are read as
/// they are.
pub const SCHEMA_VERSION: u32 = 9;
const SCHEMA_KEY: &[u8] = b"schema_version";

/// Named tables. Keys are built by [`keys`]; values are MessagePack maps.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Table {
    /// Store-wide records: schema version, model identity.
    Meta,
    /// memory id → memory record.
    Memories,
    /// memory id + seq → stored message.
    Messages,
    /// memory id + episode number → episode.
    Episodes,
    /// memory id + episode + trace number → trace.
    Traces,
    /// memory id + fact number → fact.
    Facts,
    /// memory id + job number → queued background job.
    Jobs,
    /// memory id + seq of the user message it precedes → the recall block stored with it, once
    /// distilled.
    Recall,
    /// memory id + seq of the user message it precedes → a recall block not distilled yet. It
    /// moves to `recall` when distilled, a fraction of its size: LMDB does not merge the pages
    /// of values rewritten smaller in place, so one table for both stayed a tenth full.
    FreshRecall,
    /// memory id + first seq of a closed unit → its boundary scores.
    Units,
    /// memory id + entity number → entity (a node of the memory's graph).
    Entities,
    /// memory id + normalised name → entity number (every name an entity was written under).
    Aliases,
    /// memory id + entity + fact → the fact's other entity (each fact is an edge, stored from both ends).
    Edges,
    /// memory id + kind + number → embedding with its model (facts, entities, passages).
    Vectors,
    /// memory id + passage number → a passage of a sealed episode (whole units, for recall).
    Passages,
    /// agent id → the agent's scope settings and counters (store-wide: not a memory's).
    Agents,
    /// agent id + number → a fact of the agent's scope (episodic or semantic).
    ScopeFacts,
    /// agent id + time (µs) + number → an audit entry (append-only).
    Audit,
    /// agent id + user → the user's hot state (recent turns across conversations, core blocks).
    Hot,
    /// agent id + number → a curated document of the agent's knowledge base, chunked.
    Documents,
    /// agent id + digest of two facts' texts → whether the judge said the newer restates the
    /// older (each pair is asked once; a changed text is a new pair).
    Verdicts,
    /// agent id + memory id + NUL + seq → a request and the tools called for it (procedural tier).
    Routines,
    /// memory id + decision number → what one decorate decided (the latest 32: a diagnostic
    /// log for `inspect`).
    Decisions,
    /// memory id + fingerprint + seq → nothing: where each message of the active history
    /// stands, so a request can be lined up with history that is not loaded.
    Prints,
    /// memory id + version number → one version of the client's instructions (kept out of the
    /// memory record, which every op rewrites).
    Instructions,
    /// memory id + first day + passage number → last day: a stretch of days a passage speaks
    /// of other than the day it was said ("last month", "yesterday"), days since 1970, for
    /// recall's time search.
    Mentions,
}

impl Table {
    pub const ALL: [Table; 26] = [
        Table::Meta,
        Table::Memories,
        Table::Messages,
        Table::Episodes,
        Table::Traces,
        Table::Facts,
        Table::Jobs,
        Table::Recall,
        Table::FreshRecall,
        Table::Units,
        Table::Entities,
        Table::Aliases,
        Table::Edges,
        Table::Vectors,
        Table::Passages,
        Table::Agents,
        Table::ScopeFacts,
        Table::Audit,
        Table::Hot,
        Table::Documents,
        Table::Verdicts,
        Table::Routines,
        Table::Decisions,
        Table::Prints,
        Table::Instructions,
        Table::Mentions,
    ];

    /// The table's name in LMDB (and in receipts).
    pub fn name(self) -> &'static str {
        match self {
            Table::Meta => "meta",
            Table::Memories => "memories",
            Table::Messages => "messages",
            Table::Episodes => "episodes",
            Table::Traces => "traces",
            Table::Facts => "facts",
            Table::Jobs => "jobs",
            Table::Recall => "recall",
            Table::FreshRecall => "fresh_recall",
            Table::Units => "units",
            Table::Entities => "entities",
            Table::Aliases => "aliases",
            Table::Edges => "edges",
            Table::Vectors => "vectors",
            Table::Passages => "passages",
            Table::Agents => "agents",
            Table::ScopeFacts => "scope_facts",
            Table::Audit => "audit",
            Table::Hot => "hot",
            Table::Documents => "documents",
            Table::Verdicts => "verdicts",
            Table::Routines => "routines",
            Table::Decisions => "decisions",
            Table::Prints => "prints",
            Table::Instructions => "instructions",
            Table::Mentions => "mentions",
        }
    }

    /// How a memory's entries are keyed here: the memory's own key, every key under its
    /// prefix, or none (store-wide). Tables added later are per-memory by prefix unless named
    /// here, so `forget_memory` covers them without a change.
    fn keyed_by_memory(self) -> MemoryKeying {
        match self {
            // Keyed by agent: a forgotten memory's scope facts are removed by `scopes`.
            Table::Meta
            | Table::Agents
            | Table::ScopeFacts
            | Table::Audit
            | Table::Hot
            | Table::Documents
            | Table::Verdicts
            | Table::Routines => MemoryKeying::None,
            Table::Memories => MemoryKeying::Exact,
            _ => MemoryKeying::Prefix,
        }
    }

    fn index(self) -> usize {
        Table::ALL
            .iter()
            .position(|t| *t == self)
            .expect("every table is in ALL")
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum MemoryKeying {
    None,
    Exact,
    Prefix,
}

#[derive(Debug, thiserror::Error)]
pub enum StoreError {
    #[error("cannot create data directory {path}: {source}")]
    CreateDir { path: PathBuf, source: std::io::Error },
    #[error("lmdb: {0}")]
    Lmdb(#[from] lmdb::Error),
    /// LMDB reports a short write (the disk filled) as an I/O error; this says which it was.
    #[error("no space left for the store at {path} ({free} bytes free); lmdb: {source}")]
    DiskFull {
        path: PathBuf,
        free: u64,
        source: lmdb::Error,
    },
    #[error(
        "the data at {path} has schema version {found}; this recalld reads up to {supported}: \
         run a newer recalld or point --data elsewhere"
    )]
    NewerSchema { path: PathBuf, found: u32, supported: u32 },
    #[error("stored value in {table} cannot be decoded: {message}")]
    Decode { table: &'static str, message: String },
    #[error("value for {table} cannot be encoded: {message}")]
    Encode { table: &'static str, message: String },
    #[error("key of {len} bytes is out of lmdb's range (1 to 511)")]
    KeySize { len: usize },
    #[error("{0}")]
    Copy(String),
}

#[derive(Debug, Clone)]
pub struct StoreOptions {
    /// Initial map size in bytes; it grows by doubling when full.
    pub map_size: usize,
    pub sync: Durability,
}

impl Default for StoreOptions {
    fn default() -> Self {
        // Address space, not disk: the file grows with use.
        StoreOptions {
            map_size: 1 << 30,
            sync: Durability::default(),
        }
    }
}

/// What a commit waits for before it returns.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, serde::Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Durability {
    /// The commit's pages are on disk; the page that points at them (LMDB's meta page) goes
    /// with the next commit. A crash of the daemon loses nothing; a power loss or a kernel
    /// crash may undo the last commit, never more and never corrupting (LMDB's
    /// `MDB_NOMETASYNC`). One flush per commit instead of two: on agent traffic report's
    /// median went from 0.78 to 0.68 ms on an idle disk and from 1.3 to 0.8 with a build
    /// writing beside it (docs/benchmarks.md).
    #[default]
    Data,
    /// Both flushed at every commit: a power loss loses nothing acknowledged.
    Full,
}

pub struct Store {
    env: Environment,
    dbs: Vec<Database>,
    /// Readers and writers hold it shared; growing the map holds it alone (LMDB requires no
    /// open transaction while the map is resized).
    resize: RwLock<()>,
    path: PathBuf,
    /// Writes waiting to share the next commit.
    group: group::Group,
}

impl std::fmt::Debug for Store {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Store").field("path", &self.path).finish()
    }
}

impl Store {
    /// Opens (creating if needed) the store in `dir`, checking the schema version.
    pub fn open(dir: &Path, opts: &StoreOptions) -> Result<Store, StoreError> {
        std::fs::create_dir_all(dir).map_err(|source| StoreError::CreateDir {
            path: dir.to_path_buf(),
            source,
        })?;
        let env = Environment::new()
            .set_max_dbs(Table::ALL.len() as u32 + 4)
            .set_map_size(opts.map_size)
            .set_max_readers(512)
            // Read transactions are opened and closed on whichever blocking thread runs them.
            .set_flags(match opts.sync {
                Durability::Data => EnvironmentFlags::NO_TLS | EnvironmentFlags::NO_META_SYNC,
                Durability::Full => EnvironmentFlags::NO_TLS,
            })
            .open_with_permissions(dir, 0o600)?;
        let mut dbs = Vec::with_capacity(Table::ALL.len());
        for table in Table::ALL {
            dbs.push(env.create_db(Some(table.name()), DatabaseFlags::empty())?);
        }
        let store = Store {
            env,
            dbs,
            resize: RwLock::new(()),
            path: dir.to_path_buf(),
            group: group::Group::default(),
        };
        store.check_schema()?;
        Ok(store)
    }

    pub fn path(&self) -> &Path {
        &self.path
    }

    fn check_schema(&self) -> Result<(), StoreError> {
        let found: Option<u32> = self.read(|r| r.get(Table::Meta, SCHEMA_KEY))?;
        match found {
            Some(v) if v > SCHEMA_VERSION => Err(StoreError::NewerSchema {
                path: self.path.clone(),
                found: v,
                supported: SCHEMA_VERSION,
            }),
            Some(SCHEMA_VERSION) => Ok(()),
            Some(_) | None => self.write(|w| w.put(Table::Meta, SCHEMA_KEY, &SCHEMA_VERSION)),
        }
    }

    fn db(&self, table: Table) -> Database {
        self.dbs[table.index()]
    }

    /// Runs `f` in one read transaction.
    pub fn read<T>(&self, f: impl FnOnce(&Reader<'_>) -> Result<T, StoreError>) -> Result<T, StoreError> {
        let _shared = self.resize.read().unwrap_or_else(|e| e.into_inner());
        let txn = self.env.begin_ro_txn()?;
        let reader = Reader { store: self, txn: &txn };
        f(&reader)
    }

    /// Runs `f` in a write transaction and commits it; returns once it is committed. On
    /// MDB_MAP_FULL the transaction is dropped, the map doubled and `f` run again. Writes
    /// arriving while another commits share the next transaction (`group`), each in a nested
    /// transaction of its own: what `f` writes commits whole or not at all, whatever the others
    /// do. `f` may run more than once (when the map grows, or its group's commit fails and each
    /// write is tried alone), and on another thread than the caller's, hence `Send`.
    pub fn write<T: Send>(
        &self,
        f: impl FnMut(&mut Writer<'_>) -> Result<T, StoreError> + Send,
    ) -> Result<T, StoreError> {
        let mut job = group::Closure { f, value: None };
        self.group.join(&mut job, |batch| self.commit_group(batch))?;
        Ok(job.value.take().expect("a write that succeeded keeps its value"))
    }

    /// Transactions that held more than one caller's writes, the writes they held, and every
    /// write since the store was opened.
    pub fn group_commits(&self) -> (u64, u64, u64) {
        self.group.counts()
    }

    /// Commits a group: one job as it always ran (a transaction of its own); several in one
    /// transaction, each in a nested one. When that transaction cannot commit (a full disk),
    /// each job is run again alone so each gets its own error.
    fn commit_group(&self, batch: &mut [(u64, group::Queued)]) -> Vec<(u64, group::Outcome)> {
        use group::Outcome;
        if let [(ticket, job)] = batch {
            return vec![(*ticket, self.commit_alone(job))];
        }
        loop {
            let attempt = {
                let _shared = self.resize.read().unwrap_or_else(|e| e.into_inner());
                self.env.begin_rw_txn().map_err(StoreError::from).and_then(|mut txn| {
                    let mut outcomes = Vec::with_capacity(batch.len());
                    for (ticket, job) in batch.iter_mut() {
                        let nested = txn.begin_nested_txn()?;
                        let mut writer = Writer {
                            store: self,
                            txn: nested,
                        };
                        let outcome = match job.run(&mut writer) {
                            Outcome::Done(Ok(())) => Outcome::Done(writer.txn.commit().map_err(StoreError::from)),
                            other => other, // its nested transaction is dropped: undone
                        };
                        if let Outcome::Done(Err(StoreError::Lmdb(lmdb::Error::MapFull))) = outcome {
                            return Err(StoreError::Lmdb(lmdb::Error::MapFull));
                        }
                        outcomes.push((*ticket, outcome));
                    }
                    txn.commit()?;
                    Ok(outcomes)
                })
            };
            match attempt {
                Ok(outcomes) => return outcomes,
                Err(StoreError::Lmdb(lmdb::Error::MapFull)) => {
                    if let Err(e) = self.grow() {
                        // Each tried alone says for itself what the store lacks.
                        tracing::warn!(error = %e, "cannot grow the store's map for a group commit");
                        break;
                    }
                }
                Err(e) => {
                    tracing::warn!(error = %e, writes = batch.len(), "a group commit failed; its writes are tried one by one");
                    break;
                }
            }
        }
        batch
            .iter_mut()
            .map(|(ticket, job)| (*ticket, self.commit_alone(job)))
            .collect()
    }

    /// One job in a transaction of its own (the map grown when full).
    fn commit_alone(&self, job: &mut group::Queued) -> group::Outcome {
        use group::Outcome;
        loop {
            let attempt = {
                let _shared = self.resize.read().unwrap_or_else(|e| e.into_inner());
                match self.env.begin_rw_txn() {
                    Err(e) => Outcome::Done(Err(e.into())),
                    Ok(txn) => {
                        let mut writer = Writer { store: self, txn };
                        match job.run(&mut writer) {
                            Outcome::Done(Ok(())) => Outcome::Done(writer.txn.commit().map_err(StoreError::from)),
                            other => other,
                        }
                    }
                }
            };
            match attempt {
                Outcome::Done(Err(StoreError::Lmdb(lmdb::Error::MapFull))) => {
                    if let Err(e) = self.grow() {
                        return Outcome::Done(Err(e));
                    }
                }
                Outcome::Done(Err(StoreError::Lmdb(e @ lmdb::Error::Other(libc::EIO | libc::ENOSPC)))) => {
                    return Outcome::Done(Err(match free_bytes(&self.path) {
                        Some(free) if free < DISK_FULL_BYTES => StoreError::DiskFull {
                            path: self.path.clone(),
                            free,
                            source: e,
                        },
                        _ => StoreError::Lmdb(e),
                    }));
                }
                other => return other,
            }
        }
    }

    fn grow(&self) -> Result<(), StoreError> {
        let _alone = self.resize.write().unwrap_or_else(|e| e.into_inner());
        let current = self.env.info()?.map_size();
        let next = current.saturating_mul(2);
        tracing::info!(from = current, to = next, "store map full, growing");
        self.env.set_map_size(next)?;
        Ok(())
    }

    /// Flushes to disk (commits are already durable; this is for shutdown).
    pub fn sync(&self) -> Result<(), StoreError> {
        Ok(self.env.sync(true)?)
    }

    /// Bytes used by the data file.
    pub fn size_bytes(&self) -> u64 {
        std::fs::metadata(self.path.join("data.mdb"))
            .map(|m| m.len())
            .unwrap_or(0)
    }

    /// Current map size in bytes.
    pub fn map_size(&self) -> usize {
        self.env.info().map(|i| i.map_size()).unwrap_or(0)
    }
}

/// Free space below which a failed write is taken for a full disk (a write that did not fit
/// leaves less than one large value's room).
const DISK_FULL_BYTES: u64 = 16 << 20;

/// Bytes an unprivileged writer may still use on the filesystem holding `path`.
fn free_bytes(path: &Path) -> Option<u64> {
    use std::os::unix::ffi::OsStrExt;
    let c = std::ffi::CString::new(path.as_os_str().as_bytes()).ok()?;
    let mut st: libc::statvfs = unsafe { std::mem::zeroed() };
    // SAFETY: `c` is a NUL-terminated path and `st` a valid out-pointer for the call.
    if unsafe { libc::statvfs(c.as_ptr(), &mut st) } != 0 {
        return None;
    }
    Some(st.f_bavail as u64 * st.f_frsize as u64)
}

fn check_key(key: &[u8]) -> Result<(), StoreError> {
    if key.is_empty() || key.len() > 511 {
        return Err(StoreError::KeySize { len: key.len() });
    }
    Ok(())
}

/// Values at least this large are stored compressed when that saves space. With the
/// dictionary, a record of a few dozen bytes shrinks too: its field names and structure are in
/// the dictionary, so only its numbers and text are left.
const COMPRESS_FROM: usize = 32;
/// The first byte of a compressed value: 0xc1 is the one byte MessagePack never uses, so a
/// plain value can never be mistaken for a compressed one. The plain length follows (u32,
/// little-endian), then the LZ4 block.
const COMPRESSED: u8 = 0xc1;
/// Set in a compressed value's length when its block was compressed against [`DICTIONARY`]
/// (schema 9); values compressed before have it clear (no value comes near 2 GiB).
const WITH_DICTIONARY: u32 = 1 << 31;
/// Dictionary 1: the skeletons of the records each table holds (field and enum names and
/// structure, no text: `scripts/store-dictionary.py`, from a data directory written by the
/// agent traces). Part of the on-disk format: a value compressed against it is read only with
/// these same bytes, so it never changes (a better one would be a new dictionary, flagged
/// anew). On agent traffic (the odd entries of the data it was made from) it takes a stored
/// message from 405 to 299 bytes, an episode from 143 to 82, a trace from 69 to 38, a vector
/// from 441 to 404 (the built-in model's name).
const DICTIONARY: &[u8] = include_bytes!("dictionary-1.bin");

/// A value as stored: MessagePack with field names, LZ4-compressed against [`DICTIONARY`]
/// behind [`COMPRESSED`] when that makes it smaller.
fn encode<V: Serialize + ?Sized>(table: Table, value: &V) -> Result<Vec<u8>, StoreError> {
    let bytes = rmp_serde::to_vec_named(value).map_err(|e| StoreError::Encode {
        table: table.name(),
        message: e.to_string(),
    })?;
    if bytes.len() < COMPRESS_FROM || bytes.len() >= WITH_DICTIONARY as usize {
        return Ok(bytes);
    }
    // The block is compressed in place behind the marker and the length (no second copy).
    let mut packed = vec![0; 5 + lz4_flex::block::get_maximum_output_size(bytes.len())];
    packed[0] = COMPRESSED;
    packed[1..5].copy_from_slice(&(bytes.len() as u32 | WITH_DICTIONARY).to_le_bytes());
    match lz4_flex::block::compress_into_with_dict(&bytes, &mut packed[5..], DICTIONARY) {
        Ok(n) if 5 + n < bytes.len() => {
            packed.truncate(5 + n);
            Ok(packed)
        }
        _ => Ok(bytes),
    }
}

fn decode<V: DeserializeOwned>(table: Table, bytes: &[u8]) -> Result<V, StoreError> {
    let error = |message: String| StoreError::Decode {
        table: table.name(),
        message,
    };
    match bytes.split_first() {
        Some((&COMPRESSED, packed)) => {
            let (len, block) = packed
                .split_first_chunk::<4>()
                .ok_or_else(|| error("a compressed value without its length".into()))?;
            let len = u32::from_le_bytes(*len);
            let plain = if len & WITH_DICTIONARY != 0 {
                lz4_flex::block::decompress_with_dict(block, (len & !WITH_DICTIONARY) as usize, DICTIONARY)
            } else {
                // Schema 2 to 8: compressed without a dictionary.
                lz4_flex::block::decompress(block, len as usize)
            }
            .map_err(|e| error(e.to_string()))?;
            rmp_serde::from_slice(&plain).map_err(|e| error(e.to_string()))
        }
        _ => rmp_serde::from_slice(bytes).map_err(|e| error(e.to_string())),
    }
}

fn get_in<V: DeserializeOwned>(
    txn: &impl Transaction,
    db: Database,
    table: Table,
    key: &[u8],
) -> Result<Option<V>, StoreError> {
    check_key(key)?;
    match txn.get(db, &key) {
        Ok(bytes) => decode(table, bytes).map(Some),
        Err(lmdb::Error::NotFound) => Ok(None),
        Err(e) => Err(e.into()),
    }
}

/// Visits every entry whose key starts with `prefix`, in key order, until `f` returns false.
fn scan_in(
    txn: &impl Transaction,
    db: Database,
    prefix: &[u8],
    start: &[u8],
    mut f: impl FnMut(&[u8], &[u8]) -> Result<bool, StoreError>,
) -> Result<(), StoreError> {
    let mut cursor = txn.open_ro_cursor(db)?;
    let iter = if start.is_empty() {
        cursor.iter_start()
    } else {
        cursor.iter_from(start)
    };
    for item in iter {
        let (k, v) = item?;
        if !k.starts_with(prefix) {
            break;
        }
        if !f(k, v)? {
            break;
        }
    }
    Ok(())
}

/// Visits entries with `prefix` from the end backwards (newest first for sequence keys),
/// stepping a cursor back from the end of the prefix's range: a caller that wants the last few
/// of many (an entity's latest edges) reads those few.
fn scan_rev_in(
    txn: &impl Transaction,
    db: Database,
    prefix: &[u8],
    mut f: impl FnMut(&[u8], &[u8]) -> Result<bool, StoreError>,
) -> Result<(), StoreError> {
    // lmdb-rkv has no reverse iterator: the raw cursor operations (lmdb.h's MDB_cursor_op).
    use lmdb_sys::{MDB_LAST, MDB_PREV, MDB_SET_RANGE};
    let cursor = txn.open_ro_cursor(db)?;
    let mut item = match prefix_end(prefix) {
        Some(end) => match cursor.get(Some(&end), None, MDB_SET_RANGE) {
            Ok(_) => cursor.get(None, None, MDB_PREV),
            Err(lmdb::Error::NotFound) => cursor.get(None, None, MDB_LAST),
            Err(e) => Err(e),
        },
        None => cursor.get(None, None, MDB_LAST),
    };
    loop {
        match item {
            Ok((Some(k), v)) if k.starts_with(prefix) => {
                if !f(k, v)? {
                    break;
                }
            }
            Ok(_) | Err(lmdb::Error::NotFound) => break,
            Err(e) => return Err(e.into()),
        }
        item = cursor.get(None, None, MDB_PREV);
    }
    Ok(())
}

/// The first key after every key that starts with `prefix` (None when there is none: an
/// empty prefix, or one of 0xff bytes only).
fn prefix_end(prefix: &[u8]) -> Option<Vec<u8>> {
    let last = prefix.iter().rposition(|b| *b != 0xff)?;
    let mut end = prefix[..=last].to_vec();
    end[last] += 1;
    Some(end)
}

/// Read access inside one transaction.
pub struct Reader<'s> {
    store: &'s Store,
    txn: &'s lmdb::RoTransaction<'s>,
}

impl Reader<'_> {
    /// Entries in `table` and the bytes of its pages (branch, leaf and overflow): where the
    /// disk goes, for `stats`.
    pub fn table_size(&self, table: Table) -> Result<(u64, u64), StoreError> {
        let s = self.txn.stat(self.store.db(table))?;
        let pages = s.branch_pages() + s.leaf_pages() + s.overflow_pages();
        Ok((s.entries() as u64, pages as u64 * u64::from(s.page_size())))
    }

    pub fn get<V: DeserializeOwned>(&self, table: Table, key: &[u8]) -> Result<Option<V>, StoreError> {
        get_in(self.txn, self.store.db(table), table, key)
    }

    /// All values under `prefix`, in key order.
    pub fn scan<V: DeserializeOwned>(&self, table: Table, prefix: &[u8]) -> Result<Vec<V>, StoreError> {
        let mut out = Vec::new();
        self.visit(table, prefix, prefix, |_, v| {
            out.push(v);
            Ok(true)
        })?;
        Ok(out)
    }

    /// Visits values under `prefix` starting at key `start` (≥ prefix), until `f` says stop.
    pub fn visit<V: DeserializeOwned>(
        &self,
        table: Table,
        prefix: &[u8],
        start: &[u8],
        mut f: impl FnMut(&[u8], V) -> Result<bool, StoreError>,
    ) -> Result<(), StoreError> {
        scan_in(self.txn, self.store.db(table), prefix, start, |k, v| {
            f(k, decode(table, v)?)
        })
    }

    /// Visits the keys under `prefix` (values not decoded), until `f` says stop.
    pub fn visit_keys(
        &self,
        table: Table,
        prefix: &[u8],
        mut f: impl FnMut(&[u8]) -> Result<bool, StoreError>,
    ) -> Result<(), StoreError> {
        scan_in(self.txn, self.store.db(table), prefix, prefix, |k, _| f(k))
    }

    /// Visits values under `prefix` from the last key backwards, until `f` says stop.
    pub fn visit_rev<V: DeserializeOwned>(
        &self,
        table: Table,
        prefix: &[u8],
        mut f: impl FnMut(&[u8], V) -> Result<bool, StoreError>,
    ) -> Result<(), StoreError> {
        scan_rev_in(self.txn, self.store.db(table), prefix, |k, v| f(k, decode(table, v)?))
    }

    /// Entries that belong to `memory` in every table (its record included): what
    /// `forget_memory` would remove.
    pub fn memory_entries(&self, memory: &str) -> Result<u64, StoreError> {
        let mut n = 0;
        for table in Table::ALL {
            n += match table.keyed_by_memory() {
                MemoryKeying::None => 0,
                MemoryKeying::Exact => u64::from(
                    self.get::<serde::de::IgnoredAny>(table, &keys::memory(memory))?
                        .is_some(),
                ),
                MemoryKeying::Prefix => self.count(table, &keys::memory_prefix(memory))?,
            };
        }
        Ok(n)
    }

    /// Number of entries under `prefix`.
    pub fn count(&self, table: Table, prefix: &[u8]) -> Result<u64, StoreError> {
        if prefix.is_empty() {
            return Ok(self.table_size(table)?.0); // the whole table: LMDB keeps the count
        }
        let mut n = 0;
        scan_in(self.txn, self.store.db(table), prefix, prefix, |_, _| {
            n += 1;
            Ok(true)
        })?;
        Ok(n)
    }
}

/// Reading, inside a read or a write transaction alike.
pub trait Read {
    fn get<V: DeserializeOwned>(&self, table: Table, key: &[u8]) -> Result<Option<V>, StoreError>;
    fn scan<V: DeserializeOwned>(&self, table: Table, prefix: &[u8]) -> Result<Vec<V>, StoreError>;
}

impl Read for Reader<'_> {
    fn get<V: DeserializeOwned>(&self, table: Table, key: &[u8]) -> Result<Option<V>, StoreError> {
        Reader::get(self, table, key)
    }
    fn scan<V: DeserializeOwned>(&self, table: Table, prefix: &[u8]) -> Result<Vec<V>, StoreError> {
        Reader::scan(self, table, prefix)
    }
}

impl Read for Writer<'_> {
    fn get<V: DeserializeOwned>(&self, table: Table, key: &[u8]) -> Result<Option<V>, StoreError> {
        Writer::get(self, table, key)
    }
    fn scan<V: DeserializeOwned>(&self, table: Table, prefix: &[u8]) -> Result<Vec<V>, StoreError> {
        Writer::scan(self, table, prefix)
    }
}

/// Read and write access inside one transaction.
pub struct Writer<'s> {
    store: &'s Store,
    txn: lmdb::RwTransaction<'s>,
}

impl Writer<'_> {
    pub fn get<V: DeserializeOwned>(&self, table: Table, key: &[u8]) -> Result<Option<V>, StoreError> {
        get_in(&self.txn, self.store.db(table), table, key)
    }

    pub fn scan<V: DeserializeOwned>(&self, table: Table, prefix: &[u8]) -> Result<Vec<V>, StoreError> {
        let mut out = Vec::new();
        scan_in(&self.txn, self.store.db(table), prefix, prefix, |_, v| {
            out.push(decode(table, v)?);
            Ok(true)
        })?;
        Ok(out)
    }

    /// Keys and values under `prefix`, in key order (what a change must write back to).
    pub fn scan_keyed<V: DeserializeOwned>(
        &self,
        table: Table,
        prefix: &[u8],
    ) -> Result<Vec<(Vec<u8>, V)>, StoreError> {
        let mut out = Vec::new();
        scan_in(&self.txn, self.store.db(table), prefix, prefix, |k, v| {
            out.push((k.to_vec(), decode(table, v)?));
            Ok(true)
        })?;
        Ok(out)
    }

    pub fn put<V: Serialize + ?Sized>(&mut self, table: Table, key: &[u8], value: &V) -> Result<(), StoreError> {
        check_key(key)?;
        let bytes = encode(table, value)?;
        self.txn.put(self.store.db(table), &key, &bytes, WriteFlags::empty())?;
        Ok(())
    }

    /// Deletes a memory: its record and every entry under its prefix in every per-memory
    /// table. Returns how many entries each table lost (tables that lost none are left out).
    /// Only for `forget_memory`, the hard delete a caller explicitly asks for.
    pub fn delete_memory(&mut self, memory: &str) -> Result<Vec<(&'static str, u64)>, StoreError> {
        let prefix = keys::memory_prefix(memory);
        let mut removed = Vec::new();
        for table in Table::ALL {
            let n = match table.keyed_by_memory() {
                MemoryKeying::None => 0,
                MemoryKeying::Exact => u64::from(self.delete(table, &keys::memory(memory))?),
                MemoryKeying::Prefix => self.delete_prefix(table, &prefix)?,
            };
            if n > 0 {
                removed.push((table.name(), n));
            }
        }
        Ok(removed)
    }

    /// Deletes every entry under `prefix`; returns how many.
    pub fn delete_prefix(&mut self, table: Table, prefix: &[u8]) -> Result<u64, StoreError> {
        let db = self.store.db(table);
        let mut doomed: Vec<Vec<u8>> = Vec::new();
        scan_in(&self.txn, db, prefix, prefix, |k, _| {
            doomed.push(k.to_vec());
            Ok(true)
        })?;
        for k in &doomed {
            self.txn.del(db, k, None)?;
        }
        Ok(doomed.len() as u64)
    }

    /// Deletes one entry; only for hard deletes the caller was explicitly asked for.
    pub fn delete(&mut self, table: Table, key: &[u8]) -> Result<bool, StoreError> {
        check_key(key)?;
        match self.txn.del(self.store.db(table), &key, None) {
            Ok(()) => Ok(true),
            Err(lmdb::Error::NotFound) => Ok(false),
            Err(e) => Err(e.into()),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde::Deserialize;
    use std::panic::AssertUnwindSafe;
    use std::sync::Mutex;

    #[derive(Debug, PartialEq, Serialize, Deserialize)]
    struct Row {
        n: u64,
        text: String,
    }

    #[test]
    fn either_durability_keeps_every_commit_across_a_reopen() {
        for sync in [Durability::Data, Durability::Full] {
            let dir = tempfile::tempdir().unwrap();
            let opts = StoreOptions {
                sync,
                ..StoreOptions::default()
            };
            let store = Store::open(dir.path(), &opts).unwrap();
            for n in 0..3u64 {
                let row = Row {
                    n,
                    text: format!("{sync:?}"),
                };
                store
                    .write(|w| w.put(Table::Edges, &keys::seq2("m", 1, n), &row))
                    .unwrap();
            }
            // Closed without a final sync, as a killed daemon leaves it.
            drop(store);
            let store = Store::open(dir.path(), &opts).unwrap();
            let got: Option<Row> = store.read(|r| r.get(Table::Edges, &keys::seq2("m", 1, 2))).unwrap();
            assert_eq!(
                got,
                Some(Row {
                    n: 2,
                    text: format!("{sync:?}")
                })
            );
        }
    }

    #[test]
    fn a_reverse_visit_reads_its_prefix_backwards_and_nothing_around_it() {
        let dir = tempfile::tempdir().unwrap();
        let store = Store::open(dir.path(), &StoreOptions::default()).unwrap();
        let row = |n: u64| Row { n, text: String::new() };
        store
            .write(|w| {
                // Entity 7 of memory "a" (its last key all 0xff bytes) between entities 6 and
                // 8, and memory "b" last in the table.
                for n in [0u64, 1, 255, 256, u64::MAX] {
                    w.put(Table::Edges, &keys::seq2("a", 7, n), &row(n))?;
                }
                w.put(Table::Edges, &keys::seq2("a", 6, 9), &row(1000))?;
                w.put(Table::Edges, &keys::seq2("a", 8, 0), &row(1001))?;
                w.put(Table::Edges, &keys::seq2("b", 7, 3), &row(1002))?;
                Ok(())
            })
            .unwrap();
        let back = |prefix: &[u8], take: usize| -> Vec<u64> {
            let mut out = Vec::new();
            store
                .read(|r| {
                    r.visit_rev(Table::Edges, prefix, |_, v: Row| {
                        out.push(v.n);
                        Ok(out.len() < take)
                    })
                })
                .unwrap();
            out
        };
        assert_eq!(back(&keys::seq2_prefix("a", 7), 100), vec![u64::MAX, 256, 255, 1, 0]);
        assert_eq!(back(&keys::seq2_prefix("a", 7), 2), vec![u64::MAX, 256]);
        assert_eq!(back(&keys::seq2_prefix("a", 8), 100), vec![1001]);
        assert_eq!(
            back(&keys::seq2_prefix("b", 7), 100),
            vec![1002],
            "the last keys of the table"
        );
        assert_eq!(back(&keys::seq2_prefix("b", 9), 100), Vec::<u64>::new());
        assert_eq!(back(b"", 3), vec![1002, 1001, u64::MAX]);
        assert_eq!(prefix_end(&[1, 0xff, 0xff]), Some(vec![2]));
        assert_eq!(prefix_end(&[0xff]), None);
    }

    #[test]
    fn table_sizes_count_entries_and_the_pages_they_take() {
        let dir = tempfile::tempdir().unwrap();
        let store = Store::open(dir.path(), &StoreOptions::default()).unwrap();
        store
            .write(|w| {
                for n in 0..300u64 {
                    let row = Row {
                        n,
                        text: noise(n, 3000),
                    }; // overflow pages
                    w.put(Table::Messages, &keys::seq(if n % 3 == 0 { "a" } else { "b" }, n), &row)?;
                }
                Ok(())
            })
            .unwrap();
        store
            .read(|r| {
                let (entries, bytes) = r.table_size(Table::Messages)?;
                assert_eq!(entries, 300);
                assert!(bytes >= 300 * 3000, "{bytes} bytes of pages for 900 KB of values");
                assert_eq!(r.count(Table::Messages, b"")?, 300, "the whole table, from the count");
                assert_eq!(
                    r.count(Table::Messages, &keys::memory_prefix("a"))?,
                    100,
                    "a prefix, scanned"
                );
                assert_eq!(r.table_size(Table::Facts)?, (0, 0));
                Ok(())
            })
            .unwrap();
    }

    #[test]
    fn put_get_scan_in_key_order() {
        let dir = tempfile::tempdir().unwrap();
        let store = Store::open(dir.path(), &StoreOptions::default()).unwrap();
        store
            .write(|w| {
                for n in [3u64, 1, 2] {
                    w.put(
                        Table::Messages,
                        &keys::seq("m", n),
                        &Row {
                            n,
                            text: format!("t{n}"),
                        },
                    )?;
                }
                w.put(
                    Table::Messages,
                    &keys::seq("m2", 1),
                    &Row {
                        n: 99,
                        text: "other".into(),
                    },
                )
            })
            .unwrap();
        let rows: Vec<Row> = store
            .read(|r| r.scan(Table::Messages, &keys::memory_prefix("m")))
            .unwrap();
        assert_eq!(rows.iter().map(|r| r.n).collect::<Vec<_>>(), vec![1, 2, 3]);
        let one: Option<Row> = store.read(|r| r.get(Table::Messages, &keys::seq("m", 2))).unwrap();
        assert_eq!(one.unwrap().text, "t2");
    }

    #[test]
    fn failed_write_commits_nothing() {
        let dir = tempfile::tempdir().unwrap();
        let store = Store::open(dir.path(), &StoreOptions::default()).unwrap();
        let res: Result<(), StoreError> = store.write(|w| {
            w.put(Table::Messages, &keys::seq("m", 1), &Row { n: 1, text: "x".into() })?;
            Err(StoreError::KeySize { len: 0 })
        });
        assert!(res.is_err());
        let n = store
            .read(|r| r.count(Table::Messages, &keys::memory_prefix("m")))
            .unwrap();
        assert_eq!(n, 0);
    }

    /// A store whose map starts at 256 KB.
    fn small_map(dir: &Path) -> Store {
        let opts = StoreOptions {
            map_size: 256 * 1024,
            ..Default::default()
        };
        Store::open(dir, &opts).unwrap()
    }

    /// Writes message `n` of memory "m": 4,000 characters that do not compress.
    fn put_noise(store: &Store, n: u64) {
        let row = Row {
            n,
            text: noise(n, 4000),
        };
        store
            .write(|w| w.put(Table::Messages, &keys::seq("m", n), &row))
            .unwrap();
    }

    #[test]
    fn map_full_grows_and_keeps_every_write() {
        let dir = tempfile::tempdir().unwrap();
        let store = small_map(dir.path());
        for n in 0..400u64 {
            put_noise(&store, n);
        }
        assert!(store.map_size() > 256 * 1024, "map never grew");
        let n = store
            .read(|r| r.count(Table::Messages, &keys::memory_prefix("m")))
            .unwrap();
        assert_eq!(n, 400);
    }

    /// Writes that arrive while one is committing share the next transaction: here the first
    /// holds the group until seven more have queued. Each of the seven gets its own result: the
    /// one that fails and the one that panics leave nothing written and their callers get the
    /// error and the panic; the other five commit.
    #[test]
    fn writes_queued_behind_a_commit_share_one_transaction_and_keep_their_own_results() {
        use std::sync::mpsc;
        let dir = tempfile::tempdir().unwrap();
        let store = Store::open(dir.path(), &StoreOptions::default()).unwrap();
        let row = |n: u64| Row {
            n,
            text: format!("row {n}"),
        };
        let opened = store.group_commits().2; // the schema version's write
        let (inside, entered) = mpsc::channel();
        let (release, go) = mpsc::channel::<()>();
        let go = Mutex::new(go);
        std::thread::scope(|s| {
            let first = s.spawn(|| {
                store.write(|w| {
                    inside.send(()).unwrap();
                    go.lock().unwrap().recv().unwrap();
                    w.put(Table::Messages, &keys::seq("m", 0), &row(0))
                })
            });
            entered.recv().unwrap();
            let others: Vec<_> = (1..8u64)
                .map(|n| {
                    let store = &store;
                    s.spawn(move || {
                        std::panic::catch_unwind(AssertUnwindSafe(|| {
                            store.write(|w| {
                                w.put(Table::Messages, &keys::seq("m", n), &row(n))?;
                                match n {
                                    3 => Err(StoreError::Encode {
                                        table: "messages",
                                        message: "refused".into(),
                                    }),
                                    5 => panic!("write 5 panics"),
                                    _ => Ok(n * 10),
                                }
                            })
                        }))
                    })
                })
                .collect();
            // All seven queued behind the first before it commits.
            let waited = std::time::Instant::now();
            while store.group.queued() < 7 {
                assert!(waited.elapsed().as_secs() < 30, "the seven writes never queued");
                std::thread::sleep(std::time::Duration::from_millis(1));
            }
            release.send(()).unwrap();
            first.join().unwrap().unwrap();
            for (n, t) in (1..8u64).zip(others) {
                match (n, t.join().unwrap()) {
                    (3, Ok(Err(StoreError::Encode { message, .. }))) => assert_eq!(message, "refused"),
                    (5, Err(panic)) => assert_eq!(panic.downcast_ref::<&str>(), Some(&"write 5 panics")),
                    (n, Ok(Ok(v))) => assert_eq!(v, n * 10),
                    (n, _) => panic!("write {n} ended otherwise"),
                }
            }
        });
        assert_eq!(
            store.group_commits(),
            (1, 7, opened + 8),
            "the seven shared one transaction"
        );
        let held: Vec<Row> = store.read(|r| r.scan(Table::Messages, b"")).unwrap();
        assert_eq!(held, [0, 1, 2, 4, 6, 7].map(row));
    }

    /// A group that fills the map is undone whole, the map grown, and the group run again: every
    /// write lands once.
    #[test]
    fn a_group_that_fills_the_map_grows_it_and_keeps_every_write() {
        let dir = tempfile::tempdir().unwrap();
        let store = small_map(dir.path());
        std::thread::scope(|s| {
            for t in 0..8u64 {
                let store = &store;
                s.spawn(move || (0..40u64).for_each(|i| put_noise(store, t * 1000 + i)));
            }
        });
        assert!(store.map_size() > 256 * 1024, "map never grew");
        let held: Vec<Row> = store.read(|r| r.scan(Table::Messages, b"")).unwrap();
        assert_eq!(held.len(), 320);
        assert!(held.iter().all(|r| r.text == noise(r.n, 4000)));
    }

    /// A full disk (a 4 MB tmpfs; needs root to mount, else skipped with a message): the write
    /// that does not fit is an error, every write before it reads back whole, and once space is
    /// freed the same store takes writes again.
    #[test]
    fn a_full_disk_refuses_the_write_and_keeps_every_earlier_one() {
        let dir = tempfile::tempdir().unwrap();
        let mounted = std::process::Command::new("mount")
            .args(["-t", "tmpfs", "-o", "size=4m", "tmpfs"])
            .arg(dir.path())
            .status()
            .is_ok_and(|s| s.success());
        if !mounted {
            eprintln!("skipped: cannot mount a tmpfs here (needs root)");
            return;
        }
        struct Unmount<'a>(&'a std::path::Path);
        impl Drop for Unmount<'_> {
            fn drop(&mut self) {
                let _ = std::process::Command::new("umount").arg(self.0).status();
            }
        }
        let _unmount = Unmount(dir.path());
        let data = dir.path().join("data");
        std::fs::create_dir(&data).unwrap();
        // A filler to free later, so the same store can be shown to write again.
        std::fs::write(dir.path().join("filler"), vec![0u8; 512 * 1024]).unwrap();
        let options = StoreOptions {
            map_size: 256 * 1024,
            ..Default::default()
        };
        let store = Store::open(&data, &options).unwrap();
        let mut written = 0u64;
        let failure = loop {
            let n = written;
            match store.write(|w| {
                w.put(
                    Table::Messages,
                    &keys::seq("m", n),
                    &Row {
                        n,
                        text: noise(n, 16_000),
                    },
                )
            }) {
                Ok(()) => written += 1,
                Err(e) => break e,
            }
            assert!(written < 10_000, "a 4 MB disk never filled");
        };
        assert!(written > 10, "{written} writes before the disk was full");
        eprintln!("disk full after {written} writes: {failure}");
        assert!(
            matches!(failure, StoreError::DiskFull { .. }),
            "said as a full disk: {failure}"
        );
        let rows: Vec<Row> = store
            .read(|r| {
                (0..written)
                    .map(|n| r.get(Table::Messages, &keys::seq("m", n)).map(Option::unwrap))
                    .collect()
            })
            .unwrap();
        assert!(
            rows.iter()
                .enumerate()
                .all(|(n, r)| r.n == n as u64 && r.text == noise(n as u64, 16_000)),
            "an earlier write came back changed"
        );
        std::fs::remove_file(dir.path().join("filler")).unwrap();
        store
            .write(|w| {
                w.put(
                    Table::Messages,
                    &keys::seq("m", written),
                    &Row {
                        n: written,
                        text: "after".into(),
                    },
                )
            })
            .expect("the store writes again once there is space");
        drop(store);
        let store = Store::open(&data, &options).unwrap();
        let n = store
            .read(|r| r.count(Table::Messages, &keys::memory_prefix("m")))
            .unwrap();
        assert_eq!(n, written + 1, "reopened, the store holds every write");
    }

    #[test]
    fn delete_memory_removes_its_record_and_prefixes_in_every_table_and_nothing_else() {
        let dir = tempfile::tempdir().unwrap();
        let store = Store::open(dir.path(), &StoreOptions::default()).unwrap();
        let row = |n| Row { n, text: "x".into() };
        store
            .write(|w| {
                for m in ["a", "ab"] {
                    w.put(Table::Memories, &keys::memory(m), &row(0))?;
                    for table in Table::ALL {
                        if table.keyed_by_memory() == MemoryKeying::Prefix {
                            for n in 0..3 {
                                w.put(table, &keys::seq(m, n), &row(n))?;
                            }
                        }
                    }
                }
                Ok(())
            })
            .unwrap();
        let removed = store.write(|w| w.delete_memory("a")).unwrap();
        let prefixed = Table::ALL
            .iter()
            .filter(|t| t.keyed_by_memory() == MemoryKeying::Prefix)
            .count();
        assert_eq!(removed.len(), prefixed + 1, "{removed:?}");
        assert!(removed.contains(&("memories", 1)));
        assert!(removed.contains(&("messages", 3)));
        store
            .read(|r| {
                for table in Table::ALL {
                    if table.keyed_by_memory() == MemoryKeying::Prefix {
                        assert_eq!(r.count(table, &keys::memory_prefix("a"))?, 0);
                        assert_eq!(r.count(table, &keys::memory_prefix("ab"))?, 3, "a neighbour is kept");
                    }
                }
                assert!(r.get::<Row>(Table::Memories, &keys::memory("ab"))?.is_some());
                Ok(())
            })
            .unwrap();
        assert!(store.write(|w| w.delete_memory("a")).unwrap().is_empty());
    }

    #[test]
    fn newer_schema_is_refused_with_a_clear_error() {
        let dir = tempfile::tempdir().unwrap();
        {
            let store = Store::open(dir.path(), &StoreOptions::default()).unwrap();
            store
                .write(|w| w.put(Table::Meta, SCHEMA_KEY, &(SCHEMA_VERSION + 1)))
                .unwrap();
        }
        let err = Store::open(dir.path(), &StoreOptions::default()).unwrap_err();
        assert!(matches!(err, StoreError::NewerSchema { .. }), "{err}");
        assert!(err.to_string().contains("newer recalld"), "{err}");
    }

    #[test]
    fn data_survives_reopen() {
        let dir = tempfile::tempdir().unwrap();
        {
            let store = Store::open(dir.path(), &StoreOptions::default()).unwrap();
            store
                .write(|w| {
                    w.put(
                        Table::Memories,
                        &keys::memory("m"),
                        &Row {
                            n: 7,
                            text: "kept".into(),
                        },
                    )
                })
                .unwrap();
        }
        let store = Store::open(dir.path(), &StoreOptions::default()).unwrap();
        let row: Option<Row> = store.read(|r| r.get(Table::Memories, &keys::memory("m"))).unwrap();
        assert_eq!(
            row,
            Some(Row {
                n: 7,
                text: "kept".into()
            })
        );
    }

    /// Text that does not compress (so a test's values take the room their length says).
    fn noise(seed: u64, len: usize) -> String {
        const ALPHABET: &[u8; 64] = b"ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";
        let mut x = seed.wrapping_mul(0x9E37_79B9_7F4A_7C15) | 1;
        (0..len)
            .map(|_| {
                x ^= x << 13;
                x ^= x >> 7;
                x ^= x << 17;
                ALPHABET[(x % 64) as usize] as char
            })
            .collect()
    }

    /// The bytes LMDB holds for a key (what `put` wrote, before decoding).
    fn stored_bytes(store: &Store, table: Table, key: &[u8]) -> Vec<u8> {
        let txn = store.env.begin_ro_txn().unwrap();
        txn.get(store.db(table), &key).unwrap().to_vec()
    }

    /// Puts `bytes` as they are, past `encode`: a value as an older recalld wrote it.
    fn put_stored_bytes(store: &Store, table: Table, key: &[u8], bytes: &[u8]) {
        let mut txn = store.env.begin_rw_txn().unwrap();
        txn.put(store.db(table), &key, &bytes, WriteFlags::empty()).unwrap();
        txn.commit().unwrap();
    }

    #[test]
    fn large_values_are_stored_compressed_and_read_back_whole() {
        let dir = tempfile::tempdir().unwrap();
        let store = Store::open(dir.path(), &StoreOptions::default()).unwrap();
        let large = Row {
            n: 1,
            text: "the tool printed the same line again\n".repeat(100),
        };
        let small = Row {
            n: 2,
            text: "short".into(),
        };
        store
            .write(|w| {
                w.put(Table::Memories, &keys::memory("large"), &large)?;
                w.put(Table::Memories, &keys::memory("small"), &small)
            })
            .unwrap();
        let plain = rmp_serde::to_vec_named(&large).unwrap();
        let held = stored_bytes(&store, Table::Memories, &keys::memory("large"));
        assert_eq!(held[0], COMPRESSED);
        assert!(held.len() * 4 < plain.len(), "{} of {}", held.len(), plain.len());
        assert_eq!(
            stored_bytes(&store, Table::Memories, &keys::memory("small")),
            rmp_serde::to_vec_named(&small).unwrap()
        );
        let back: Vec<Row> = store.read(|r| r.scan(Table::Memories, b"")).unwrap();
        assert_eq!(back, vec![large, small]);
    }

    /// A record of a few dozen bytes, most of it field names, is stored at about half its size
    /// (the names are in the dictionary) and read back whole.
    #[test]
    fn small_records_are_compressed_against_the_dictionary() {
        let dir = tempfile::tempdir().unwrap();
        let store = Store::open(dir.path(), &StoreOptions::default()).unwrap();
        let message = serde_json::json!({
            "seq": 7, "turn": 3, "at": 1_700_003_640.0, "source": "request",
            "fingerprint": 14_826_288_032_771_455_935u64, "tokens": 16,
            "message": {
                "raw": {"role": "user", "content": "Sure, my user ID is mia_li_3668."},
                "format": "chat_completions"
            },
            "chain": {"at": 2, "hash": 6_157_696_685_371_955_197u64}
        });
        store
            .write(|w| w.put(Table::Messages, &keys::seq("m", 7), &message))
            .unwrap();
        let plain = rmp_serde::to_vec_named(&message).unwrap();
        let held = stored_bytes(&store, Table::Messages, &keys::seq("m", 7));
        assert_eq!(held[0], COMPRESSED);
        assert!(held.len() * 10 < plain.len() * 7, "{} of {}", held.len(), plain.len());
        let back: Option<serde_json::Value> = store.read(|r| r.get(Table::Messages, &keys::seq("m", 7))).unwrap();
        assert_eq!(back, Some(message));
    }

    /// Values written by schemas 2 to 8, compressed without the dictionary, read as they are.
    #[test]
    fn values_compressed_before_the_dictionary_read_back() {
        let dir = tempfile::tempdir().unwrap();
        let store = Store::open(dir.path(), &StoreOptions::default()).unwrap();
        let old = Row {
            n: 1,
            text: "compressed by recalld before schema 9 ".repeat(40),
        };
        let mut bytes = vec![COMPRESSED];
        bytes.extend_from_slice(&lz4_flex::compress_prepend_size(
            &rmp_serde::to_vec_named(&old).unwrap(),
        ));
        put_stored_bytes(&store, Table::Memories, &keys::memory("old"), &bytes);
        let back: Option<Row> = store.read(|r| r.get(Table::Memories, &keys::memory("old"))).unwrap();
        assert_eq!(back, Some(old));
    }

    /// The dictionary is part of the on-disk format: values stored against it can only be
    /// read with these bytes. A new dictionary is a new file, flagged apart from this one.
    #[test]
    fn the_dictionary_never_changes() {
        let fnv = DICTIONARY.iter().fold(0xcbf2_9ce4_8422_2325u64, |h, &b| {
            (h ^ b as u64).wrapping_mul(0x100_0000_01b3)
        });
        assert_eq!((DICTIONARY.len(), fnv), (2810, 0xb1bb_e08d_0cc7_3dd4));
    }

    #[test]
    fn a_version_1_store_is_read_as_it_is_and_marked_current() {
        let dir = tempfile::tempdir().unwrap();
        let large = Row {
            n: 1,
            text: "written uncompressed by recalld before schema 2 ".repeat(40),
        };
        {
            let store = Store::open(dir.path(), &StoreOptions::default()).unwrap();
            let plain = rmp_serde::to_vec_named(&large).unwrap();
            put_stored_bytes(&store, Table::Memories, &keys::memory("old"), &plain);
            let version = rmp_serde::to_vec_named(&1u32).unwrap();
            put_stored_bytes(&store, Table::Meta, SCHEMA_KEY, &version);
        }
        let store = Store::open(dir.path(), &StoreOptions::default()).unwrap();
        let version: Option<u32> = store.read(|r| r.get(Table::Meta, SCHEMA_KEY)).unwrap();
        assert_eq!(version, Some(SCHEMA_VERSION));
        let back: Option<Row> = store.read(|r| r.get(Table::Memories, &keys::memory("old"))).unwrap();
        assert_eq!(back, Some(large));
    }
}
