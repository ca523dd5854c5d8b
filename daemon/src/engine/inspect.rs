//! `inspect` and `memories`: a memory as it stands, for people finding out why it forgot (the
//! `recalld inspect` CLI, the web inspector). Read-only: one read transaction of what the op
//! needs (no memory lock, no traces written, no message bodies unless turns are asked for);
//! activations are computed as of the time asked, with the functions decorate uses.

use recalld_protocol::ops::{InspectArgs, MemoriesReply, MemorySummary};
use serde::Deserialize;
use serde_json::{json, Value};

use super::records::{
    Decision, Entity, Episode, EpisodeState, Fact, Job, MemoryRecord, StoredMessage, Trace, DECISIONS_KEPT,
};
use super::{activation, decisions, now_or, Engine, EngineError};
use crate::store::{keys, Reader, StoreError, Table};

/// Characters of a message's text `inspect` returns (the rest is cut, `truncated` says so).
pub const MESSAGE_CHARS: usize = 2_000;
/// Messages `inspect` returns at most for `turns` (`messages_truncated` says when more were).
pub const MAX_MESSAGES: usize = 1_000;
/// Waiting jobs listed at most (`lane.depth` counts them all).
const MAX_JOBS: usize = 64;
/// Points of an activation curve at most.
const MAX_CURVE: u64 = 1_000;
/// Activation counts a trace in full for its first minute: a curve's log-spaced times start
/// there.
const FLAT_SECONDS: f64 = 60.0;

/// What the op reads in its one transaction.
struct Loaded {
    record: MemoryRecord,
    episodes: Vec<Episode>,
    traces: Vec<Trace>,
    facts: Vec<Fact>,
    entities: Vec<Entity>,
    decisions: Vec<Decision>,
    decisions_kept: u64,
    jobs: Vec<Job>,
    /// The messages of the turns asked for, and whether more were left out.
    messages: Option<(Vec<StoredMessage>, bool)>,
}

impl Engine {
    /// `inspect`: the memory's record, episodes (activation as of `at`, traces, curve), facts,
    /// entities and edges, the latest decisions, the lane, and the messages of `turns`.
    pub fn inspect(&self, a: &InspectArgs) -> Result<Value, EngineError> {
        if a.decisions > DECISIONS_KEPT {
            return Err(EngineError::InvalidArgument(format!(
                "decisions must be at most {DECISIONS_KEPT}, got {}",
                a.decisions
            )));
        }
        if a.curve > MAX_CURVE {
            return Err(EngineError::InvalidArgument(format!(
                "curve must be at most {MAX_CURVE} points, got {}",
                a.curve
            )));
        }
        if let Some([first, last]) = a.turns {
            if first > last {
                return Err(EngineError::InvalidArgument(format!(
                    "turns must be [first, last] with first <= last, got [{first}, {last}]"
                )));
            }
        }
        let at = a.at.map(|t| now_or(Some(t))).transpose()?;
        let loaded = self
            .store
            .read(|r| load(r, a))?
            .ok_or_else(|| EngineError::NotFound(format!("no memory {:?}", a.memory)))?;
        // Now, or the memory's last change when that is later (a replay injects its times).
        let at = match at {
            Some(t) => t,
            None => now_or(None)?.max(loaded.record.updated_at),
        };
        Ok(self.render(a, at, loaded))
    }

    fn render(&self, a: &InspectArgs, at: f64, l: Loaded) -> Value {
        let Loaded {
            record,
            episodes,
            traces,
            facts,
            entities,
            decisions,
            decisions_kept,
            jobs,
            messages,
        } = l;
        // As of `at`: what was recorded later does not count yet.
        let known: Vec<Trace> = traces.iter().filter(|t| t.at <= at).cloned().collect();
        let act = activation::of_episodes(episodes.len(), &known, at);
        let sig = activation::significance_of_episodes(episodes.len(), &known);
        let fact_act = activation::of_facts(&facts, &known, at);
        let mut by_episode: Vec<Vec<&Trace>> = vec![Vec::new(); episodes.len()];
        for t in &traces {
            if let Some(v) = by_episode.get_mut(t.episode as usize) {
                v.push(t);
            }
        }
        let in_view = |e: &Episode| matches!(e.state, EpisodeState::Live | EpisodeState::Leaving);
        let latest_from = episodes.len().saturating_sub(a.episodes as usize);
        let listed: Vec<&Episode> = episodes
            .iter()
            .enumerate()
            .filter(|(i, e)| *i >= latest_from || in_view(e))
            .map(|(_, e)| e)
            .collect();
        let episodes_json: Vec<Value> = listed
            .iter()
            .map(|e| {
                let mine = by_episode.get(e.n as usize).map(Vec::as_slice).unwrap_or_default();
                let times = curve_times(e.at, at, a.curve as usize, mine);
                let values = activation::curve(mine, &times);
                json!({
                    "n": e.n,
                    "state": e.state,
                    "first_turn": e.first_turn,
                    "last_turn": e.last_turn,
                    "first_seq": e.first_seq,
                    "last_seq": e.last_seq,
                    "at": e.at,
                    "tokens": e.tokens,
                    "activation": act.get(e.n as usize).copied().unwrap_or(0.0),
                    "significance": sig.get(e.n as usize).copied().unwrap_or(0.0),
                    "facts": e.facts,
                    "acknowledged": e.acknowledged,
                    "changed_at": e.changed_at,
                    "traces": mine.iter().map(|t| json!({
                        "at": t.at, "kind": t.kind, "score": t.score, "counted": t.counted, "fact": t.fact,
                    })).collect::<Vec<_>>(),
                    "curve": times.iter().zip(&values).map(|(t, v)| json!([t, v])).collect::<Vec<_>>(),
                })
            })
            .collect();
        let facts_json: Vec<Value> = facts
            .iter()
            .map(|f| {
                // Recorded after `at`: not there yet.
                let activation = if f.at <= at {
                    fact_act.get(f.n as usize).copied()
                } else {
                    None
                };
                json!({
                    "n": f.n,
                    "note": f.note,
                    "subject": f.subject,
                    "object": f.object,
                    "milestone": f.milestone,
                    "status": f.status,
                    "subject_entity": f.subject_entity,
                    "object_entity": f.object_entity,
                    "first_turn": f.first_turn,
                    "last_turn": f.last_turn,
                    "episodes": f.episodes,
                    "note_seq": f.note_seq,
                    "restated_by": f.restated_by.iter().map(|r| r.fact).collect::<Vec<_>>(),
                    "valid_from": f.valid_from,
                    "valid_to": f.valid_to,
                    "at": f.at,
                    "activation": activation.unwrap_or(0.0),
                })
            })
            .collect();
        let mut reply = json!({
            "memory": a.memory,
            "at": at,
            "record": {
                "turns": record.turn,
                "messages": record.next_seq,
                "episodes": episodes.len(),
                "facts": facts.len(),
                "entities": entities.len(),
                "passages": record.next_passage,
                "ceiling": record.ceiling.unwrap_or(self.config.ceiling),
                "ceiling_source": if record.ceiling.is_some() { "memory" } else { "default" },
                "budget": record.last_budget,
                "created_at": record.created_at,
                "updated_at": record.updated_at,
                "last_user_at": record.last_user_at,
                "agent": record.agent,
                "user": record.user,
                "ratios": record.ratios,
                "handed_off": record.handed_off,
            },
            "episodes": episodes_json,
            "episodes_omitted": episodes.len() - listed.len(),
            "facts": facts_json,
            "entities": entities
                .iter()
                .map(|e| json!({"n": e.n, "name": e.name, "aliases": e.aliases}))
                .collect::<Vec<_>>(),
            "edges": super::graph::edges(&facts),
            "decisions": decisions,
            "decisions_kept": decisions_kept,
            "lane": lane(&jobs),
        });
        if let Some((messages, more)) = messages {
            let episode_of = |seq: u64| {
                let i = episodes.partition_point(|e| e.last_seq < seq);
                episodes.get(i).filter(|e| e.first_seq <= seq).map(|e| e.n)
            };
            reply["messages"] = messages
                .iter()
                .map(|m| {
                    let (text, truncated) = cut_text(&m.message.text, MESSAGE_CHARS);
                    json!({
                        "seq": m.seq,
                        "turn": m.turn,
                        "at": m.at,
                        "role": m.message.role,
                        "text": text,
                        "truncated": truncated,
                        "tokens": m.tokens,
                        "superseded": m.superseded_at.is_some(),
                        "note": m.note,
                        "episode": episode_of(m.seq),
                    })
                })
                .collect();
            reply["messages_truncated"] = json!(more);
        }
        reply
    }

    /// `memories`: every memory whose id starts with `prefix` (the caller's namespace), from
    /// their records alone, in id order.
    pub fn memories(&self, prefix: &str) -> Result<Value, EngineError> {
        let records: Vec<Summary> = self.store.read(|r| r.scan(Table::Memories, prefix.as_bytes()))?;
        let reply = MemoriesReply {
            memories: records
                .into_iter()
                .map(|m| MemorySummary {
                    memory: m.id,
                    messages: m.next_seq,
                    turns: m.turn,
                    episodes: m.next_episode,
                    facts: m.next_fact,
                    last_at: m.updated_at,
                    created_at: m.created_at,
                    agent: m.agent,
                    user: m.user,
                    ceiling: m.ceiling,
                })
                .collect(),
        };
        Ok(json!(reply))
    }
}

/// The part of a memory record `memories` shows (the rest, instructions included, is skipped
/// unread).
#[derive(Deserialize)]
struct Summary {
    id: String,
    created_at: f64,
    updated_at: f64,
    #[serde(default)]
    ceiling: Option<u64>,
    #[serde(default)]
    agent: Option<String>,
    #[serde(default)]
    user: Option<String>,
    next_seq: u64,
    turn: u64,
    #[serde(default)]
    next_episode: u64,
    #[serde(default)]
    next_fact: u64,
}

fn load(r: &Reader<'_>, a: &InspectArgs) -> Result<Option<Loaded>, StoreError> {
    let memory = a.memory.as_str();
    let Some(record) = r.get::<MemoryRecord>(Table::Memories, &keys::memory(memory))? else {
        return Ok(None);
    };
    let prefix = keys::memory_prefix(memory);
    let episodes: Vec<Episode> = r.scan(Table::Episodes, &prefix)?;
    let (decisions, decisions_kept) = decisions::latest(r, memory, a.decisions as usize)?;
    let messages = match a.turns {
        Some(turns) => Some(messages_of_turns(r, memory, &episodes, turns)?),
        None => None,
    };
    Ok(Some(Loaded {
        record,
        traces: r.scan(Table::Traces, &prefix)?,
        facts: r.scan(Table::Facts, &prefix)?,
        entities: r.scan(Table::Entities, &prefix)?,
        jobs: r.scan(Table::Jobs, &prefix)?,
        episodes,
        decisions,
        decisions_kept,
        messages,
    }))
}

/// The stored messages of turns `first..=last` (superseded ones and note calls included), at
/// most [`MAX_MESSAGES`]. Turns never decrease with seq, so the scan starts after the last
/// episode that ends before `first` and stops at the first message past `last`.
fn messages_of_turns(
    r: &Reader<'_>,
    memory: &str,
    episodes: &[Episode],
    [first, last]: [u64; 2],
) -> Result<(Vec<StoredMessage>, bool), StoreError> {
    let before = episodes.partition_point(|e| e.last_turn < first);
    let from = before.checked_sub(1).map_or(0, |i| episodes[i].last_seq + 1);
    let (mut out, mut more) = (Vec::new(), false);
    r.visit(
        Table::Messages,
        &keys::memory_prefix(memory),
        &keys::seq(memory, from),
        |_, m: StoredMessage| {
            if m.turn > last {
                return Ok(false);
            }
            if m.turn >= first {
                if out.len() == MAX_MESSAGES {
                    more = true;
                    return Ok(false);
                }
                out.push(m);
            }
            Ok(true)
        },
    )?;
    Ok((out, more))
}

/// The lane as `inspect` shows it: waiting jobs (the first [`MAX_JOBS`]), the oldest one's
/// wall-clock age, and parked jobs with their errors.
fn lane(jobs: &[Job]) -> Value {
    let now = super::state::wall_clock();
    let (waiting, parked): (Vec<&Job>, Vec<&Job>) = jobs.iter().partition(|j| !j.parked());
    json!({
        "depth": waiting.len(),
        "oldest_age_s": waiting.first().filter(|j| j.queued_at > 0.0).map_or(0.0, |j| (now - j.queued_at).max(0.0)),
        "jobs": waiting.iter().take(MAX_JOBS).map(|j| json!({
            "n": j.n, "kind": j.job.name(), "attempts": j.attempts,
        })).collect::<Vec<_>>(),
        "parked": parked.iter().map(|j| json!({
            "n": j.n, "kind": j.job.name(), "attempts": j.attempts, "error": j.error,
        })).collect::<Vec<_>>(),
    })
}

/// The times of an episode's activation curve from `from` (its encoding) to `to`: `points`
/// times log-spaced from its first minute on (so the early √-decay shows), and each counted
/// trace's time and the instant before it (so a renewal shows as a step). Empty when the
/// episode is later than `to` or no points are asked for.
pub(super) fn curve_times(from: f64, to: f64, points: usize, traces: &[&Trace]) -> Vec<f64> {
    if points == 0 || to < from {
        return Vec::new();
    }
    let span = to - from;
    let mut times = vec![from];
    if span > 0.0 && points > 1 {
        let start = FLAT_SECONDS.min(span);
        let steps = points - 1;
        for i in 0..steps - 1 {
            times.push(from + start * (span / start).powf(i as f64 / (steps - 1) as f64));
        }
        times.push(to);
    }
    for t in traces.iter().filter(|t| t.counted && t.at > from && t.at <= to) {
        times.push(t.at);
        times.push((t.at - 1e-3).max(from));
    }
    times.sort_by(f64::total_cmp);
    times.dedup();
    times
}

/// `text` cut to at most `chars` characters (at a character boundary); whether it was cut.
fn cut_text(text: &str, chars: usize) -> (&str, bool) {
    match text.char_indices().nth(chars) {
        Some((i, _)) => (&text[..i], true),
        None => (text, false),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::engine::records::TraceKind;

    fn trace(at: f64) -> Trace {
        Trace {
            episode: 0,
            n: 0,
            kind: TraceKind::Fact,
            at,
            score: 1.0,
            counted: true,
            fact: None,
        }
    }

    #[test]
    fn curve_times_are_log_spaced_from_the_first_minute_with_a_step_at_each_trace() {
        let renewal = trace(1000.0 + 7200.0);
        let times = curve_times(1000.0, 1000.0 + 86_400.0, 48, &[&trace(1000.0), &renewal]);
        assert_eq!(times[0], 1000.0);
        assert_eq!(times[1], 1060.0, "log spacing starts after the flat first minute");
        assert_eq!(*times.last().unwrap(), 1000.0 + 86_400.0);
        assert_eq!(times.len(), 48 + 2, "48 points and the renewal's step");
        assert!(times.windows(2).all(|w| w[0] < w[1]));
        assert!(times.contains(&renewal.at) && times.contains(&(renewal.at - 1e-3)));
        // Log-spaced: the gaps grow.
        assert!(times[2] - times[1] < times[30] - times[29]);
        assert!(curve_times(5000.0, 1000.0, 48, &[]).is_empty(), "an episode after `at`");
        assert_eq!(curve_times(1000.0, 1000.0, 48, &[]), vec![1000.0]);
        assert!(curve_times(1000.0, 2000.0, 0, &[]).is_empty());
    }

    #[test]
    fn texts_are_cut_at_a_character_boundary() {
        assert_eq!(cut_text("héllo", 2), ("hé", true));
        assert_eq!(cut_text("héllo", 5), ("héllo", false));
    }
}
