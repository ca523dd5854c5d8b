//! Evidence availability: which of a question's evidence turns a request holds.
//!
//! A turn is present when the request holds its text: as a whole user/assistant message (in
//! view), or inside one of the request's system/developer blocks (an excerpt in a recall block),
//! or when a block holds an `observation` that cites the turn (a fact whose provenance is that
//! turn). Everything is read from the request as the model would get it, never from the daemon's
//! own account of what it put there. (On the dev file no two evidence turns share a text, so a
//! text names one turn.)

use std::collections::{HashMap, HashSet};

use serde_json::Value;

use crate::locomo::Conversation;

/// What one conversation's turns and observations look like, for scoring requests against it.
pub struct Scorer<'c> {
    turn_text: HashMap<&'c str, &'c str>,
    /// Observations citing each turn.
    facts_of: HashMap<&'c str, Vec<&'c str>>,
}

/// The text of a message's content (a string, or the text parts of a list).
pub fn content_text(content: &Value) -> String {
    match content {
        Value::String(s) => s.clone(),
        Value::Array(parts) => parts
            .iter()
            .filter_map(|p| p.get("text").and_then(Value::as_str))
            .collect::<Vec<_>>()
            .join("\n"),
        _ => String::new(),
    }
}

/// The request's messages split into what is in view (user/assistant texts) and blocks
/// (system/developer texts, joined).
pub struct RequestText {
    view: HashSet<String>,
    blocks: String,
}

impl RequestText {
    pub fn of(request: &Value) -> RequestText {
        let mut view = HashSet::new();
        let mut blocks = String::new();
        for m in request.get("messages").and_then(Value::as_array).into_iter().flatten() {
            let text = content_text(m.get("content").unwrap_or(&Value::Null));
            match m.get("role").and_then(Value::as_str).unwrap_or("") {
                "system" | "developer" => {
                    blocks.push_str(&text);
                    blocks.push('\n');
                }
                _ => {
                    view.insert(text);
                }
            }
        }
        RequestText { view, blocks }
    }
}

impl<'c> Scorer<'c> {
    pub fn new(conv: &'c Conversation) -> Scorer<'c> {
        let turn_text = conv.turns().map(|t| (t.dia.as_str(), t.text.as_str())).collect();
        let mut facts_of: HashMap<&str, Vec<&str>> = HashMap::new();
        for o in &conv.observations {
            for d in &o.cites {
                facts_of.entry(d.as_str()).or_default().push(o.text.as_str());
            }
        }
        Scorer { turn_text, facts_of }
    }

    /// Whether the request holds turn `dia`, and how: "view", "excerpt" or "fact".
    pub fn presence(&self, dia: &str, req: &RequestText) -> Option<&'static str> {
        let text = self.turn_text.get(dia)?;
        if req.view.contains(*text) {
            return Some("view");
        }
        if !text.is_empty() && req.blocks.contains(*text) {
            return Some("excerpt");
        }
        let cited = self.facts_of.get(dia).into_iter().flatten();
        for fact in cited {
            if req.blocks.contains(fact) {
                return Some("fact");
            }
        }
        None
    }

    /// The fraction of `evidence` the request holds (None for a question without evidence).
    pub fn availability(&self, evidence: &[String], req: &RequestText) -> Option<f64> {
        if evidence.is_empty() {
            return None;
        }
        let held = evidence.iter().filter(|d| self.presence(d, req).is_some()).count();
        Some(held as f64 / evidence.len() as f64)
    }
}

/// Tokens of a message as recalld counts them: cl100k of its text plus 4.
pub fn message_tokens(text: &str) -> u64 {
    bpe_openai::cl100k_base().count(text) as u64 + 4
}

/// Tokens of a Chat Completions request's messages, counted the same way.
pub fn request_tokens(request: &Value) -> u64 {
    request
        .get("messages")
        .and_then(Value::as_array)
        .into_iter()
        .flatten()
        .map(|m| message_tokens(&content_text(m.get("content").unwrap_or(&Value::Null))))
        .sum()
}
