//! The cross-memory block: for a new user message, the facts of the agent's scope the user
//! may see that are relevant to it, within the policy's token budget: semantic facts first,
//! then episodic facts of other conversations; each group by relevance, then importance and
//! recency. Below `min_relevance` nothing is shown. No model runs here: the message was
//! embedded before the lock (recall's query), and scope facts carry their vectors.

use serde::{Deserialize, Serialize};
use serde_json::{json, Value};

use super::records::{ScopeFact, Tier};
use super::{agent_record, scope_facts, visible};
use crate::engine::passages::date;
use crate::engine::{blocks, tokens, Engine, EngineError};
use crate::models::cosine;

/// The block as stored on the recall block of the message it was made for.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
pub struct AcrossSection {
    pub text: String,
    pub tokens: u64,
    pub items: Vec<AcrossItem>,
}

/// One scope fact shown, and why.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
pub struct AcrossItem {
    pub n: u64,
    pub tier: Tier,
    /// Its cosine with the message or the words they share, the higher (`relevance`).
    pub relevance: f32,
}

/// Days over which recency weighs in (a fact this old counts half as recent as a new one).
const RECENCY_HALF_DAYS: f64 = 30.0;

impl Engine {
    /// The cross-memory block for `memory`'s new message (its text, and its vector when embedded),
    /// in at most `room` tokens. Reads the store; changes nothing.
    pub(crate) fn across_block(
        &self,
        memory: &str,
        agent: &str,
        user: Option<&str>,
        message: (&str, Option<&[f32]>),
        room: u64,
        now: f64,
    ) -> Result<(Option<AcrossSection>, Value), EngineError> {
        let (text, vector) = message;
        let (rec, facts) = self.store.read(|r| Ok((agent_record(r, agent)?, scope_facts(r, agent)?)))?;
        let policy = self.policy_of(&rec);
        let budget = policy.budget_tokens.min(room);
        if !policy.captures() || budget == 0 {
            return Ok((None, json!({"policy": policy.name, "budget": budget, "items": []})));
        }
        let words = word_set(text);
        let mut scored: Vec<(&ScopeFact, f32, f64)> = facts
            .iter()
            .filter(|f| f.is_active() && visible(f, rec.sharing, user))
            // Its own conversation's facts are that conversation's to recall.
            .filter(|f| f.origin.as_ref().is_none_or(|o| o.memory != memory))
            .map(|f| {
                let relevance = relevance(vector, &words, f);
                let age_days = ((now - f.at) / 86_400.0).max(0.0);
                let recency = 0.5f64.powf(age_days / RECENCY_HALF_DAYS);
                let rank = relevance as f64 + 0.1 * rec.importance(f, now) as f64 + 0.05 * recency;
                (f, relevance, rank)
            })
            .collect();
        let best = scored.iter().map(|s| s.1).fold(None, |m: Option<f32>, r| Some(m.map_or(r, |m| m.max(r))));
        scored.retain(|(_, relevance, _)| *relevance >= self.config.scopes.min_relevance);
        let considered = scored.len();
        scored.sort_by(|a, b| {
            let tier = |f: &ScopeFact| u8::from(f.tier == Tier::Episodic);
            tier(a.0).cmp(&tier(b.0)).then(b.2.total_cmp(&a.2)).then(a.0.n.cmp(&b.0.n))
        });
        let mut chosen: Vec<(&ScopeFact, f32)> = Vec::new();
        let mut text_out = String::new();
        let mut cost = 0u64;
        for (f, relevance, _) in scored {
            chosen.push((f, relevance));
            let candidate = render(&chosen);
            let c = tokens::text_tokens(&candidate) as u64 + 4;
            if c > budget {
                chosen.pop();
                continue;
            }
            text_out = candidate;
            cost = c;
        }
        let info = json!({
            "policy": policy.name,
            "budget": budget,
            "considered": considered,
            "best_relevance": best,
            "by_meaning": vector.is_some(),
            "tokens": cost,
            "items": chosen.iter().map(|(f, r)| json!({"id": f.n, "tier": f.tier, "relevance": r})).collect::<Vec<_>>(),
        });
        if chosen.is_empty() {
            return Ok((None, info));
        }
        Ok((
            Some(AcrossSection {
                text: text_out,
                tokens: cost,
                items: chosen
                    .iter()
                    .map(|(f, r)| AcrossItem { n: f.n, tier: f.tier, relevance: *r })
                    .collect(),
            }),
            info,
        ))
    }
}

fn render(chosen: &[(&ScopeFact, f32)]) -> String {
    let mut out = String::from(blocks::ACROSS_HEADER);
    for (f, _) in chosen {
        let source = match f.tier {
            Tier::Semantic => format!("agreed in {} conversations", f.sources.len().max(2)),
            Tier::Episodic => "one conversation".into(),
        };
        out.push_str(&format!(
            "\n- {} ({}; {}, {})",
            f.text,
            serde_json::to_value(f.kind).ok().and_then(|v| v.as_str().map(|s| s.replace('_', " "))).unwrap_or_default(),
            source,
            date(f.at)
        ));
    }
    out
}

/// A fact's relevance to a message: its cosine with the message or the words they share (see
/// `overlap`), whichever is higher. Meaning alone misses what a fact is about when the
/// message's topic dominates its embedding ("prefers answers in bullet points" against "an
/// overview of the quarterly numbers, in bullet points please": cosine 0.09 with MiniLM);
/// words alone miss paraphrase.
pub(super) fn relevance(vector: Option<&[f32]>, message_words: &std::collections::BTreeSet<String>, f: &ScopeFact) -> f32 {
    let meaning = match vector {
        Some(v) if f.v.len() == v.len() => cosine(v, &f.v),
        _ => 0.0,
    };
    meaning.max(overlap(message_words, &word_set(&f.text)))
}

/// Words that say nothing of a topic: left out of word relevance.
const STOPWORDS: &[&str] = &[
    "the", "and", "for", "with", "you", "your", "are", "was", "were", "this", "that", "these", "those", "have",
    "has", "had", "from", "what", "when", "where", "which", "who", "why", "how", "can", "could", "would",
    "should", "will", "shall", "please", "about", "into", "our", "all", "any", "but", "not", "its", "they",
    "them", "their", "there", "here", "been", "also", "just", "than", "then", "some", "more", "most", "very",
    "did", "does", "got", "get", "let", "may", "might", "must", "one", "out", "own", "per", "put", "say", "see",
    "she", "him", "her", "his", "too", "use", "via", "yes", "yet", "thanks", "thank", "okay", "sure", "me",
];

pub(super) fn word_set(text: &str) -> std::collections::BTreeSet<String> {
    text.split(|c: char| !c.is_alphanumeric())
        .filter(|w| w.len() > 2)
        .map(str::to_lowercase)
        .filter(|w| !STOPWORDS.contains(&w.as_str()))
        .collect()
}

/// How much two word sets share: the larger of the shares of either set found in the other
/// (a short question naming one topic, a long fact about it: both count).
fn overlap(message: &std::collections::BTreeSet<String>, fact: &std::collections::BTreeSet<String>) -> f32 {
    if fact.is_empty() || message.is_empty() {
        return 0.0;
    }
    let shared = fact.intersection(message).count() as f32;
    (shared / fact.len() as f32).max(shared / message.len() as f32)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn word_relevance_ignores_small_talk_and_counts_either_side() {
        let fact = word_set("Alex prefers concise answers in bullet points.");
        assert_eq!(overlap(&word_set("Thanks, that is all for now!"), &fact), 0.0);
        assert_eq!(overlap(&word_set("bullet points?"), &fact), 1.0);
        let long = word_set("Give me an overview of the quarterly numbers, answers in bullet points please.");
        assert!(overlap(&long, &fact) >= 0.5);
    }
}
