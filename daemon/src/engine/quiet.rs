//! `quiet`: wait until a memory's background lane has nothing queued. For replays and tests
//! that must be deterministic: a client that knows real time would have let the lane finish
//! (the user took a minute to answer) says so by waiting here instead of racing the lane.

use std::time::{Duration, Instant};

use serde_json::{json, Value};

use super::records::Job;
use super::{Engine, EngineError};
use crate::store::{keys, Table};

/// How often the jobs table is looked at while waiting.
const POLL: Duration = Duration::from_millis(5);
/// The longest a caller may ask to wait.
pub const MAX_QUIET_MS: u64 = 600_000;

impl Engine {
    /// Waits up to `timeout_ms` until the memory's queued jobs (the `jobs` table under its
    /// prefix) are all done or parked; returns `{"jobs": remaining, "parked": n}` (jobs 0 when
    /// quiet, more on a timeout). A parked job no longer runs, so waiting for it would only
    /// wait out the timeout. Search indexes still being caught up with the store after a start
    /// count as a job. A job stays in the table until the transaction applying its
    /// result commits, so 0 means every result is visible to the next op.
    pub fn quiet(&self, memory: &str, timeout_ms: u64) -> Result<Value, EngineError> {
        if timeout_ms > MAX_QUIET_MS {
            return Err(EngineError::InvalidArgument(format!(
                "timeout_ms must be at most {MAX_QUIET_MS}"
            )));
        }
        let deadline = Instant::now() + Duration::from_millis(timeout_ms);
        let prefix = keys::memory_prefix(memory);
        loop {
            let (jobs, parked) = self.store.read(|r| {
                let (mut jobs, mut parked) = (0u64, 0u64);
                r.visit(Table::Jobs, &prefix, &prefix, |_, job: Job| {
                    if job.parked() {
                        parked += 1;
                    } else {
                        jobs += 1;
                    }
                    Ok(true)
                })?;
                Ok((jobs, parked))
            })?;
            // Indexes the start found behind count as one job until they are caught up.
            let jobs = jobs + u64::from(self.indexes_behind(memory));
            if jobs == 0 || Instant::now() >= deadline {
                return Ok(json!({ "jobs": jobs, "parked": parked }));
            }
            std::thread::sleep(POLL);
        }
    }
}
