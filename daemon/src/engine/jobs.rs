//! Background jobs of one memory (run by `lanes`): judging new facts against the remembered
//! episodes, and cutting long history. Judging runs on a snapshot; results apply under the lock.

use super::cut::{truncate, UNIT_TEXT_CHARS};
use super::records::{EpisodeState, JobKind, TraceKind};
use super::state::{self, State};
use super::{Engine, EngineError};
use crate::models::CallCtx;

impl Engine {
    /// Judges each fact against the remembered episodes: every answer becomes a trace (episode,
    /// score, yes, fact), counted only on yes. Without a judge, or when it fails, nothing is
    /// returned for what was not judged: nothing is invented.
    pub(super) fn judge_facts(&self, st: &State, facts: &[u64]) -> Vec<(u64, f64, bool, u64)> {
        let Some(models) = &self.models else { return Vec::new() };
        let remembered: Vec<u64> = st
            .episodes
            .iter()
            .rev()
            .filter(|e| e.state != EpisodeState::Forgotten)
            .take(self.config.max_episodes_judged)
            .map(|e| e.n)
            .collect();
        let passages: Vec<Vec<String>> = remembered.iter().map(|&e| episode_passages(st, e)).collect();
        let ctx = CallCtx { memory: &st.memory.id };
        let mut out = Vec::new();
        for &f in facts {
            let Some(note) = st.facts.iter().find(|x| x.n == f).map(|x| x.note.as_str()) else {
                continue;
            };
            for (&e, texts) in remembered.iter().zip(&passages) {
                let refs: Vec<&str> = texts.iter().map(String::as_str).collect();
                match models.judge.about(&ctx, note, &refs) {
                    Ok((score, yes)) => out.push((e, score as f64, yes, f)),
                    Err(err) => {
                        tracing::warn!(error = %err, "judge failed; fact left unscored");
                        return out;
                    }
                }
            }
        }
        out
    }

    /// Runs the oldest queued job of `memory`, if any; returns whether one ran. The judging is
    /// done on a snapshot without holding the memory's lock, so decorate never waits on it; the
    /// results are applied under the lock, with the job's removal, in one transaction.
    pub fn run_next_job(&self, memory: &str) -> Result<bool, EngineError> {
        let (snapshot, job) = self
            .store
            .read(|r| Ok((State::load(r, memory, 0.0)?, state::oldest_job(r, memory)?)))?;
        let Some(job) = job else { return Ok(false) };
        let traces = match &job.job {
            JobKind::ScoreFacts { facts } => self.judge_facts(&snapshot, facts),
            JobKind::Cut => Vec::new(),
        };
        drop(snapshot);
        let lock = self.lock(memory);
        let _held = lock.lock().unwrap_or_else(|e| e.into_inner());
        let mut st = self.take_state(memory, 0.0)?;
        match job.job {
            JobKind::ScoreFacts { .. } => {
                for (episode, score, yes, fact) in traces {
                    st.push_trace(episode, TraceKind::Fact, job.at, score, yes, Some(fact));
                }
            }
            JobKind::Cut => {
                let budget = self.cut_budget(&st);
                self.cut(&mut st, budget, false);
            }
        }
        st.finish_job(job.n);
        self.save_and_keep(st)?;
        Ok(true)
    }

    /// Memories with queued jobs (to resume after a restart) and the number of jobs.
    pub fn pending_jobs(&self) -> Result<(Vec<String>, u64), EngineError> {
        Ok(self.store.read(|r| state::pending_jobs(r))?)
    }

    /// Where to tell the lanes that a memory has new work.
    pub fn set_lane_notifier(&self, notify: std::sync::mpsc::Sender<String>) {
        *self.notify.lock().unwrap_or_else(|e| e.into_inner()) = Some(notify);
    }

    pub(super) fn notify_lane(&self, memory: &str) {
        if let Some(tx) = self.notify.lock().unwrap_or_else(|e| e.into_inner()).as_ref() {
            let _ = tx.send(memory.to_owned());
        }
    }
}

/// The passages an episode is judged by: its messages' texts, each cut to a readable length.
pub(super) fn episode_passages(st: &State, n: u64) -> Vec<String> {
    let e = &st.episodes[n as usize];
    st.history()
        .filter(|m| m.seq >= e.first_seq && m.seq <= e.last_seq && !m.message.text.is_empty())
        .take(16)
        .map(|m| truncate(&m.message.text, UNIT_TEXT_CHARS))
        .collect()
}
