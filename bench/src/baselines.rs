//! The baselines a replay is compared with, each given the same token count per question as
//! recalld's request (the full context gets the ceiling): the newest turns (recency), BM25 over
//! single turns (recalld's own word index), dense retrieval over single turns (the built-in
//! embedder), and the full context (newest first up to the ceiling, as a client without memory
//! would truncate).
//!
//! A baseline's request is built like recalld's: the same system message, the chosen turns as
//! user/assistant messages in conversation order, then the question; it is scored by the same
//! [`crate::score`] code and counted with the same token rule. Turns are ranked by
//! `speaker: text` (the speaker's name helps questions that name a person).

use std::path::Path;

use recalld::index::words::Words;
use recalld::models::{CallCtx, Embedder};
use serde_json::{json, Value};

use crate::locomo::Conversation;
use crate::score::message_tokens;

pub const SYSTEMS: [&str; 5] = ["recalld", "dense turns", "bm25 turns", "recency", "full context"];

/// One turn as a baseline can send it.
pub struct Item {
    pub by_a: bool,
    pub text: String,
    pub tokens: u64,
}

/// Per conversation: its turns, and each question's ranking of them by BM25 and by meaning.
pub struct Rankings {
    pub items: Vec<Item>,
    pub bm25: Vec<Vec<usize>>,
    pub dense: Vec<Vec<usize>>,
}

pub fn items(conv: &Conversation) -> Vec<Item> {
    conv.turns()
        .map(|t| Item {
            by_a: t.by_a,
            text: t.text.clone(),
            tokens: message_tokens(&t.text),
        })
        .collect()
}

fn ranked_text(conv: &Conversation) -> Vec<String> {
    conv.turns()
        .map(|t| {
            let who = if t.by_a { &conv.speaker_a } else { &conv.speaker_b };
            format!("{who}: {}", t.text)
        })
        .collect()
}

/// Ranks every question's turns by BM25 (a temporary word index) and by cosine of embeddings.
pub fn rank(conv: &Conversation, embedder: &dyn Embedder, scratch: &Path) -> Result<Rankings, String> {
    let texts = ranked_text(conv);
    let words = Words::open(scratch, 2).map_err(|e| e.to_string())?;
    for (i, t) in texts.iter().enumerate() {
        words.add(&conv.id, i as u64, t).map_err(|e| e.to_string())?;
    }
    words.commit(&conv.id).map_err(|e| e.to_string())?;
    let mut bm25 = Vec::new();
    for q in &conv.questions {
        let hits = words
            .search(&conv.id, &q.text, texts.len())
            .map_err(|e| e.to_string())?;
        bm25.push(hits.into_iter().map(|(id, _)| id as usize).collect());
    }
    let ctx = CallCtx::new("recalld-bench");
    let embed = |all: &[String]| -> Result<Vec<Vec<f32>>, String> {
        let mut out = Vec::with_capacity(all.len());
        for chunk in all.chunks(64) {
            let refs: Vec<&str> = chunk.iter().map(String::as_str).collect();
            out.extend(embedder.embed(&ctx, &refs).map_err(|e| e.to_string())?);
        }
        Ok(out)
    };
    let turn_vecs = embed(&texts)?;
    let questions: Vec<String> = conv.questions.iter().map(|q| q.text.clone()).collect();
    let question_vecs = embed(&questions)?;
    let dense = question_vecs
        .iter()
        .map(|q| {
            let mut scored: Vec<(usize, f32)> = turn_vecs
                .iter()
                .enumerate()
                .map(|(i, v)| (i, v.iter().zip(q).map(|(a, b)| a * b).sum()))
                .collect();
            scored.sort_by(|a, b| b.1.total_cmp(&a.1).then(a.0.cmp(&b.0)));
            scored.into_iter().map(|(i, _)| i).collect()
        })
        .collect();
    Ok(Rankings {
        items: items(conv),
        bm25,
        dense,
    })
}

/// Takes items in `order` while they fit in `budget` tokens (an item too big is skipped and the
/// next one tried); returns them in conversation order.
pub fn pack(order: impl IntoIterator<Item = usize>, items: &[Item], budget: u64) -> Vec<usize> {
    let mut left = budget;
    let mut chosen: Vec<usize> = order
        .into_iter()
        .filter(|&i| {
            let fits = items[i].tokens <= left;
            if fits {
                left -= items[i].tokens;
            }
            fits
        })
        .collect();
    chosen.sort_unstable();
    chosen
}

/// A baseline's request: the system message, the chosen turns in order, the question.
pub fn request_of(system: &str, items: &[Item], chosen: &[usize], question: &str) -> Value {
    let mut messages = vec![json!({"role": "system", "content": system})];
    for &i in chosen {
        let role = if items[i].by_a { "user" } else { "assistant" };
        messages.push(json!({"role": role, "content": items[i].text}));
    }
    messages.push(json!({"role": "user", "content": question}));
    json!({ "messages": messages })
}

/// The chosen turns of `system` for question `q` with `budget` tokens for the whole request,
/// among the conversation's first `said` turns (those said when it was asked).
pub fn choose(system_name: &str, r: &Rankings, q: usize, budget: u64, fixed: u64, said: usize) -> Vec<usize> {
    let room = budget.saturating_sub(fixed);
    let newest_first = (0..said.min(r.items.len())).rev();
    let ranked = |order: &[usize]| pack(order.iter().copied().filter(|&i| i < said), &r.items, room);
    match system_name {
        "dense turns" => ranked(&r.dense[q]),
        "bm25 turns" => ranked(&r.bm25[q]),
        // Newest first until one does not fit: a window, not a packing.
        "recency" | "full context" => {
            let mut left = room;
            let mut chosen: Vec<usize> = newest_first
                .take_while(|&i| {
                    let fits = r.items[i].tokens <= left;
                    left = left.saturating_sub(r.items[i].tokens);
                    fits
                })
                .collect();
            chosen.sort_unstable();
            chosen
        }
        other => panic!("no baseline named {other}"),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn item(tokens: u64) -> Item {
        Item {
            by_a: true,
            text: String::new(),
            tokens,
        }
    }

    #[test]
    fn a_baseline_chooses_only_among_the_turns_said_when_asked() {
        let r = Rankings {
            items: [5, 5, 5, 5].into_iter().map(item).collect(),
            bm25: vec![vec![3, 0, 1, 2]],
            dense: vec![vec![2, 3, 1, 0]],
        };
        assert_eq!(choose("dense turns", &r, 0, 12, 0, 4), vec![2, 3]);
        assert_eq!(choose("dense turns", &r, 0, 12, 0, 2), vec![0, 1]);
        assert_eq!(choose("bm25 turns", &r, 0, 7, 2, 3), vec![0]);
        assert_eq!(choose("recency", &r, 0, 12, 0, 3), vec![1, 2]);
        assert_eq!(choose("full context", &r, 0, 100, 0, 2), vec![0, 1]);
    }

    #[test]
    fn pack_skips_what_does_not_fit_and_keeps_conversation_order() {
        let items: Vec<Item> = [5, 50, 10, 10].into_iter().map(item).collect();
        assert_eq!(pack([3, 1, 0, 2], &items, 20), vec![0, 3]);
        assert_eq!(pack([1], &items, 20), Vec::<usize>::new());
    }
}
