//! Token estimates: cl100k counts of a message's text plus a small per-message overhead,
//! corrected per model by the ratio the provider's own counts teach us.

use crate::formats::Message;
use recalld_protocol::Raw;

/// Tokens a chat message costs beyond its text (role, separators), as providers count.
const PER_MESSAGE: u32 = 4;
/// What one non-text part (an image, a file) is counted as: a low-detail image's cost.
const PER_ATTACHMENT: u32 = 85;

/// The plausible range of provider count / our count; outside it a ratio is not kept (a reply
/// reported out of order, a different request).
pub const RATIO_RANGE: (f64, f64) = (0.5, 2.0);
/// Weight of a new ratio in the running average.
const RATIO_WEIGHT: f64 = 0.3;

pub fn text_tokens(text: &str) -> u32 {
    if text.is_empty() {
        return 0;
    }
    if text.len() < MEMO_FROM_BYTES {
        return encode(text);
    }
    remembered(text)
}

/// A text's count from the memo, or encoded and remembered.
fn remembered(text: &str) -> u32 {
    remembered_as(memo_key(text), text)
}

fn remembered_as(key: (usize, u64), text: &str) -> u32 {
    remembered_or(key, || encode(text))
}

/// The count under `key` from the memo, or `count`ed and remembered.
fn remembered_or(key: (usize, u64), count: impl FnOnce() -> u32) -> u32 {
    if let Some(n) = MEMO.lock().unwrap_or_else(|e| e.into_inner()).get(key) {
        return n;
    }
    let n = count();
    MEMO.lock().unwrap_or_else(|e| e.into_inner()).put(key, n);
    n
}

fn encode(text: &str) -> u32 {
    bpe_openai::cl100k_base().count(text) as u32
}

/// Texts this long or longer have their counts remembered: a request's fixed part (system
/// prompt, tools, the facts block) and recall's candidate passages come back unchanged call
/// after call, and encoding them was half of decorate's CPU on agent traffic (a profile at
/// ~1,500 stored messages), while hashing them costs microseconds.
const MEMO_FROM_BYTES: usize = 512;
/// Counts kept per generation (two generations: the older is dropped when the newer fills).
const MEMO_ENTRIES: usize = 16_384;

static MEMO: std::sync::Mutex<Memo> = std::sync::Mutex::new(Memo { new: None, old: None });

/// A text's length and 64-bit hash (a collision would only misestimate one text's size).
fn memo_key(text: &str) -> (usize, u64) {
    use std::hash::{Hash, Hasher};
    let mut h = rustc_hash::FxHasher::default();
    text.hash(&mut h);
    (text.len(), h.finish())
}

/// Token counts of long texts seen lately, in two generations.
struct Memo {
    new: Option<rustc_hash::FxHashMap<(usize, u64), u32>>,
    old: Option<rustc_hash::FxHashMap<(usize, u64), u32>>,
}

impl Memo {
    fn get(&mut self, key: (usize, u64)) -> Option<u32> {
        if let Some(&n) = self.new.as_ref().and_then(|m| m.get(&key)) {
            return Some(n);
        }
        let n = *self.old.as_ref()?.get(&key)?;
        self.put(key, n);
        Some(n)
    }

    fn put(&mut self, key: (usize, u64), n: u32) {
        let new = self.new.get_or_insert_with(Default::default);
        if new.len() >= MEMO_ENTRIES {
            self.old = self.new.take();
        }
        self.new.get_or_insert_with(Default::default).insert(key, n);
    }
}

/// Counts texts that share most of their lines (the renders of one block as items are left
/// out) piece by piece, each piece counted once. cl100k's pre-tokenizer never joins a newline to
/// a non-space character after it (every split pattern that takes a newline ends at the last
/// newline of its run), so a text's count is the sum of its pieces' counts when it is split
/// after every such newline.
#[derive(Default)]
pub struct PieceCounts {
    seen: rustc_hash::FxHashMap<(usize, u64), u32>,
}

impl PieceCounts {
    /// The same count as [`text_tokens`] of the whole.
    pub fn count(&mut self, text: &str) -> u32 {
        let mut total = 0;
        let mut start = 0;
        let mut after_newline = false;
        for (i, c) in text.char_indices() {
            if after_newline && !c.is_whitespace() {
                total += self.piece(&text[start..i]);
                start = i;
            }
            after_newline = c == '\n';
        }
        total + self.piece(&text[start..])
    }

    fn piece(&mut self, piece: &str) -> u32 {
        let key = memo_key(piece);
        *self.seen.entry(key).or_insert_with(|| remembered_as(key, piece))
    }
}

/// The count of a JSON object as text (a request's fields besides its messages: the model, the
/// tools' schemas, ...), remembered by a hash of its values: they come back unchanged call after
/// call, and writing them out as text to look the count up was 5% of decorate's CPU on agent
/// traffic. `tools`: the object's `tools` as bytes, when it holds a null in their place (the
/// bytes are hashed, and read only for a count not remembered).
pub fn json_tokens(fields: &serde_json::Map<String, serde_json::Value>, tools: Option<&Raw>) -> u32 {
    use std::hash::Hasher;
    fn walk(v: &serde_json::Value, h: &mut impl Hasher) -> usize {
        use serde_json::Value;
        match v {
            Value::Null => {
                h.write_u8(0);
                1
            }
            Value::Bool(b) => {
                h.write_u8(1 + *b as u8);
                1
            }
            Value::Number(n) => {
                h.write_u8(3);
                h.write(n.to_string().as_bytes());
                1
            }
            Value::String(s) => {
                h.write_u8(4);
                h.write(s.as_bytes());
                h.write_u8(0xff);
                s.len()
            }
            Value::Array(items) => {
                h.write_u8(5);
                h.write_usize(items.len());
                items.iter().map(|v| walk(v, h)).sum()
            }
            Value::Object(map) => {
                h.write_u8(6);
                h.write_usize(map.len());
                map.iter()
                    .map(|(k, v)| {
                        h.write(k.as_bytes());
                        h.write_u8(0xff);
                        k.len() + walk(v, h)
                    })
                    .sum()
            }
        }
    }
    if fields.is_empty() {
        return encode("{}");
    }
    let mut h = rustc_hash::FxHasher::default();
    let size: usize = fields
        .iter()
        .map(|(k, v)| {
            h.write(k.as_bytes());
            h.write_u8(0xff);
            k.len() + walk(v, &mut h)
        })
        .sum();
    // Told apart from a text's key by the high bit of its size.
    let size = size
        + tools.map_or(0, |t| {
            h.write(t.bytes());
            t.bytes().len()
        });
    let key = (size | 1 << (usize::BITS - 1), h.finish());
    remembered_or(key, || {
        let text = match tools {
            Some(t) if fields.get("tools").is_some_and(serde_json::Value::is_null) => {
                let mut whole = fields.clone();
                whole.insert("tools".into(), t.to_value());
                serde_json::to_string(&whole)
            }
            _ => serde_json::to_string(fields),
        };
        encode(&text.unwrap_or_default())
    })
}

/// A line of a block or a fact's note: the same ones come back call after call, so their counts
/// are remembered, short ones too. A recall block's excerpts of tool output are mostly short
/// lines (code, listings); encoded anew at every decorate they were a third of recall's CPU on
/// the request path at 10k messages of agent traffic, while a memo lookup costs a hash.
pub fn line_tokens(line: &str) -> u32 {
    remembered(line)
}

pub fn message_tokens(m: &Message) -> u32 {
    let attachments = match m.raw.get("content") {
        Some(serde_json::Value::Array(parts)) => parts
            .iter()
            .filter(|p| {
                let t = p.get("type").and_then(|t| t.as_str()).unwrap_or("");
                !t.contains("text")
            })
            .count() as u32,
        _ => 0,
    };
    text_tokens(&m.text) + PER_MESSAGE + attachments * PER_ATTACHMENT
}

/// Applies a per-model ratio to our own count.
pub fn corrected(tokens: u64, ratio: Option<f64>) -> u64 {
    (tokens as f64 * ratio.unwrap_or(1.0)).ceil() as u64
}

/// The running ratio after one observation, or None when the observation is implausible.
pub fn next_ratio(previous: Option<f64>, provider: u64, ours: u64) -> Option<f64> {
    if ours == 0 || provider == 0 {
        return None;
    }
    let r = provider as f64 / ours as f64;
    if !(RATIO_RANGE.0..=RATIO_RANGE.1).contains(&r) {
        return None;
    }
    Some(match previous {
        Some(p) => p + RATIO_WEIGHT * (r - p),
        None => r,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_long_texts_count_is_remembered_and_the_same() {
        let long = "The quick brown fox jumps over the lazy dog. ".repeat(40);
        assert!(long.len() >= MEMO_FROM_BYTES);
        let first = text_tokens(&long);
        assert_eq!(first, encode(&long));
        assert_eq!(text_tokens(&long), first, "from the memo");
        let other = format!("{long}!");
        assert_ne!(text_tokens(&other), 0);
        assert_eq!(text_tokens(&other), encode(&other), "a different text is counted anew");
    }

    #[test]
    fn the_memo_keeps_two_generations() {
        let mut m = Memo { new: None, old: None };
        for i in 0..MEMO_ENTRIES as u64 {
            m.put((1, i), 1);
        }
        m.put((1, u64::MAX), 2); // the first generation becomes the old one
        assert_eq!(m.get((1, 0)), Some(1), "found in the old generation");
        assert_eq!(m.get((1, u64::MAX)), Some(2));
        assert_eq!(m.get((2, 0)), None);
    }

    #[test]
    fn a_text_counted_by_pieces_counts_as_a_whole() {
        // Real conversation text in blocks shaped like recall's: lines ending in punctuation,
        // blank lines, indented lines, CRLF, lines of spaces, non-Latin text.
        let dir = std::env::var("RECALLD_BENCH_DIR").unwrap_or_else(|_| "../../shared/bench".into());
        let traces = std::fs::read_to_string(format!("{dir}/agent-traces-dev.jsonl")).unwrap_or_default();
        let mut texts: Vec<String> = Vec::new();
        for line in traces.lines().take(40) {
            let trace: serde_json::Value = serde_json::from_str(line).unwrap();
            let messages = trace["messages"].as_array().cloned().unwrap_or_default();
            let joined: Vec<String> = messages.iter().map(|m| m["content"].to_string()).collect();
            let contents: Vec<&str> = messages.iter().filter_map(|m| m["content"].as_str()).collect();
            texts.push(contents.join("\n").chars().take(20_000).collect());
            texts.push(joined.join("\n").chars().take(5_000).collect());
        }
        texts.push("Recalled:\nAbout Caroline:\n- She went (turns 3–4, 8 May 2023)\n- x.\n\n\nExcerpts:\n[t 5]\n  indented\n\tcode();\r\nend\n \nnext".into());
        texts.push("a\n\nb \n c\u{3000}\n\u{3000}d\n日本語のテキスト\n's\n123\n!!\n".into());
        // The note ask, which measure counts piece by piece.
        texts.push(crate::engine::blocks::note_ask(2636, 2638, "note"));
        for (i, t) in texts.iter().enumerate() {
            let mut pieces = PieceCounts::default();
            assert_eq!(pieces.count(t), encode(t), "text {i}: {t:?}");
            assert_eq!(pieces.count(t), encode(t), "text {i} again, from the pieces seen");
        }
        assert!(texts.len() > 60, "the bench's traces were read");
    }

    #[test]
    fn a_requests_other_fields_count_as_their_text_and_a_change_is_counted_anew() {
        let fields = |description: &str| -> serde_json::Map<String, serde_json::Value> {
            let v = serde_json::json!({
                "model": "gpt-4o",
                "temperature": 0.2,
                "tools": [{"type": "function", "function": {"name": "search", "description": description,
                    "parameters": {"type": "object", "properties": {"q": {"type": "string"}}, "required": ["q"]}}}],
                "stream": false,
            });
            v.as_object().unwrap().clone()
        };
        let as_text = |m: &serde_json::Map<String, serde_json::Value>| encode(&serde_json::to_string(m).unwrap());
        let tools = fields("Searches the catalogue by title or author.");
        assert_eq!(json_tokens(&tools, None), as_text(&tools));
        assert_eq!(json_tokens(&tools, None), as_text(&tools), "from the memo");
        let edited = fields("Searches the catalogue by title, author or year of the edition.");
        assert_eq!(json_tokens(&edited, None), as_text(&edited));
        assert_ne!(json_tokens(&edited, None), json_tokens(&tools, None));
        // The same words moved to another field are another request.
        let mut moved = tools.clone();
        moved.insert("modelx".into(), moved["model"].clone());
        moved.remove("model");
        assert_eq!(json_tokens(&moved, None), as_text(&moved));
        assert_eq!(json_tokens(&serde_json::Map::new(), None), encode("{}"));
        // Tools that came as bytes, a null in their place: the same count, and an edit of them
        // is counted anew.
        let as_bytes = |m: &serde_json::Map<String, serde_json::Value>| {
            let mut lean = m.clone();
            let raw = Raw::of(&lean["tools"]);
            lean["tools"] = serde_json::Value::Null;
            (lean, raw)
        };
        let (lean, raw) = as_bytes(&tools);
        assert_eq!(json_tokens(&lean, Some(&raw)), as_text(&tools));
        assert_eq!(json_tokens(&lean, Some(&raw)), as_text(&tools), "from the memo");
        let (lean_edited, raw_edited) = as_bytes(&edited);
        assert_eq!(json_tokens(&lean_edited, Some(&raw_edited)), as_text(&edited));
    }

    #[test]
    fn counts_are_cl100k() {
        assert_eq!(text_tokens("hello world"), 2);
        assert_eq!(text_tokens(""), 0);
    }

    #[test]
    fn implausible_ratios_are_discarded() {
        assert_eq!(next_ratio(None, 110, 100), Some(1.1));
        assert_eq!(next_ratio(Some(1.0), 500, 100), None);
        assert_eq!(next_ratio(Some(1.0), 10, 100), None);
        let r = next_ratio(Some(1.0), 120, 100).unwrap();
        assert!((r - 1.06).abs() < 1e-9);
    }
}
