//! The cross-memory block: for a new user message, the facts of the agent's scope the user
//! may see that are relevant to it, within the policy's token budget: semantic facts first,
//! then episodic facts of other conversations; each group by relevance, then importance and
//! recency. Below `min_relevance` nothing is shown. No model runs here: the message was
//! embedded before the lock (recall's query), and scope facts carry their vectors.

use serde::{Deserialize, Serialize};
use serde_json::{json, Value};

use std::time::Instant;

use super::records::{ScopeFact, Tier};
use super::{agent_record, hot, visible};
use crate::engine::passages::date;
use crate::engine::{blocks, tokens, Engine, EngineError};
use crate::models::cosine;

/// The block as stored on the recall block of the message it was made for.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
pub struct AcrossSection {
    pub text: String,
    pub tokens: u64,
    pub items: Vec<AcrossItem>,
    /// The document chunks shown as reference: (document, chunk).
    #[serde(default)]
    pub documents: Vec<(u64, usize)>,
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

/// What one tier found, and how long it took.
struct Found<T> {
    value: T,
    ms: f64,
}

fn timed<T>(f: impl FnOnce() -> T) -> Found<T> {
    let started = Instant::now();
    let value = f();
    Found {
        value,
        ms: started.elapsed().as_secs_f64() * 1e3,
    }
}

/// A fact a tier found: its relevance and which tier found it.
struct Hit<'a> {
    fact: &'a ScopeFact,
    relevance: f32,
    tier: &'static str,
}

/// Relevance given to a fact found because the message names one of its entities.
const GRAPH_RELEVANCE: f32 = 0.5;
/// Share of the block the hot tier's recent turns may take at most.
const HOT_SHARE: u64 = 3;

impl Engine {
    /// The cross-memory block for `memory`'s new message (its text, and its vector when
    /// embedded), in at most `room` tokens. The three tiers are read concurrently: hot (the
    /// user's core blocks and recent turns in other conversations), vector (scope facts by
    /// relevance) and graph (scope facts about an entity the message names); then merged.
    /// Reads the store; changes nothing.
    pub(crate) fn across_block(
        &self,
        memory: &str,
        agent: &str,
        user: Option<&str>,
        message: (&str, Option<&[f32]>),
        room: u64,
        now: f64,
    ) -> Result<(Option<AcrossSection>, Value), EngineError> {
        let started = Instant::now();
        let (text, vector) = message;
        let rec = self.store.read(|r| agent_record(r, agent))?;
        let policy = self.policy_of(&rec);
        let budget = policy.budget_tokens.min(room);
        if !policy.captures() || budget == 0 {
            return Ok((None, json!({"policy": policy.name, "budget": budget, "items": []})));
        }
        let words = word_set(text);
        let usable = |f: &ScopeFact| {
            f.is_active()
                && visible(f, rec.sharing, user)
                // Its own conversation's facts are that conversation's to recall.
                && f.origin.as_ref().is_none_or(|o| o.memory != memory)
        };
        // The agent's facts, decoded once per change of its scope (see `FactsCache`); the
        // vector and graph tiers then read them concurrently with the hot tier's record.
        let facts_read = timed(|| self.cached_scope_facts(agent));
        let all = facts_read.value?;
        let (hot, vector_tier, graph_tier) = std::thread::scope(|s| {
            let hot = s.spawn(|| timed(|| self.store.read(|r| hot::state(r, agent, user))));
            let graph = s.spawn(|| {
                timed(|| -> Vec<&ScopeFact> {
                    all.iter()
                        .filter(|f| usable(f) && (names(&words, &f.subject) || names(&words, &f.object)))
                        .collect()
                })
            });
            let vector_tier = timed(|| -> Vec<(&ScopeFact, f32)> {
                all.iter()
                    .filter(|f| usable(f))
                    .map(|f| (f, relevance(vector, &words, f)))
                    .collect()
            });
            let hot = hot.join().expect("the hot tier's read does not panic");
            let graph = graph.join().expect("the graph tier's read does not panic");
            (hot, vector_tier, graph)
        });
        let hot_state = hot.value?;
        let scored = vector_tier.value;
        let graph_facts = graph_tier.value;
        let best = scored
            .iter()
            .map(|s| s.1)
            .fold(None, |m: Option<f32>, r| Some(m.map_or(r, |m| m.max(r))));
        // Merge: each fact once, with the best relevance a tier gave it.
        let mut hits: Vec<Hit> = scored
            .iter()
            .filter(|(_, r)| *r >= self.config.scopes.min_relevance)
            .map(|(f, r)| Hit {
                fact: f,
                relevance: *r,
                tier: "vector",
            })
            .collect();
        for g in &graph_facts {
            match hits.iter_mut().find(|h| h.fact.n == g.n) {
                Some(h) if h.relevance < GRAPH_RELEVANCE => {
                    h.relevance = GRAPH_RELEVANCE;
                    h.tier = "graph";
                }
                Some(_) => {}
                None => hits.push(Hit {
                    fact: g,
                    relevance: GRAPH_RELEVANCE,
                    tier: "graph",
                }),
            }
        }
        let considered = hits.len();
        let rank = |h: &Hit| {
            let age_days = ((now - h.fact.at) / 86_400.0).max(0.0);
            let recency = 0.5f64.powf(age_days / RECENCY_HALF_DAYS);
            h.relevance as f64 + 0.1 * self.importance(&rec, h.fact, now) as f64 + 0.05 * recency
        };
        hits.sort_by(|a, b| {
            let tier = |f: &ScopeFact| u8::from(f.tier == Tier::Episodic);
            tier(a.fact)
                .cmp(&tier(b.fact))
                .then(rank(b).total_cmp(&rank(a)))
                .then(a.fact.n.cmp(&b.fact.n))
        });
        // Fill: core blocks first (always), then facts, then excerpts of the agent's documents
        // (at most half of what is left), then recent turns of other conversations (at most a
        // third of the block).
        let mut out = String::from(blocks::ACROSS_HEADER);
        for (name, body) in &hot_state.core {
            out.push_str(&format!("\n[{name}] {body}"));
        }
        let mut cost = tokens::text_tokens(&out) as u64 + 4;
        if cost > budget {
            out = String::from(blocks::ACROSS_HEADER);
            cost = tokens::text_tokens(&out) as u64 + 4;
        }
        let core_shown = out.len() > blocks::ACROSS_HEADER.len();
        // Working notes the model saved for this user (live a day), newest first, as room allows.
        let mut notes_shown = 0;
        let notes: Vec<_> = hot_state.live_notes(now).collect();
        if !notes.is_empty() {
            let heading = "\nWorking notes saved in this user's recent conversations:";
            let mut section = String::from(heading);
            let mut used = tokens::text_tokens(heading) as u64 + 1;
            for n in notes.iter().rev() {
                let line = format!("\n- {} {}", date(n.at), n.text);
                let c = tokens::text_tokens(&line) as u64 + 1;
                if cost + used + c > budget {
                    break;
                }
                used += c;
                section.push_str(&line);
                notes_shown += 1;
            }
            if notes_shown > 0 {
                out.push_str(&section);
                cost += used;
            }
        }
        let mut chosen: Vec<&Hit> = Vec::new();
        for h in &hits {
            let line = fact_line(h.fact);
            let c = tokens::text_tokens(&line) as u64 + 1;
            if cost + c > budget {
                continue;
            }
            out.push_str(&line);
            cost += c;
            chosen.push(h);
        }
        // Reference: excerpts of the agent's documents, in at most half of what facts left.
        let mut excerpts = Vec::new();
        if rec.next_document > 0 {
            let heading =
                "\nFrom the agent's reference documents (curated by its operator, not learned in conversations):";
            let heading_cost = tokens::text_tokens(heading) as u64 + 1;
            let room = budget.saturating_sub(cost) / 2;
            let mut lines = String::new();
            let mut used = heading_cost;
            // A broken document index costs the block its excerpts, never the request.
            let found = self.search_documents(agent, text, vector).unwrap_or_else(|e| {
                tracing::warn!(agent, error = %e, "cannot search the agent's documents");
                Vec::new()
            });
            for x in found {
                let line = format!("\n- [{}] {}", x.name, x.text);
                let c = tokens::text_tokens(&line) as u64 + 1;
                if used + c > room {
                    continue;
                }
                used += c;
                lines.push_str(&line);
                excerpts.push(x);
            }
            if !excerpts.is_empty() {
                out.push_str(heading);
                out.push_str(&lines);
                cost += used;
            }
        }
        // The section's heading counts against the hot share too, so the block never
        // outgrows its budget by the heading.
        let hot_header = "\nLately, in this user's other conversations with the agent:";
        let header_cost = tokens::text_tokens(hot_header) as u64 + 1;
        let hot_budget = (budget / HOT_SHARE)
            .min(budget.saturating_sub(cost))
            .saturating_sub(header_cost);
        let mut hot_lines = Vec::new();
        let mut hot_cost = 0;
        for t in hot_state.turns.iter().rev().filter(|t| t.memory != memory) {
            let line = format!("\n- {} {}: {}", date(t.at), t.role, t.text);
            let c = tokens::text_tokens(&line) as u64 + 1;
            if hot_cost + c > hot_budget {
                break;
            }
            hot_cost += c;
            hot_lines.push(line);
        }
        if !hot_lines.is_empty() {
            out.push_str(hot_header);
            for l in hot_lines.iter().rev() {
                out.push_str(l);
            }
            cost += hot_cost + header_cost;
        }
        let info = json!({
            "policy": policy.name,
            "budget": budget,
            "considered": considered,
            "best_relevance": best,
            "by_meaning": vector.is_some(),
            "tokens": cost,
            "core": hot_state.core.keys().collect::<Vec<_>>(),
            "hot_turns": hot_lines.len(),
            "working_notes": notes_shown,
            "documents": excerpts.iter().map(|x| json!({"id": x.document, "name": x.name, "chunk": x.chunk, "relevance": x.relevance})).collect::<Vec<_>>(),
            "items": chosen.iter().map(|h| json!({"id": h.fact.n, "tier": h.fact.tier, "relevance": h.relevance, "found_by": h.tier})).collect::<Vec<_>>(),
            "ms": {"facts": facts_read.ms, "hot": hot.ms, "vector": vector_tier.ms, "graph": graph_tier.ms, "total": started.elapsed().as_secs_f64() * 1e3},
        });
        if chosen.is_empty() && hot_lines.is_empty() && excerpts.is_empty() && notes_shown == 0 && !core_shown {
            return Ok((None, info));
        }
        let cost = tokens::text_tokens(&out) as u64 + 4;
        Ok((
            Some(AcrossSection {
                text: out,
                tokens: cost,
                items: chosen
                    .iter()
                    .map(|h| AcrossItem {
                        n: h.fact.n,
                        tier: h.fact.tier,
                        relevance: h.relevance,
                    })
                    .collect(),
                documents: excerpts.iter().map(|x| (x.document, x.chunk)).collect(),
            }),
            info,
        ))
    }
}

/// Whether the message's words name the entity `name` (all of its words, stopwords aside).
fn names(message: &std::collections::BTreeSet<String>, name: &str) -> bool {
    let name = word_set(name);
    !name.is_empty() && name.iter().all(|w| message.contains(w))
}

fn fact_line(f: &ScopeFact) -> String {
    let source = match f.tier {
        Tier::Semantic => format!("agreed in {} conversations", f.sources.len().max(2)),
        Tier::Episodic => "one conversation".into(),
        Tier::Procedural => "the agent's own way of working".into(),
    };
    format!(
        "\n- {} ({}; {}, {})",
        f.text,
        serde_json::to_value(f.kind)
            .ok()
            .and_then(|v| v.as_str().map(|s| s.replace('_', " ")))
            .unwrap_or_default(),
        source,
        date(f.at)
    )
}

/// A fact's relevance to a message: its cosine with the message or the words they share (see
/// `overlap`), whichever is higher. Meaning alone misses what a fact is about when the
/// message's topic dominates its embedding ("prefers answers in bullet points" against "an
/// overview of the quarterly numbers, in bullet points please": cosine 0.09 with MiniLM);
/// words alone miss paraphrase.
pub(super) fn relevance(
    vector: Option<&[f32]>,
    message_words: &std::collections::BTreeSet<String>,
    f: &ScopeFact,
) -> f32 {
    let meaning = match vector {
        Some(v) if f.v.len() == v.len() => cosine(v, &f.v),
        _ => 0.0,
    };
    meaning.max(overlap(message_words, &word_set(&f.text)))
}

/// Words that say nothing of a topic: left out of word relevance.
const STOPWORDS: &[&str] = &[
    "the", "and", "for", "with", "you", "your", "are", "was", "were", "this", "that", "these", "those", "have", "has",
    "had", "from", "what", "when", "where", "which", "who", "why", "how", "can", "could", "would", "should", "will",
    "shall", "please", "about", "into", "our", "all", "any", "but", "not", "its", "they", "them", "their", "there",
    "here", "been", "also", "just", "than", "then", "some", "more", "most", "very", "did", "does", "got", "get", "let",
    "may", "might", "must", "one", "out", "own", "per", "put", "say", "see", "she", "him", "her", "his", "too", "use",
    "via", "yes", "yet", "thanks", "thank", "okay", "sure", "me",
];

pub(crate) fn word_set(text: &str) -> std::collections::BTreeSet<String> {
    text.split(|c: char| !c.is_alphanumeric())
        .filter(|w| w.len() > 2)
        .map(str::to_lowercase)
        .filter(|w| !STOPWORDS.contains(&w.as_str()))
        .collect()
}

/// How much two word sets share: the larger of the shares of either set found in the other
/// (a short question naming one topic, a long fact about it: both count).
pub(super) fn overlap(message: &std::collections::BTreeSet<String>, fact: &std::collections::BTreeSet<String>) -> f32 {
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
