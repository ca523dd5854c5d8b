//! import: a memory created from what `export` returned, every record as it was (sequence
//! numbers, times, turns, episodes, traces, facts, queued jobs, decisions), so export → import
//! → export changes nothing but the memory's name (and a `Reembed` job queued for the
//! vectors). Derived records are rebuilt from these: the graph's aliases and edges at once,
//! vectors and the search indexes in the lane.

use serde::de::DeserializeOwned;
use serde_json::{json, Value};

use super::records::{
    Decision, Entity, Episode, Fact, Job, JobKind, MemoryRecord, Passage, RecallBlock, Source, StoredMessage, Trace,
    UnitScore, DECISIONS_KEPT,
};
use super::{graph, state, Engine, EngineError};
use crate::formats::{self, Format, Role};
use crate::store::{keys, Table};

impl Engine {
    /// Creates `memory` from an export. The memory must not exist (`conflict`); a malformed
    /// export is `invalid_argument` naming the field, and nothing is written.
    pub fn import(&self, memory: &str, export: &Value) -> Result<Value, EngineError> {
        let lock = self.lock(memory);
        let _held = lock.lock().unwrap_or_else(|e| e.into_inner());
        if !export.is_object() {
            return Err(EngineError::InvalidArgument("export must be a map".into()));
        }
        let mut record: MemoryRecord = field(export, "record")?;
        record.id = memory.to_owned();
        // Every history message's print is written below, whatever the export said.
        record.prints_whole = true;
        // And every passage's mentions.
        record.mentions_whole = true;
        // The export lists every version of the instructions in the record; they are written
        // to their table below.
        record.instructions_stored = 0;
        record.instructions_fingerprint = None;
        let instructions = record.take_instructions();
        let messages = export["messages"]
            .as_array()
            .ok_or_else(|| EngineError::InvalidArgument("export.messages must be a list".into()))?
            .iter()
            .enumerate()
            .map(|(i, m)| message(m, i))
            .collect::<Result<Vec<_>, _>>()?;
        let episodes: Vec<Episode> = field(export, "episodes")?;
        let traces: Vec<Trace> = field(export, "traces")?;
        let facts: Vec<Fact> = field(export, "facts")?;
        let mut jobs: Vec<Job> = if export.get("jobs").is_some() {
            field(export, "jobs")?
        } else {
            Vec::new()
        };
        let units: Vec<UnitScore> = if export.get("units").is_some() {
            field(export, "units")?
        } else {
            Vec::new()
        };
        let entities: Vec<Entity> = if export.get("entities").is_some() {
            field(export, "entities")?
        } else {
            Vec::new()
        };
        let mut episodes = episodes;
        let passages: Vec<Passage> = if export.get("passages").is_some() {
            field(export, "passages")?
        } else {
            // An export from before passages: the lane cuts the sealed episodes again.
            for e in &mut episodes {
                e.passaged = false;
            }
            record.next_passage = 0;
            Vec::new()
        };
        if passages.iter().enumerate().any(|(i, p)| p.n != i as u64) || passages.len() as u64 > record.next_passage {
            return Err(EngineError::InvalidArgument(
                "export.passages must be numbered 0, 1, … below record.next_passage".into(),
            ));
        }
        let recalls: Vec<RecallBlock> = if export.get("recalls").is_some() {
            field(export, "recalls")?
        } else {
            Vec::new()
        };
        let mut decisions: Vec<Decision> = if export.get("decisions").is_some() {
            field(export, "decisions")?
        } else {
            Vec::new()
        };
        check_numbering(&record, &messages, &episodes, &facts, &jobs)?;
        let mut last: Option<u64> = None;
        for d in &decisions {
            if last.is_some_and(|l| d.n <= l) || d.n >= record.next_decision {
                return Err(EngineError::InvalidArgument(format!(
                    "export.decisions: numbers must increase and stay below record.next_decision ({}); found {}",
                    record.next_decision, d.n
                )));
            }
            last = Some(d.n);
        }
        // A diagnostic log: only the latest are kept, as decorate keeps them.
        decisions.retain(|d| d.n + DECISIONS_KEPT >= record.next_decision);

        let exists = self.store.read(|r| {
            Ok(r.get::<serde::de::IgnoredAny>(Table::Memories, &keys::memory(memory))?
                .is_some())
        })?;
        if exists {
            return Err(EngineError::Conflict(format!(
                "memory {memory:?} exists; forget it first or import under another name"
            )));
        }
        if entities.iter().enumerate().any(|(i, e)| e.n != i as u64) || entities.len() as u64 > record.next_entity {
            return Err(EngineError::InvalidArgument(
                "export.entities must be numbered 0, 1, … below record.next_entity".into(),
            ));
        }
        // Vectors are derived: embedded again by the lane (a Reembed job embeds what has none,
        // then queues the indexing); without any, the indexes are built by an Index job.
        if !facts.is_empty() || !entities.is_empty() || !passages.is_empty() {
            jobs.push(Job {
                n: record.next_job,
                at: record.updated_at,
                job: JobKind::Reembed,
                queued_at: state::wall_clock(),
                attempts: 0,
                error: None,
            });
            record.next_job += 1;
        } else if episodes.iter().any(|e| !e.passaged) {
            jobs.push(Job {
                n: record.next_job,
                at: record.updated_at,
                job: JobKind::Index,
                queued_at: state::wall_clock(),
                attempts: 0,
                error: None,
            });
            record.next_job += 1;
        }
        record.queued_jobs = Some(jobs.len() as u64);
        let id = memory;
        self.store.write(|w| {
            for (n, version) in &instructions {
                w.put(Table::Instructions, &keys::seq(id, *n), version)?;
            }
            for u in &units {
                w.put(Table::Units, &keys::seq(id, u.start_seq), u)?;
            }
            for e in &entities {
                w.put(Table::Entities, &keys::seq(id, e.n), e)?;
                for name in std::iter::once(&e.name).chain(&e.aliases) {
                    w.put(Table::Aliases, &keys::name(id, &graph::norm(name)), &e.n)?;
                }
            }
            for f in &facts {
                if let (Some(s), Some(o)) = (f.subject_entity, f.object_entity) {
                    w.put(Table::Edges, &keys::seq2(id, s, f.n), &o)?;
                    w.put(Table::Edges, &keys::seq2(id, o, f.n), &s)?;
                }
            }
            for m in &messages {
                w.put(Table::Messages, &keys::seq(id, m.seq), m)?;
                if m.in_history() {
                    w.put(Table::Prints, &keys::seq2(id, m.fingerprint, m.seq), &())?;
                }
            }
            for e in &episodes {
                w.put(Table::Episodes, &keys::seq(id, e.n), e)?;
            }
            for t in &traces {
                w.put(Table::Traces, &keys::seq2(id, t.episode, t.n), t)?;
            }
            for f in &facts {
                w.put(Table::Facts, &keys::seq(id, f.n), f)?;
            }
            for p in &passages {
                w.put(Table::Passages, &keys::seq(id, p.n), p)?;
                super::state::write_mentions(w, id, p)?;
            }
            for b in &recalls {
                super::state::write_recall(w, id, b)?;
            }
            for j in &jobs {
                w.put(Table::Jobs, &keys::seq(id, j.n), j)?;
            }
            for d in &decisions {
                w.put(Table::Decisions, &keys::seq(id, d.n), d)?;
            }
            w.put(Table::Memories, &keys::memory(id), &record)
        })?;
        if !jobs.is_empty() {
            self.notify_lane(memory);
        }
        Ok(json!({
            "memory": memory,
            "messages": messages.len(),
            "episodes": episodes.len(),
            "traces": traces.len(),
            "facts": facts.len(),
            "entities": entities.len(),
            "decisions": decisions.len(),
            "jobs": jobs.len(),
        }))
    }
}

fn field<T: DeserializeOwned>(export: &Value, key: &str) -> Result<T, EngineError> {
    let v = export
        .get(key)
        .ok_or_else(|| EngineError::InvalidArgument(format!("export.{key} is missing")))?;
    serde_json::from_value(v.clone()).map_err(|e| EngineError::InvalidArgument(format!("export.{key}: {e}")))
}

/// One exported message back to its stored form; the message itself is re-read from `raw`
/// so its fingerprint (what alignment compares) is the one it had.
fn message(m: &Value, i: usize) -> Result<StoredMessage, EngineError> {
    let at = format!("export.messages[{i}]");
    let get = |k: &str| -> Result<&Value, EngineError> {
        m.get(k)
            .ok_or_else(|| EngineError::InvalidArgument(format!("{at}.{k} is missing")))
    };
    let parse = |k: &str| -> Result<Value, EngineError> { get(k).cloned() };
    let raw = get("message")?;
    let format: Format = match m.get("format") {
        Some(f) => {
            serde_json::from_value(f.clone()).map_err(|e| EngineError::InvalidArgument(format!("{at}.format: {e}")))?
        }
        // Exports from before `format` was written: Responses items carry a `type` or are a
        // bare string; Chat messages never do.
        None if raw.is_string() || raw.get("type").is_some() => Format::Responses,
        None => Format::ChatCompletions,
    };
    let message = formats::parse_stored(raw, format, &format!("{at}.message"))?;
    let role: Role =
        serde_json::from_value(parse("role")?).map_err(|e| EngineError::InvalidArgument(format!("{at}.role: {e}")))?;
    if role != message.role {
        return Err(EngineError::InvalidArgument(format!(
            "{at}: role {role:?} does not match the message's own ({:?})",
            message.role
        )));
    }
    let num = |k: &str| -> Result<u64, EngineError> {
        get(k)?
            .as_u64()
            .ok_or_else(|| EngineError::InvalidArgument(format!("{at}.{k} must be a whole number")))
    };
    let source: Source = serde_json::from_value(parse("source")?)
        .map_err(|e| EngineError::InvalidArgument(format!("{at}.source: {e}")))?;
    let when = get("at")?
        .as_f64()
        .ok_or_else(|| EngineError::InvalidArgument(format!("{at}.at must be a number")))?;
    Ok(StoredMessage {
        seq: num("seq")?,
        turn: num("turn")?,
        at: when,
        source,
        fingerprint: message.fingerprint(),
        tokens: u32::try_from(num("tokens")?)
            .map_err(|_| EngineError::InvalidArgument(format!("{at}.tokens is out of range")))?,
        superseded_at: m.get("superseded_at").and_then(Value::as_f64),
        note: m.get("note").and_then(Value::as_bool).unwrap_or(false),
        message,
        chain: None,
    })
}

/// Numbers must be what the engine would have given: in order, unique, below the record's
/// next numbers, so records written after the import never collide with imported ones.
fn check_numbering(
    record: &MemoryRecord,
    messages: &[StoredMessage],
    episodes: &[Episode],
    facts: &[Fact],
    jobs: &[Job],
) -> Result<(), EngineError> {
    let increasing = |ns: &mut dyn Iterator<Item = u64>, next: u64, what: &str| -> Result<(), EngineError> {
        let mut last: Option<u64> = None;
        for n in ns {
            if last.is_some_and(|l| n <= l) || n >= next {
                return Err(EngineError::InvalidArgument(format!(
                    "export.{what}: numbers must increase and stay below the record's next ({next}); found {n}"
                )));
            }
            last = Some(n);
        }
        Ok(())
    };
    increasing(&mut messages.iter().map(|m| m.seq), record.next_seq, "messages")?;
    increasing(&mut facts.iter().map(|f| f.n), record.next_fact, "facts")?;
    increasing(&mut jobs.iter().map(|j| j.n), record.next_job, "jobs")?;
    for (i, e) in episodes.iter().enumerate() {
        if e.n != i as u64 || e.n >= record.next_episode {
            return Err(EngineError::InvalidArgument(format!(
                "export.episodes[{i}]: episodes must be numbered 0, 1, 2, … below the record's next ({})",
                record.next_episode
            )));
        }
    }
    Ok(())
}
