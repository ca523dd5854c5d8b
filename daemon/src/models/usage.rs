//! Usage counters: calls and tokens per kind (embed, judge), in total and per memory.

use std::collections::BTreeMap;
use std::sync::Mutex;

use serde::{Deserialize, Serialize};

/// Which model a call went to.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Kind {
    Embed,
    Judge,
}

/// Counts for one memory or the total (as `stats.models` shows them).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(default)]
pub struct Counts {
    pub embed_calls: u64,
    pub embed_tokens: u64,
    pub judge_calls: u64,
    pub judge_tokens: u64,
    /// Calls that ended in an error (after retries).
    pub errors: u64,
}

impl Counts {
    fn add(&mut self, kind: Kind, tokens: u64) {
        match kind {
            Kind::Embed => {
                self.embed_calls += 1;
                self.embed_tokens += tokens;
            }
            Kind::Judge => {
                self.judge_calls += 1;
                self.judge_tokens += tokens;
            }
        }
    }
}

/// Shared by the providers of one [`super::Models`]; cheap to update (one mutex).
#[derive(Debug, Default)]
pub struct Usage {
    inner: Mutex<UsageInner>,
}

#[derive(Debug, Default)]
struct UsageInner {
    total: Counts,
    memories: BTreeMap<String, Counts>,
}

impl Usage {
    /// Count one call (one embed call may cover many texts) and its tokens.
    pub(crate) fn record(&self, memory: &str, kind: Kind, tokens: u64) {
        let mut g = self.inner.lock().unwrap_or_else(|e| e.into_inner());
        g.total.add(kind, tokens);
        g.memories.entry(memory.to_string()).or_default().add(kind, tokens);
    }

    /// Count one failed call.
    pub(crate) fn record_error(&self, memory: &str) {
        let mut g = self.inner.lock().unwrap_or_else(|e| e.into_inner());
        g.total.errors += 1;
        g.memories.entry(memory.to_string()).or_default().errors += 1;
    }

    /// The totals so far.
    pub fn total(&self) -> Counts {
        self.inner.lock().unwrap_or_else(|e| e.into_inner()).total
    }

    /// The counts of one memory so far (zero when it made no call).
    pub fn memory(&self, memory: &str) -> Counts {
        let g = self.inner.lock().unwrap_or_else(|e| e.into_inner());
        g.memories.get(memory).copied().unwrap_or_default()
    }

    /// `{"total": Counts, "memories": {name: Counts}}`.
    pub fn snapshot(&self) -> serde_json::Value {
        let g = self.inner.lock().unwrap_or_else(|e| e.into_inner());
        serde_json::json!({ "total": g.total, "memories": g.memories })
    }
}
