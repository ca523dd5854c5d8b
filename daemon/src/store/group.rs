//! Group commit: writes that arrive while another is committing wait, then share one
//! transaction and its one flush.
//!
//! LMDB has one writer at a time, and a commit holds it through its flush (`fdatasync`), so
//! under load every writer queued behind every flush (on the 100-memory run a build without
//! the flush made 30-40% more pairs a second; docs/benchmarks.md). Here the first writer to find
//! no group running leads: it takes every write queued so far, its own among them, runs each
//! in a nested transaction of one transaction and commits that once. A write that fails or
//! panics undoes its own nested transaction only and gets its own error; the others commit.
//! Each caller returns only once the transaction holding its writes is committed, so a write
//! is as durable as before. A write alone runs as it always did, in a transaction of its own.
//!
//! LMDB's write transaction must be committed by the thread that began it, so the leader runs
//! the other callers' closures on its thread while they wait: the closures must be `Send`.

use std::any::Any;
use std::collections::HashMap;
use std::panic::{self, AssertUnwindSafe};
use std::sync::{Condvar, Mutex};

use super::{StoreError, Writer};

/// One caller's writes, as the leader of its group runs them.
pub(super) trait Job {
    /// Makes the writes in `w` and keeps what they return; an error undoes them alone.
    fn run(&mut self, w: &mut Writer<'_>) -> Result<(), StoreError>;
}

/// A caller's closure and, once it has run, its value.
pub(super) struct Closure<T, F> {
    pub f: F,
    pub value: Option<T>,
}

impl<T, F: FnMut(&mut Writer<'_>) -> Result<T, StoreError>> Job for Closure<T, F> {
    fn run(&mut self, w: &mut Writer<'_>) -> Result<(), StoreError> {
        self.value = Some((self.f)(w)?);
        Ok(())
    }
}

/// What became of one job.
pub(super) enum Outcome {
    Done(Result<(), StoreError>),
    Panicked(Box<dyn Any + Send>),
}

/// A queued job, borrowed from the stack of the caller waiting for it.
pub(super) struct Queued(*mut (dyn Job + 'static));

// SAFETY: the job is reached through this pointer only by the leader of its group, while its
// caller waits in `Group::join`, which returns only after the job's outcome is handed back
// under the group's mutex (so the leader's writes to it happen before the caller reads it);
// the closure and its value are `Send` (`Store::write`'s bounds).
unsafe impl Send for Queued {}

impl Queued {
    /// Runs the job in `w`, a panic caught and returned.
    pub fn run(&mut self, w: &mut Writer<'_>) -> Outcome {
        // SAFETY: see `impl Send for Queued`: the job is alive and nobody else touches it.
        let job = unsafe { &mut *self.0 };
        match panic::catch_unwind(AssertUnwindSafe(|| job.run(w))) {
            Ok(result) => Outcome::Done(result),
            Err(payload) => Outcome::Panicked(payload),
        }
    }
}

#[derive(Default)]
struct State {
    next_ticket: u64,
    queue: Vec<(u64, Queued)>,
    leading: bool,
    outcomes: HashMap<u64, Outcome>,
    /// Transactions that held several writes, the writes they held, and every write (for
    /// `stats`).
    groups: u64,
    grouped: u64,
    writes: u64,
}

#[derive(Default)]
pub(super) struct Group {
    state: Mutex<State>,
    settled: Condvar,
}

impl Group {
    /// Queues `job` and waits until it has run in a committed transaction (or failed), leading
    /// a group when none is running: `commit` gets the queued jobs and gives each an outcome.
    pub fn join(
        &self,
        job: &mut (dyn Job + '_),
        commit: impl Fn(&mut [(u64, Queued)]) -> Vec<(u64, Outcome)>,
    ) -> Result<(), StoreError> {
        let ptr: *mut (dyn Job + '_) = job;
        // SAFETY: only the lifetime is erased; `Queued` is never used past this call's return
        // (see `impl Send for Queued`).
        let ptr: *mut (dyn Job + 'static) = unsafe { std::mem::transmute(ptr) };
        let mut st = self.state.lock().unwrap_or_else(|e| e.into_inner());
        let ticket = st.next_ticket;
        st.next_ticket += 1;
        st.writes += 1;
        st.queue.push((ticket, Queued(ptr)));
        loop {
            if let Some(outcome) = st.outcomes.remove(&ticket) {
                drop(st);
                return match outcome {
                    Outcome::Done(result) => result,
                    Outcome::Panicked(payload) => panic::resume_unwind(payload),
                };
            }
            if !st.leading {
                st.leading = true;
                let mut batch = std::mem::take(&mut st.queue);
                drop(st);
                // `commit` catches the jobs' panics; one of its own would leave the group
                // without a leader, so it is caught too and every job told.
                let outcomes = match panic::catch_unwind(AssertUnwindSafe(|| commit(&mut batch))) {
                    Ok(outcomes) => outcomes,
                    Err(_) => batch
                        .iter()
                        .map(|&(t, _)| (t, Outcome::Panicked(Box::new("the group commit panicked"))))
                        .collect(),
                };
                st = self.state.lock().unwrap_or_else(|e| e.into_inner());
                if batch.len() > 1 {
                    st.groups += 1;
                    st.grouped += batch.len() as u64;
                }
                st.outcomes.extend(outcomes);
                for (t, _) in &batch {
                    // Never left waiting, whatever `commit` did.
                    st.outcomes
                        .entry(*t)
                        .or_insert_with(|| Outcome::Panicked(Box::new("a write the group commit lost")));
                }
                st.leading = false;
                self.settled.notify_all();
                continue;
            }
            st = self.settled.wait(st).unwrap_or_else(|e| e.into_inner());
        }
    }

    /// Writes waiting for a group to take them.
    #[cfg(test)]
    pub fn queued(&self) -> usize {
        self.state.lock().unwrap_or_else(|e| e.into_inner()).queue.len()
    }

    /// Transactions that held more than one caller's writes, the writes they held, and every
    /// write since the start.
    pub fn counts(&self) -> (u64, u64, u64) {
        let st = self.state.lock().unwrap_or_else(|e| e.into_inner());
        (st.groups, st.grouped, st.writes)
    }
}
