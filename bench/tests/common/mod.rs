//! What the bench crate's tests share: the daemon binary they run.

use std::path::PathBuf;

/// The debug daemon (`$RECALLD_BIN`, else `target/debug/recalld`); fails with how to build it.
pub fn recalld_bin() -> PathBuf {
    let bin = match std::env::var_os("RECALLD_BIN") {
        Some(b) if !b.is_empty() => PathBuf::from(b),
        _ => PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../target/debug/recalld"),
    };
    assert!(
        bin.exists(),
        "{} missing: run `cargo build -p recalld` first",
        bin.display()
    );
    bin
}
