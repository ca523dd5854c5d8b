//! `quiet`: wait until a memory's background lane has nothing queued. For replays and tests
//! that must be deterministic: a client that knows real time would have let the lane finish
//! (the user took a minute to answer) says so by waiting here instead of racing the lane.

use std::time::{Duration, Instant};

use serde_json::{json, Value};

use super::{Engine, EngineError};
use crate::store::{keys, Table};

/// How often the jobs table is looked at while waiting.
const POLL: Duration = Duration::from_millis(5);
/// The longest a caller may ask to wait.
pub const MAX_QUIET_MS: u64 = 600_000;

impl Engine {
    /// Waits up to `timeout_ms` until the memory's queued jobs (the `jobs` table under its
    /// prefix) are all done; returns `{"jobs": remaining}` (0 when quiet, more on a timeout).
    /// A job stays in the table until the transaction applying its result commits, so 0 means
    /// every result is visible to the next op.
    pub fn quiet(&self, memory: &str, timeout_ms: u64) -> Result<Value, EngineError> {
        if timeout_ms > MAX_QUIET_MS {
            return Err(EngineError::InvalidArgument(format!(
                "timeout_ms must be at most {MAX_QUIET_MS}"
            )));
        }
        let deadline = Instant::now() + Duration::from_millis(timeout_ms);
        let prefix = keys::memory_prefix(memory);
        loop {
            let jobs = self.store.read(|r| r.count(Table::Jobs, &prefix))?;
            if jobs == 0 || Instant::now() >= deadline {
                return Ok(json!({ "jobs": jobs }));
            }
            std::thread::sleep(POLL);
        }
    }
}
