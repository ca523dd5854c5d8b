//! One simulated agent working in one memory, for the load mode: it plays traces as sessions
//! (see `traces`), sending the session's history so far with each model call as an agent
//! would (`history: "full"`, the daemon aligns it), and a simulated model answers with the
//! trace's next assistant message.
//!
//! The model answers note asks, openly by rule: when decorate's `info.note_ask` says so, the
//! reply also holds a note call with up to three facts, each the opening words of a
//! user message of the leaving episodes' turns (as remembered by the agent), spread over them.
//! So episodes seal and fade as in real use. Time is simulated: `turn_gap_s` between calls,
//! `session_gap_s` between sessions.

use std::collections::BTreeMap;

use serde::Serialize;
use serde_json::{json, Value};

use crate::traces::{self, Trace};

pub const MODEL: &str = "load-simulated";

/// How many user-message openings the agent remembers for notes (older turns get an empty
/// note: the fade leaves the least active episodes first, rarely ones this old).
const REMEMBERED_TURNS: usize = 4_000;

/// Facts per note call: "a few", as a model writes; each costs the lane a judgment per
/// remembered episode, so this sets much of the lane's load.
const FACTS_PER_NOTE: usize = 3;

/// A `decorate`'s arguments, borrowing the agent's session.
#[derive(Serialize)]
pub struct DecorateArgs<'s> {
    memory: &'s str,
    request: ChatRequest<'s>,
    now: f64,
    ceiling: u64,
}

#[derive(Serialize)]
struct ChatRequest<'s> {
    model: &'static str,
    messages: &'s [Value],
    #[serde(skip_serializing_if = "Option::is_none")]
    tools: Option<&'s [Value]>,
    /// `messages` and `tools` as MessagePack, encoded once a session.
    #[serde(skip)]
    packed: &'s Packed,
}

/// A session's messages and tools encoded once: a client resends the whole history with every
/// call, and encoding it again each time was a fifth of the load benchmark's own CPU, taken
/// from the two cores the daemon it measures runs on.
#[derive(Default)]
struct Packed {
    messages: Vec<Vec<u8>>,
    tools: Vec<u8>,
}

impl Packed {
    fn of(session: &[Value], tools: &[Value]) -> Packed {
        fn pack<T: Serialize + ?Sized>(v: &T) -> Vec<u8> {
            rmp_serde::to_vec(v).expect("JSON values always encode")
        }
        Packed {
            messages: session.iter().map(pack).collect(),
            tools: pack(tools),
        }
    }
}

impl DecorateArgs<'_> {
    /// The arguments as MessagePack, as `rmp_serde` writes them from their JSON form, but the
    /// messages and tools written as the bytes they were encoded to once.
    pub fn write_msgpack(&self, out: &mut impl std::io::Write) -> Result<(), String> {
        use rmp::encode::{write_array_len, write_f64, write_map_len, write_str, write_uint};
        let r = &self.request;
        let err = |e: rmp::encode::ValueWriteError| e.to_string();
        write_map_len(out, 4).map_err(err)?;
        write_str(out, "memory").map_err(err)?;
        write_str(out, self.memory).map_err(err)?;
        write_str(out, "request").map_err(err)?;
        write_map_len(out, 2 + u32::from(r.tools.is_some())).map_err(err)?;
        write_str(out, "model").map_err(err)?;
        write_str(out, r.model).map_err(err)?;
        write_str(out, "messages").map_err(err)?;
        write_array_len(out, r.messages.len() as u32).map_err(err)?;
        for m in &r.packed.messages[..r.messages.len()] {
            out.write_all(m).map_err(|e| e.to_string())?;
        }
        if r.tools.is_some() {
            write_str(out, "tools").map_err(err)?;
            out.write_all(&r.packed.tools).map_err(|e| e.to_string())?;
        }
        write_str(out, "now").map_err(err)?;
        write_f64(out, self.now).map_err(|e| e.to_string())?;
        write_str(out, "ceiling").map_err(err)?;
        write_uint(out, self.ceiling).map_err(|e| e.to_string())?;
        Ok(())
    }
}

pub struct Agent<'a> {
    pub memory: String,
    index: usize,
    traces: &'a [Trace],
    ceiling: u64,
    turn_gap_s: f64,
    session_gap_s: f64,
    sessions: usize,
    session: Vec<Value>,
    tools: Vec<Value>,
    packed: Packed,
    /// The first message of `session` not yet sent to the daemon.
    next: usize,
    /// The assistant message the pending call is answered with.
    answer: Option<usize>,
    now: f64,
    /// recalld's turn numbering: each user message opens the next turn.
    turn: u64,
    openings: BTreeMap<u64, String>,
    /// History messages sent into the memory (user, assistant, tool; not the note calls).
    pub stored: u64,
    /// Their JSON text, as the transcript a client would keep without recalld.
    pub raw_bytes: u64,
    pub note_calls: u64,
    pub notes_written: u64,
}

impl<'a> Agent<'a> {
    pub fn new(memory: String, index: usize, traces: &'a [Trace], ceiling: u64) -> Agent<'a> {
        Agent {
            memory,
            index,
            traces,
            ceiling,
            turn_gap_s: 20.0,
            session_gap_s: 3_600.0,
            sessions: 0,
            session: Vec::new(),
            tools: Vec::new(),
            packed: Packed::default(),
            next: 0,
            answer: None,
            now: 1.7e9,
            turn: 0,
            openings: BTreeMap::new(),
            stored: 0,
            raw_bytes: 0,
            note_calls: 0,
            notes_written: 0,
        }
    }

    fn next_answer(&self) -> Option<usize> {
        (self.next..self.session.len()).find(|&i| self.session[i]["role"] == "assistant")
    }

    /// Leaves the current session (e.g. after an error): the next call opens a new one.
    pub fn abandon_session(&mut self) {
        self.session.clear();
        self.packed = Packed::default();
        self.next = 0;
        self.answer = None;
    }

    fn open_session(&mut self) {
        // Memories start at different traces so they do not all send the same sizes at once.
        let trace = &self.traces[(self.index * 37 + self.sessions) % self.traces.len()];
        let tag = format!("{} s{}", self.memory, self.sessions);
        self.sessions += 1;
        self.session = traces::session(trace, &tag);
        self.tools = trace.tools.clone();
        self.packed = Packed::of(&self.session, &self.tools);
        self.next = 0;
        self.now += self.session_gap_s;
    }

    /// The next `decorate`'s arguments: the session so far, up to the model's next move.
    pub fn decorate_args(&mut self) -> Value {
        serde_json::to_value(self.decorate_call()).expect("JSON values always convert")
    }

    /// The same, borrowing the session: the traffic encodes it without a JSON copy (the
    /// benchmark's own CPU shares the machine with the daemon it measures).
    pub fn decorate_call(&mut self) -> DecorateArgs<'_> {
        let i = match self.next_answer() {
            Some(i) => i,
            None => {
                self.open_session();
                self.next_answer()
                    .expect("traces::load keeps traces with an assistant message")
            }
        };
        for m in &self.session[self.next..i] {
            if m["role"] == "system" {
                continue; // instructions, not history
            }
            if m["role"] == "user" {
                self.turn += 1;
                self.openings
                    .insert(self.turn, opening(m["content"].as_str().unwrap_or("")));
                while self.openings.len() > REMEMBERED_TURNS {
                    self.openings.pop_first();
                }
            }
            self.stored += 1;
            self.raw_bytes += m.to_string().len() as u64;
        }
        self.next = i;
        self.answer = Some(i);
        self.now += self.turn_gap_s;
        DecorateArgs {
            memory: &self.memory,
            request: ChatRequest {
                model: MODEL,
                messages: &self.session[..i],
                tools: (!self.tools.is_empty()).then_some(&self.tools[..]),
                packed: &self.packed,
            },
            now: self.now,
            ceiling: self.ceiling,
        }
    }

    /// The next `report`'s arguments, given the `info` `decorate` returned: the trace's
    /// assistant message, with a note call beside it when the request asked for notes.
    pub fn report_args(&mut self, info: &Value) -> Value {
        let i = self.answer.take().expect("report_args follows decorate_args");
        let mut message = json!({"role": "assistant", "content": self.session[i]["content"]});
        let mut calls = self.session[i]["tool_calls"].as_array().cloned().unwrap_or_default();
        let finish = if calls.is_empty() { "stop" } else { "tool_calls" };
        if !calls.is_empty() {
            message["tool_calls"] = json!(calls);
        }
        self.stored += 1;
        self.raw_bytes += message.to_string().len() as u64;
        if info["note_ask"].as_bool().unwrap_or(false) {
            let notes = self.notes(info);
            self.note_calls += 1;
            self.notes_written += notes.iter().filter(|n| n["note"] != "").count() as u64;
            calls.push(json!({
                "id": format!("note-{}-{}", self.memory, self.note_calls),
                "type": "function",
                "function": {"name": "note", "arguments": json!({"notes": notes}).to_string()},
            }));
            message["tool_calls"] = json!(calls);
        }
        self.next = i + 1;
        let now = self.now + 1.0;
        json!({
            "memory": self.memory,
            "now": now,
            "response": {
                "id": format!("{}-{}", self.memory, self.stored),
                "object": "chat.completion",
                "created": now as i64,
                "model": MODEL,
                "choices": [{"index": 0, "message": message, "finish_reason": finish}],
            },
        })
    }

    /// Up to `FACTS_PER_NOTE` facts: openings of user messages spread over the leaving turns.
    fn notes(&self, info: &Value) -> Vec<Value> {
        let leaving: Vec<(u64, &String)> = crate::replay::leaving_turns(info)
            .into_iter()
            .flat_map(|(a, b)| self.openings.range(a..=b).map(|(t, s)| (*t, s)))
            .collect();
        let step = leaving.len().div_ceil(FACTS_PER_NOTE).max(1);
        let mut notes: Vec<Value> = leaving
            .iter()
            .step_by(step)
            .filter(|(_, text)| !text.is_empty())
            .map(|(turn, text)| {
                json!({
                    "note": format!("In turn {turn} the user said: {text}"),
                    "subject": "user",
                    "object": object_of(text),
                    "milestone": false,
                })
            })
            .collect();
        if notes.is_empty() {
            // "Nothing worth keeping" still acknowledges the leaving episodes.
            notes.push(json!({"note": ""}));
        }
        notes
    }
}

/// A message's opening: its first line or sentence, at most 100 characters, without our tag.
fn opening(text: &str) -> String {
    let text = match text.strip_prefix('[') {
        Some(rest) => rest.split_once("] ").map_or(text, |(_, t)| t),
        None => text,
    };
    let end = text.find(['\n', '.', '?', '!']).unwrap_or(text.len());
    text[..end].chars().take(100).collect::<String>().trim().to_owned()
}

/// The object of a note: the first word holding a digit (ids, dates, flight numbers), else a
/// generic name.
fn object_of(text: &str) -> String {
    text.split_whitespace()
        .map(|w| w.trim_matches(|c: char| !c.is_alphanumeric() && c != '_'))
        .find(|w| w.chars().any(|c| c.is_ascii_digit()))
        .unwrap_or("the user's request")
        .to_owned()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::traces::Trace;

    #[test]
    fn arguments_written_from_their_packed_messages_read_as_their_json_form() {
        let tool = json!({"type": "function", "function": {"name": "look_up", "parameters": {"type": "object", "properties": {"id": {"type": "integer"}}}}});
        let trace = |tools: Vec<Value>| Trace {
            id: "t".into(),
            messages: vec![
                json!({"role": "system", "content": "be brief"}),
                json!({"role": "user", "content": "find order 7 ✓"}),
                json!({"role": "assistant", "content": null, "tool_calls": [{"id": "c1", "type": "function", "function": {"name": "look_up", "arguments": "{\"id\": 7}"}}]}),
                json!({"role": "tool", "tool_call_id": "c1", "content": "shipped, 2.5 kg"}),
                json!({"role": "assistant", "content": "It shipped."}),
            ],
            tools,
        };
        for traces in [vec![trace(vec![tool.clone()])], vec![trace(Vec::new())]] {
            let mut a = Agent::new("m".into(), 0, &traces, 16_000);
            for _ in 0..3 {
                let args = a.decorate_call();
                let mut bytes = Vec::new();
                args.write_msgpack(&mut bytes).unwrap();
                let read: Value = rmp_serde::from_slice(&bytes).unwrap();
                assert_eq!(read, serde_json::to_value(&args).unwrap());
                assert_eq!(
                    bytes,
                    rmp_serde::to_vec_named(&args).unwrap(),
                    "the same bytes, key order too"
                );
                let info = json!({"note_ask": false});
                a.report_args(&info);
            }
        }
    }
}
