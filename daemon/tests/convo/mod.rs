//! A small agent for tests: a Chat conversation that decorates and reports turn by turn, its
//! replies carrying note calls, so memories fill with messages, episodes, facts and traces.

#![allow(dead_code)]

use recalld::client::{Client, ClientError};
use serde_json::{json, Value};

pub struct Convo {
    pub memory: String,
    pub history: Vec<Value>,
    pub turn: u64,
    pub now: f64,
    /// Token ceiling sent with every decorate: low, so history is cut into episodes early.
    pub ceiling: u64,
    /// The current turn's user message was sent but not yet answered.
    pub pending_user: bool,
    /// Replies carry a note call every this many turns.
    pub note_every: u64,
}

impl Convo {
    pub fn new(memory: &str) -> Convo {
        Convo {
            memory: memory.into(),
            history: vec![json!({"role": "system", "content": "You are a careful assistant."})],
            turn: 0,
            now: 1_700_000_000.0,
            ceiling: 4000,
            pending_user: false,
            note_every: 1,
        }
    }

    /// One user message for turn `n`: distinct words so messages never align by accident.
    pub fn user_text(&self, n: u64) -> String {
        format!(
            "Turn {n} of {}: please remember that the {} crate ships version {}.{} and that its maintainer lives in city number {}. {}",
            self.memory,
            ["alpha", "bravo", "charlie", "delta", "echo"][(n % 5) as usize],
            n,
            n * 7 % 13,
            n * 31 % 97,
            "Some filler to give the message a realistic size for the budget. ".repeat(3)
        )
    }

    /// decorate for the next user message; returns the reply value.
    pub fn decorate(&mut self, c: &mut Client) -> Result<Value, ClientError> {
        let n = self.turn + 1;
        let mut messages = self.history.clone();
        messages.push(json!({"role": "user", "content": self.user_text(n)}));
        self.now += 60.0;
        let r = c.call(
            "decorate",
            json!({"memory": self.memory, "now": self.now, "ceiling": self.ceiling,
                   "request": {"model": "gpt-4o", "messages": messages}}),
        )?;
        self.history = messages;
        self.turn = n;
        Ok(r)
    }

    /// Whether turn `n`'s reply carries a note call.
    pub fn notes_on(&self, n: u64) -> bool {
        n.is_multiple_of(self.note_every)
    }

    /// The model's reply to the current turn: text, plus a note call with one fact on the
    /// turns that have one.
    pub fn reply(&self) -> Value {
        let n = self.turn;
        if !self.notes_on(n) {
            return json!({
                "id": format!("chatcmpl-{}-{n}", self.memory),
                "object": "chat.completion",
                "model": "gpt-4o",
                "choices": [{"index": 0, "finish_reason": "stop", "message": {
                    "role": "assistant", "content": format!("Noted turn {n} for {}.", self.memory)}}],
                "usage": {"prompt_tokens": 900, "completion_tokens": 40, "total_tokens": 940},
            });
        }
        let note = json!({"notes": [{
            "note": format!("{} fact {n}: crate version {n}.{}", self.memory, n * 7 % 13),
            "subject": format!("crate-{}", n % 5),
            "object": format!("version {n}"),
            "milestone": n.is_multiple_of(4),
        }]});
        json!({
            "id": format!("chatcmpl-{}-{n}", self.memory),
            "object": "chat.completion",
            "model": "gpt-4o",
            "choices": [{"index": 0, "finish_reason": "tool_calls", "message": {
                "role": "assistant",
                "content": format!("Noted turn {n} for {}.", self.memory),
                "tool_calls": [{"id": format!("call_note_{}_{n}", self.memory), "type": "function",
                    "function": {"name": "note", "arguments": note.to_string()}}],
            }}],
            "usage": {"prompt_tokens": 900, "completion_tokens": 40, "total_tokens": 940},
        })
    }

    /// report for the current turn; on success the assistant text joins the history.
    pub fn report(&mut self, c: &mut Client) -> Result<Value, ClientError> {
        self.now += 5.0;
        let r = c.call(
            "report",
            json!({"memory": self.memory, "now": self.now, "response": self.reply()}),
        )?;
        self.history
            .push(json!({"role": "assistant", "content": format!("Noted turn {} for {}.", self.turn, self.memory)}));
        Ok(r)
    }

    pub fn turn_trip(&mut self, c: &mut Client) -> Result<(), ClientError> {
        self.decorate(c)?;
        self.report(c)?;
        Ok(())
    }
}

/// Waits until the lanes have run every queued job (stats `jobs_pending` is 0). A debug build's
/// lane is slow, so this fails only when the queue stops shrinking for 60 s (stuck, not slow),
/// or after 5 minutes in all.
pub fn drain(c: &mut Client) {
    use std::time::{Duration, Instant};
    let started = Instant::now();
    let (mut least, mut since) = (u64::MAX, Instant::now());
    loop {
        let stats = c.call("stats", json!({})).unwrap();
        let pending = stats["jobs_pending"].as_u64().unwrap();
        if pending == 0 {
            return;
        }
        if pending < least {
            (least, since) = (pending, Instant::now());
        }
        assert!(
            since.elapsed() < Duration::from_secs(60) && started.elapsed() < Duration::from_secs(300),
            "{pending} jobs still queued ({:.0} s in all, none done in the last {:.0} s): {}",
            started.elapsed().as_secs_f64(),
            since.elapsed().as_secs_f64(),
            stats["lanes"]
        );
        std::thread::sleep(Duration::from_millis(20));
    }
}

impl Convo {
    /// decorate for the current step: the next user message, or the same one again when an
    /// earlier attempt may have been stored but its answer was lost.
    pub fn decorate_again(&mut self, c: &mut Client) -> Result<Value, ClientError> {
        if self.pending_user {
            let mut messages = self.history.clone();
            messages.push(json!({"role": "user", "content": self.user_text(self.turn)}));
            self.now += 1.0;
            let r = c.call(
                "decorate",
                json!({"memory": self.memory, "now": self.now, "ceiling": self.ceiling,
                       "request": {"model": "gpt-4o", "messages": messages}}),
            )?;
            self.history = messages;
            self.pending_user = false;
            return Ok(r);
        }
        self.turn += 1;
        self.pending_user = true;
        self.decorate_again(c)
    }

    /// report for the current turn without touching the history (safe to repeat).
    pub fn report_once(&mut self, c: &mut Client) -> Result<Value, ClientError> {
        self.now += 1.0;
        c.call(
            "report",
            json!({"memory": self.memory, "now": self.now, "response": self.reply()}),
        )
    }

    /// The report was answered: its assistant text joins the history.
    pub fn acknowledge_report(&mut self) {
        self.history
            .push(json!({"role": "assistant", "content": format!("Noted turn {} for {}.", self.turn, self.memory)}));
    }
}
