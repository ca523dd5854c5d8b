//! Copies of the store: a compacted, consistent copy taken while a daemon serves, and putting
//! one back while none does.
//!
//! The copy is LMDB's own `mdb_env_copy2` with compaction: it runs inside one read
//! transaction, so it sees one committed state and never blocks writers. LMDB is safe across
//! processes, so `recalld backup` opens the environment itself next to the running daemon.

use std::ffi::{c_char, c_int, c_uint, c_void, CString};
use std::os::unix::ffi::OsStrExt;
use std::path::{Path, PathBuf};

use lmdb::{Environment, EnvironmentFlags, Transaction};

use super::{Store, StoreError, Table, SCHEMA_KEY, SCHEMA_VERSION};

// lmdb-rkv links LMDB but does not expose this call; the symbol is in its bundled C library.
extern "C" {
    fn mdb_env_copy2(env: *mut c_void, path: *const c_char, flags: c_uint) -> c_int;
}
/// Omit free pages and renumber: the copy is as small as the data.
const MDB_CP_COMPACT: c_uint = 1;
const DATA_FILE: &str = "data.mdb";

/// What a backup holds, read back from the copy itself.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct BackupInfo {
    pub path: PathBuf,
    pub bytes: u64,
    pub schema_version: u32,
    pub memories: u64,
}

impl Store {
    /// Writes a compacted copy of this store into the new directory `dest`.
    pub fn backup_to(&self, dest: &Path) -> Result<BackupInfo, StoreError> {
        let _shared = self.resize.read().unwrap_or_else(|e| e.into_inner());
        copy_env(&self.env, dest)?;
        inspect(dest)
    }
}

/// Copies the store in `data_dir` (which a daemon may be serving) into the new directory `dest`.
pub fn backup_dir(data_dir: &Path, dest: &Path) -> Result<BackupInfo, StoreError> {
    if !data_dir.join(DATA_FILE).is_file() {
        return Err(StoreError::Copy(format!("no store at {}", data_dir.display())));
    }
    // Read-only: this process never writes the live store, and LMDB's lock file lets it read
    // beside the daemon.
    let env = Environment::new()
        .set_max_dbs(Table::ALL.len() as u32 + 4)
        .set_flags(EnvironmentFlags::READ_ONLY | EnvironmentFlags::NO_TLS)
        .open(data_dir)?;
    copy_env(&env, dest)?;
    drop(env);
    inspect(dest)
}

/// Puts the backup in `src` in place of the store in `data_dir`. The caller makes sure no
/// daemon serves `data_dir`. The replaced data file is kept beside it, renamed, never deleted.
pub fn restore_dir(src: &Path, data_dir: &Path) -> Result<(BackupInfo, Option<PathBuf>), StoreError> {
    let info = inspect(src)?;
    std::fs::create_dir_all(data_dir).map_err(|e| io_error("create", data_dir, e))?;
    let live = data_dir.join(DATA_FILE);
    let incoming = data_dir.join(format!("{DATA_FILE}.restoring"));
    std::fs::copy(src.join(DATA_FILE), &incoming).map_err(|e| io_error("copy to", &incoming, e))?;
    std::fs::File::open(&incoming)
        .and_then(|f| f.sync_all())
        .map_err(|e| io_error("sync", &incoming, e))?;
    let kept = if live.exists() {
        let secs = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map(|d| d.as_secs())
            .unwrap_or(0);
        let aside = data_dir.join(format!("{DATA_FILE}.replaced-{secs}"));
        std::fs::rename(&live, &aside).map_err(|e| io_error("rename", &live, e))?;
        Some(aside)
    } else {
        None
    };
    std::fs::rename(&incoming, &live).map_err(|e| io_error("rename", &incoming, e))?;
    // The lock file describes readers of the old file; nobody holds it now.
    let _ = std::fs::remove_file(data_dir.join("lock.mdb"));
    Ok((info, kept))
}

/// Opens a copy read-only and reads its schema version and size.
pub fn inspect(dir: &Path) -> Result<BackupInfo, StoreError> {
    let file = dir.join(DATA_FILE);
    let bytes = std::fs::metadata(&file).map_err(|e| io_error("read", &file, e))?.len();
    // NO_LOCK: a backup is never written, and may sit on read-only media.
    let env = Environment::new()
        .set_max_dbs(Table::ALL.len() as u32 + 4)
        .set_flags(EnvironmentFlags::READ_ONLY | EnvironmentFlags::NO_LOCK | EnvironmentFlags::NO_TLS)
        .open(dir)?;
    let meta = env.open_db(Some(Table::Meta.name()))?;
    let memories = env.open_db(Some(Table::Memories.name()))?;
    let txn = env.begin_ro_txn()?;
    let schema_version: u32 = match txn.get(meta, &SCHEMA_KEY) {
        Ok(raw) => rmp_serde::from_slice(raw).map_err(|e| StoreError::Decode {
            table: "meta",
            message: e.to_string(),
        })?,
        Err(e) => return Err(e.into()),
    };
    if schema_version > SCHEMA_VERSION {
        return Err(StoreError::NewerSchema {
            path: dir.to_path_buf(),
            found: schema_version,
            supported: SCHEMA_VERSION,
        });
    }
    let mut count = 0;
    {
        use lmdb::Cursor;
        let mut cursor = txn.open_ro_cursor(memories)?;
        for item in cursor.iter_start() {
            item?;
            count += 1;
        }
    }
    Ok(BackupInfo {
        path: dir.to_path_buf(),
        bytes,
        schema_version,
        memories: count,
    })
}

/// `mdb_env_copy2` into a fresh directory beside `dest`, renamed into place once complete, so
/// a half-written copy never sits at `dest`.
fn copy_env(env: &Environment, dest: &Path) -> Result<(), StoreError> {
    if dest.exists() {
        return Err(StoreError::Copy(format!(
            "{} already exists; choose a new path",
            dest.display()
        )));
    }
    let name = dest
        .file_name()
        .ok_or_else(|| StoreError::Copy(format!("{} has no file name", dest.display())))?;
    let parent = dest
        .parent()
        .filter(|p| !p.as_os_str().is_empty())
        .unwrap_or(Path::new("."));
    let mut partial_name = name.to_os_string();
    partial_name.push(format!(".partial-{}", std::process::id()));
    let partial = parent.join(partial_name);
    std::fs::create_dir_all(&partial).map_err(|e| io_error("create", &partial, e))?;
    let cpath = CString::new(partial.as_os_str().as_bytes())
        .map_err(|_| StoreError::Copy("backup path contains a NUL byte".into()))?;
    // SAFETY: `env` is an open environment that outlives the call; the path is NUL-terminated.
    let rc = unsafe { mdb_env_copy2(env.env() as *mut c_void, cpath.as_ptr(), MDB_CP_COMPACT) };
    if rc != 0 {
        let _ = std::fs::remove_dir_all(&partial);
        return Err(lmdb::Error::from_err_code(rc).into());
    }
    std::fs::File::open(partial.join(DATA_FILE))
        .and_then(|f| f.sync_all())
        .map_err(|e| io_error("sync", &partial, e))?;
    std::fs::rename(&partial, dest).map_err(|e| io_error("rename", &partial, e))?;
    Ok(())
}

fn io_error(what: &str, path: &Path, e: std::io::Error) -> StoreError {
    StoreError::Copy(format!("cannot {what} {}: {e}", path.display()))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::store::{keys, StoreOptions};

    #[test]
    fn a_backup_taken_while_writing_is_a_consistent_compact_store_and_restores() {
        let dir = tempfile::tempdir().unwrap();
        let data = dir.path().join("data");
        let store = Store::open(&data, &StoreOptions::default()).unwrap();
        let text = "y".repeat(2000);
        for n in 0..200u64 {
            store
                .write(|w| {
                    w.put(Table::Memories, &keys::memory(&format!("m{n}")), &n)?;
                    w.put(Table::Messages, &keys::seq(&format!("m{n}"), 0), &text)
                })
                .unwrap();
        }
        // Forget half: the live file keeps its pages, the compacted copy does not.
        for n in 0..100u64 {
            store.write(|w| w.delete_memory(&format!("m{n}"))).unwrap();
        }
        let copy = dir.path().join("copy");
        let info = store.backup_to(&copy).unwrap();
        assert_eq!(info.memories, 100);
        assert_eq!(info.schema_version, SCHEMA_VERSION);
        assert!(
            info.bytes < store.size_bytes(),
            "{} vs {}",
            info.bytes,
            store.size_bytes()
        );
        assert!(
            matches!(store.backup_to(&copy), Err(StoreError::Copy(_))),
            "never overwrites"
        );
        drop(store);

        let other = dir.path().join("restored");
        let (restored, kept) = restore_dir(&copy, &other).unwrap();
        assert_eq!(restored.memories, 100);
        assert!(kept.is_none());
        let store = Store::open(&other, &StoreOptions::default()).unwrap();
        let n = store.read(|r| r.count(Table::Memories, b"")).unwrap();
        assert_eq!(n, 100);
        let m150: Option<String> = store.read(|r| r.get(Table::Messages, &keys::seq("m150", 0))).unwrap();
        assert_eq!(m150.as_deref(), Some(text.as_str()));
    }
}
