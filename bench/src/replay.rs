//! Driving a real daemon through one LoCoMo conversation, over the socket, as an agent would.
//!
//! One memory per conversation. Sessions in order, each at its real date: turn `i` of a session
//! happens `turn_gap` seconds after the session starts, so days or weeks pass between sessions
//! and the daemon's sleep runs there. Speaker A is the user, speaker B the assistant. Each B turn
//! is one model call: decorate the new user messages (delta history), then report B's text as
//! the reply. User turns left at a session's end are decorated on their own.
//!
//! The model is simulated, openly: when a decorated request asks for notes (`info.note_ask`,
//! episodes `leaving` with their turn ranges), the reply also carries one note call whose notes
//! are the conversation's own `observation` records citing the leaving turns (each written once;
//! one empty note when none cites them). Subject is the observation's speaker; object its first
//! capitalised name other than the speaker (else empty): a simple stand-in for a model's triple.
//!
//! Determinism: before every decorate or report that follows at least `quiet_gap` seconds of
//! replayed time (by default every one: turns are 30 s apart), the replay calls `quiet`, which
//! waits until the memory's background lane has nothing queued, as the real gap would have
//! allowed. So a replay gives the same requests every time.
//!
//! Each question is asked as a new user message with `dry_run: true` (nothing stored): by
//! default after the last session, `question_delay` after its last turn (questions about the
//! past); with [`Ask::AfterEvidence`], right after the session that holds its last evidence turn,
//! where the next turn would come (questions about the conversation in progress).

use std::collections::{HashMap, HashSet};
use std::time::Instant;

use recalld::client::{Client, ClientError};
use serde_json::{json, Value};

use crate::locomo::{Conversation, Observation};

pub const MODEL: &str = "replay-simulated";

/// When the questions are asked (`recalld-bench replay --ask`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, clap::ValueEnum)]
pub enum Ask {
    /// After the last session: questions about the past.
    #[default]
    End,
    /// Each right after the session holding its last evidence turn, as the conversation's next
    /// message: questions about the conversation in progress.
    AfterEvidence,
}

#[derive(Debug, Clone)]
pub struct Options {
    pub ceiling: u64,
    pub ask: Ask,
    pub turn_gap_s: f64,
    pub quiet_gap_s: f64,
    pub quiet_timeout_ms: u64,
    pub question_delay_s: f64,
}

impl Default for Options {
    fn default() -> Self {
        Options {
            ceiling: 8_000,
            ask: Ask::End,
            turn_gap_s: 30.0,
            quiet_gap_s: 10.0,
            quiet_timeout_ms: 120_000,
            question_delay_s: 3_600.0,
        }
    }
}

/// One question as recalld answered it.
#[derive(Debug, Clone)]
pub struct Asked {
    pub question: usize,
    /// The conversation's turns said when it was asked (its first `said`): what a baseline
    /// may choose from.
    pub said: usize,
    pub request: Value,
    pub tokens: u64,
    /// recalld's own account of the recall (`info.recall`), for looking into a miss.
    pub recall: Value,
}

#[derive(Debug, Clone, Default, serde::Serialize)]
pub struct Stats {
    pub decorates: u64,
    pub reports: u64,
    pub note_calls: u64,
    pub notes_written: u64,
    pub quiet_waits: u64,
    pub quiet_ms: u64,
    /// `quiet` calls that timed out with jobs left (then the replay is not deterministic).
    pub quiet_timeouts: u64,
    pub seconds: f64,
}

/// The system message every request of the conversation starts with (baselines use it too).
pub fn system_prompt(conv: &Conversation) -> String {
    format!(
        "You are {}, talking with your friend {}. Reply as {}.",
        conv.speaker_b, conv.speaker_a, conv.speaker_b
    )
}

struct Run<'a> {
    client: &'a mut Client,
    conv: &'a Conversation,
    memory: &'a str,
    o: &'a Options,
    system: String,
    /// recalld turn (a turn starts at each user message) of each LoCoMo turn.
    turn_of: HashMap<&'a str, u64>,
    noted: HashSet<usize>,
    last_op_at: Option<f64>,
    calls: u64,
    stats: Stats,
}

impl<'a> Run<'a> {
    fn settle(&mut self, now: f64) -> Result<(), ClientError> {
        if self.last_op_at.is_none_or(|t| now - t >= self.o.quiet_gap_s) {
            let t = Instant::now();
            let left = self.client.quiet(self.memory, self.o.quiet_timeout_ms)?;
            self.stats.quiet_waits += 1;
            self.stats.quiet_ms += t.elapsed().as_millis() as u64;
            if left > 0 {
                self.stats.quiet_timeouts += 1;
            }
        }
        self.last_op_at = Some(now);
        Ok(())
    }

    fn decorate(&mut self, messages: Vec<Value>, now: f64, dry_run: bool) -> Result<Value, ClientError> {
        self.settle(now)?;
        let mut all = vec![json!({"role": "system", "content": self.system})];
        all.extend(messages);
        self.stats.decorates += u64::from(!dry_run);
        self.client.call(
            "decorate",
            json!({
                "memory": self.memory,
                "request": {"model": MODEL, "messages": all},
                "now": now,
                "ceiling": self.o.ceiling,
                "history": "delta",
                "dry_run": dry_run,
            }),
        )
    }

    /// The notes a model would write for the episodes the request says are leaving.
    fn notes_for(&mut self, info: &Value) -> Option<Vec<Value>> {
        if !info.get("note_ask").and_then(Value::as_bool).unwrap_or(false) {
            return None;
        }
        let ranges = leaving_turns(info);
        let leaving = |dia: &str| {
            self.turn_of
                .get(dia)
                .is_some_and(|t| ranges.iter().any(|(a, b)| (a..=b).contains(&t)))
        };
        let mut notes = Vec::new();
        let mut taken = Vec::new();
        for (i, o) in self.conv.observations.iter().enumerate() {
            if !self.noted.contains(&i) && o.cites.iter().any(|d| leaving(d)) {
                taken.push(i);
                notes.push(json!({
                    "note": o.text,
                    "subject": o.speaker,
                    "object": object_of(o),
                    "milestone": false,
                }));
            }
        }
        self.noted.extend(taken);
        if notes.is_empty() {
            notes.push(json!({"note": "", "subject": "", "object": "", "milestone": false}));
        }
        Some(notes)
    }

    /// Asks questions `which` as dry runs at `now`, `said` turns into the conversation.
    fn ask(&mut self, which: impl Iterator<Item = usize>, said: usize, now: f64) -> Result<Vec<Asked>, ClientError> {
        let mut asked = Vec::new();
        for qi in which {
            let text = &self.conv.questions[qi].text;
            let d = self.decorate(vec![json!({"role": "user", "content": text})], now, true)?;
            asked.push(Asked {
                question: qi,
                said,
                tokens: d["info"]["request_tokens"].as_u64().unwrap_or(0),
                request: d["request"].clone(),
                recall: d["info"]["recall"].clone(),
            });
        }
        Ok(asked)
    }

    fn report(&mut self, text: Option<&str>, notes: Option<Vec<Value>>, now: f64) -> Result<(), ClientError> {
        self.settle(now)?;
        self.calls += 1;
        let mut message = json!({"role": "assistant", "content": text});
        if let Some(notes) = notes {
            self.stats.note_calls += 1;
            self.stats.notes_written += notes.iter().filter(|n| n["note"] != "").count() as u64;
            let arguments = json!({ "notes": notes }).to_string();
            message["tool_calls"] = json!([{
                "id": format!("call_note_{}", self.calls),
                "type": "function",
                "function": {"name": "note", "arguments": arguments},
            }]);
        }
        let finish = if text.is_some() { "stop" } else { "tool_calls" };
        self.stats.reports += 1;
        self.client.call(
            "report",
            json!({
                "memory": self.memory,
                "response": {
                    "id": format!("replay-{}", self.calls),
                    "object": "chat.completion",
                    "created": now as i64,
                    "model": MODEL,
                    "choices": [{"index": 0, "message": message, "finish_reason": finish}],
                },
                "now": now,
            }),
        )?;
        Ok(())
    }
}

/// The object of an observation's triple: its first capitalised name (not sentence-initial)
/// other than the speaker's, else empty.
fn object_of(o: &Observation) -> String {
    let words: Vec<&str> = o.text.split_whitespace().collect();
    let clean = |w: &str| w.trim_matches(|c: char| !c.is_alphanumeric()).to_owned();
    let mut i = 1;
    while i < words.len() {
        let w = clean(words[i]);
        if w.chars().next().is_some_and(char::is_uppercase) && w != o.speaker && !w.starts_with(&o.speaker) {
            let mut name = vec![w];
            while i + 1 < words.len() && clean(words[i + 1]).chars().next().is_some_and(char::is_uppercase) {
                i += 1;
                name.push(clean(words[i]));
            }
            return name.join(" ");
        }
        i += 1;
    }
    String::new()
}

/// The turn ranges (first, last) of the episodes a decorate's `info` says are leaving: what a
/// note ask asks the model to note.
pub fn leaving_turns(info: &Value) -> Vec<(u64, u64)> {
    info.get("episodes")
        .and_then(Value::as_array)
        .into_iter()
        .flatten()
        .filter(|e| e.get("state").and_then(Value::as_str) == Some("leaving"))
        .filter_map(|e| {
            let t = e.get("turns")?.as_array()?;
            Some((t.first()?.as_u64()?, t.get(1)?.as_u64()?))
        })
        .collect()
}

/// The session (its position in `conv.sessions`) holding each question's last evidence turn;
/// None for a question not asked (no evidence, or a category other than 1–4).
pub fn last_evidence_session(conv: &Conversation) -> Vec<Option<usize>> {
    let session_of: HashMap<&str, usize> = conv
        .sessions
        .iter()
        .enumerate()
        .flat_map(|(si, s)| s.turns.iter().map(move |t| (t.dia.as_str(), si)))
        .collect();
    conv.questions
        .iter()
        .map(|q| {
            if q.evidence.is_empty() || !(1..=4).contains(&q.category) {
                return None;
            }
            q.evidence
                .iter()
                .filter_map(|d| session_of.get(d.as_str()).copied())
                .max()
        })
        .collect()
}

/// Replays `conv` into `memory` and asks its questions (dry runs) when `o.ask` says. `progress`
/// gets a line per session.
pub fn replay(
    client: &mut Client,
    conv: &Conversation,
    memory: &str,
    o: &Options,
    progress: &mut dyn FnMut(String),
) -> Result<(Vec<Asked>, Stats), ClientError> {
    let started = Instant::now();
    let mut run = Run {
        client,
        conv,
        memory,
        o,
        system: system_prompt(conv),
        turn_of: HashMap::new(),
        noted: HashSet::new(),
        last_op_at: None,
        calls: 0,
        stats: Stats::default(),
    };
    let mut turn = 0u64;
    let mut last_at = 0.0;
    let mut said = 0;
    let asked_after = last_evidence_session(conv);
    let mut asked = Vec::new();
    for (si, s) in conv.sessions.iter().enumerate() {
        let mut pending: Vec<Value> = Vec::new();
        let mut pending_at = s.at;
        for (i, t) in s.turns.iter().enumerate() {
            let now = s.at + i as f64 * o.turn_gap_s;
            last_at = now;
            if t.by_a {
                turn += 1;
                run.turn_of.insert(t.dia.as_str(), turn);
                pending.push(json!({"role": "user", "content": t.text}));
                pending_at = now;
                continue;
            }
            run.turn_of.insert(t.dia.as_str(), turn);
            let asked_at = if pending.is_empty() { now } else { pending_at };
            let d = run.decorate(std::mem::take(&mut pending), asked_at, false)?;
            let notes = run.notes_for(&d["info"]);
            run.report(Some(&t.text), notes, now)?;
        }
        if !pending.is_empty() {
            let d = run.decorate(std::mem::take(&mut pending), pending_at, false)?;
            if let Some(notes) = run.notes_for(&d["info"]) {
                run.report(None, Some(notes), pending_at + o.turn_gap_s)?;
            }
        }
        said += s.turns.len();
        if o.ask == Ask::AfterEvidence {
            // Where the session's next turn would come; the gap lets the lane finish first.
            let here = (0..conv.questions.len()).filter(|&qi| asked_after[qi] == Some(si));
            asked.extend(run.ask(here, said, last_at + o.turn_gap_s)?);
        }
        progress(format!(
            "{memory}: session {}/{} ({} turns) {:.1}s",
            si + 1,
            conv.sessions.len(),
            conv.turns().count(),
            started.elapsed().as_secs_f64()
        ));
    }
    if o.ask == Ask::End {
        // The questions come after a long gap: let the lane finish first.
        run.last_op_at = None;
        let all = (0..conv.questions.len()).filter(|&qi| asked_after[qi].is_some());
        asked.extend(run.ask(all, said, last_at + o.question_delay_s)?);
    }
    run.stats.seconds = started.elapsed().as_secs_f64();
    Ok((asked, run.stats))
}
