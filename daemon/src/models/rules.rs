//! The built-in judge: embedding similarity plus simple, documented rules (docs/models.md).
//! Works offline with any [`Embedder`]; its thresholds are cosines calibrated for
//! all-MiniLM-L6-v2 on LoCoMo.
//!
//! - boundaries: a unit scores high as `first` when it is unlike the units before it, and as
//!   `last` when it is unlike the units after it (half unit-vs-neighbours, half
//!   block-vs-block, TextTiling style); the ends of the list score 1.
//! - about: the best cosine between the fact and the episode's passages, against a threshold.
//! - walk levels: the best cosine between the fact and a chunk of the dialogue, in four bands.
//! - distill: keep a fact whose best cosine to the conversation passes a threshold, unless a
//!   line of the conversation already says it (near-identical).
//! - relation: `Restates` when near-identical with no conflict signal; `Contradicts` only when
//!   very similar in meaning and wording and a number or a negation differs; else `Unrelated`.

use std::collections::HashSet;
use std::sync::Arc;

use super::config::Thresholds;
use super::usage::{Kind, Usage};
use super::{cosine, BoundaryScore, CallCtx, Embedder, Judge, ModelError, Relation, WalkLevel};

/// Words per dialogue chunk (the model reads at most 256 tokens).
const CHUNK_WORDS: usize = 120;
/// Distill's "already said": a line is compared with a fact only when it shares this many of
/// its words (content words and numbers; all of them when it has fewer), and at most this many
/// lines are compared.
const SAID_SHARED_WORDS: usize = 2;
const SAID_LINES: usize = 24;

/// The built-in, rule-based judge.
pub struct RulesJudge {
    embedder: Arc<dyn Embedder>,
    t: Thresholds,
    usage: Arc<Usage>,
}

impl RulesJudge {
    pub fn new(embedder: Arc<dyn Embedder>, thresholds: Thresholds, usage: Arc<Usage>) -> RulesJudge {
        RulesJudge {
            embedder,
            t: thresholds,
            usage,
        }
    }

    /// The thresholds in use.
    pub fn thresholds(&self) -> &Thresholds {
        &self.t
    }

    /// The texts' vectors (the models' shared cache answers those embedded lately: an
    /// episode's units are judged against many facts).
    fn vectors(&self, ctx: &CallCtx, texts: &[&str]) -> Result<Vec<Vec<f32>>, ModelError> {
        let vs = self.embedder.embed(ctx, texts)?;
        if vs.len() != texts.len() {
            return Err(ModelError::Malformed(format!(
                "embedder returned {} vectors for {} texts",
                vs.len(),
                texts.len()
            )));
        }
        Ok(vs)
    }

    fn counted<T>(&self, ctx: &CallCtx, r: Result<T, ModelError>) -> Result<T, ModelError> {
        match &r {
            Ok(_) => self.usage.record(ctx.memory, Kind::Judge, 0),
            Err(_) => self.usage.record_error(ctx.memory),
        }
        r
    }

    /// The best cosine of each fact against the chunks of `text`.
    fn best_against(&self, ctx: &CallCtx, text: &str, facts: &[&str]) -> Result<Vec<f32>, ModelError> {
        let chunks = chunk_text(text, CHUNK_WORDS);
        let chunk_refs: Vec<&str> = chunks.iter().map(String::as_str).collect();
        let mut all: Vec<&str> = facts.to_vec();
        all.extend(&chunk_refs);
        let vs = self.vectors(ctx, &all)?;
        let (fv, cv) = vs.split_at(facts.len());
        Ok(fv
            .iter()
            .map(|f| cv.iter().map(|c| cosine(f, c)).fold(-1.0f32, f32::max))
            .collect())
    }

    /// Scores for `about`: the best cosine of the fact to any passage (0 with no passage).
    pub fn about_score(&self, ctx: &CallCtx, fact: &str, passages: &[&str]) -> Result<f32, ModelError> {
        if passages.is_empty() {
            return Ok(0.0);
        }
        let mut all = vec![fact];
        all.extend_from_slice(passages);
        let vs = self.vectors(ctx, &all)?;
        Ok(vs[1..].iter().map(|p| cosine(&vs[0], p)).fold(-1.0f32, f32::max))
    }

    /// The raw walk cosine of each fact against the dialogue.
    pub fn walk_scores(&self, ctx: &CallCtx, dialogue: &str, facts: &[&str]) -> Result<Vec<f32>, ModelError> {
        if facts.is_empty() {
            return Ok(Vec::new());
        }
        self.best_against(ctx, dialogue, facts)
    }

    fn level(&self, cos: f32) -> WalkLevel {
        if cos >= self.t.walk_central {
            WalkLevel::Central
        } else if cos >= self.t.walk_keep {
            WalkLevel::Keep
        } else if cos >= self.t.walk_related {
            WalkLevel::Related
        } else {
            WalkLevel::Unrelated
        }
    }

    fn boundaries_inner(&self, ctx: &CallCtx, units: &[&str]) -> Result<Vec<BoundaryScore>, ModelError> {
        let vs = self.vectors(ctx, units)?;
        let vs: Vec<&[f32]> = vs.iter().map(|v| v.as_slice()).collect();
        Ok(boundary_scores(&vs, self.t.boundary_window.max(1)))
    }

    fn distill_inner(&self, ctx: &CallCtx, facts: &[&str], conversation: &str) -> Result<Vec<usize>, ModelError> {
        if facts.is_empty() {
            return Ok(Vec::new());
        }
        let relevant = self.best_against(ctx, conversation, facts)?;
        // "Already said": a single line of the conversation (without its `speaker:` prefix)
        // that is near-identical, or that contains the fact word for word.
        let lines: Vec<&str> = conversation
            .lines()
            .map(strip_speaker)
            .filter(|l| !l.is_empty())
            .collect();
        let line_norms: Vec<String> = lines.iter().map(|l| Words::of(l).norm).collect();
        let verbatim = |i: usize| {
            let f = Words::of(facts[i]).norm;
            !f.is_empty() && line_norms.iter().any(|l| l.contains(&f))
        };
        // Only the relevant facts are checked line by line: the lines (a tool output has many)
        // are embedded only when some fact could be kept.
        let candidates: Vec<usize> = (0..facts.len())
            .filter(|&i| relevant[i] >= self.t.distill && !verbatim(i))
            .collect();
        if candidates.is_empty() || lines.is_empty() {
            return Ok(candidates);
        }
        // A line can only say a fact again if it shares its words: only those lines are
        // embedded, the ones sharing most first (a conversation holding tool outputs has
        // hundreds of lines, and each is a model pass).
        let keys: Vec<HashSet<String>> = candidates.iter().map(|&i| Words::of(facts[i]).keys()).collect();
        let mut near: Vec<(usize, usize)> = lines
            .iter()
            .enumerate()
            .filter_map(|(at, l)| {
                let words = Words::of(l).keys();
                let shared = keys
                    .iter()
                    .map(|k| (k.intersection(&words).count(), k.len().clamp(1, SAID_SHARED_WORDS)))
                    .filter(|&(n, needed)| n >= needed)
                    .map(|(n, _)| n)
                    .max()?;
                Some((at, shared))
            })
            .collect();
        near.sort_by(|a, b| b.1.cmp(&a.1).then(a.0.cmp(&b.0)));
        near.truncate(SAID_LINES);
        if near.is_empty() {
            return Ok(candidates);
        }
        let mut all: Vec<&str> = candidates.iter().map(|&i| facts[i]).collect();
        all.extend(near.iter().map(|&(at, _)| lines[at]));
        let vs = self.vectors(ctx, &all)?;
        let (fv, lv) = vs.split_at(candidates.len());
        Ok(candidates
            .iter()
            .zip(fv)
            .filter(|(_, f)| lv.iter().map(|l| cosine(f, l)).fold(-1.0f32, f32::max) < self.t.distill_said)
            .map(|(&i, _)| i)
            .collect())
    }

    fn relation_inner(&self, ctx: &CallCtx, new_fact: &str, held_fact: &str) -> Result<Relation, ModelError> {
        let (a, b) = (Words::of(new_fact), Words::of(held_fact));
        if a.norm == b.norm {
            return Ok(Relation::Restates);
        }
        let vs = self.vectors(ctx, &[new_fact, held_fact])?;
        Ok(decide_relation(cosine(&vs[0], &vs[1]), &a, &b, &self.t))
    }
}

/// Boundary scores from unit vectors (exposed for calibration and tests).
/// `first[i]` mixes (1) the unit against the mean of the `w` units before it and (2) the block
/// of `w` units starting at `i` against the block before; `last[i]` mirrors it with the units
/// after. Each part is `(1 - cos) / 2` in [0, 1]; the first unit's `first` and the last
/// unit's `last` are 1.
pub fn boundary_scores(vs: &[&[f32]], w: usize) -> Vec<BoundaryScore> {
    let n = vs.len();
    let mean = |r: std::ops::Range<usize>| -> Vec<f32> {
        let dim = vs.first().map_or(0, |v| v.len());
        let mut m = vec![0f32; dim];
        for v in &vs[r] {
            for (x, y) in m.iter_mut().zip(v.iter()) {
                *x += *y;
            }
        }
        m
    };
    let dist = |a: &[f32], b: &[f32]| (1.0 - cosine(a, b)) / 2.0;
    (0..n)
        .map(|i| {
            let first = if i == 0 {
                1.0
            } else {
                let before = mean(i.saturating_sub(w)..i);
                let block = mean(i..(i + w).min(n));
                0.5 * dist(vs[i], &before) + 0.5 * dist(&block, &before)
            };
            let last = if i + 1 == n {
                1.0
            } else {
                let after = mean(i + 1..(i + 1 + w).min(n));
                let block = mean((i + 1).saturating_sub(w)..i + 1);
                0.5 * dist(vs[i], &after) + 0.5 * dist(&block, &after)
            };
            BoundaryScore { first, last }
        })
        .collect()
}

/// A line without a leading `speaker:` label (one word of at most 24 characters).
fn strip_speaker(line: &str) -> &str {
    let line = line.trim();
    match line.split_once(':') {
        Some((head, rest)) if !head.is_empty() && head.len() <= 24 && !head.contains(char::is_whitespace) => {
            rest.trim()
        }
        _ => line,
    }
}

/// Split text into chunks of whole lines up to `max_words` words (longer lines are split by
/// words). Never empty: an empty text gives one empty chunk.
pub(crate) fn chunk_text(text: &str, max_words: usize) -> Vec<String> {
    let mut chunks = Vec::new();
    let mut cur: Vec<&str> = Vec::new();
    let mut cur_words = 0;
    for line in text.lines().map(str::trim).filter(|l| !l.is_empty()) {
        let words: Vec<&str> = line.split_whitespace().collect();
        if words.len() > max_words {
            if !cur.is_empty() {
                chunks.push(cur.join("\n"));
                cur.clear();
                cur_words = 0;
            }
            for piece in words.chunks(max_words) {
                chunks.push(piece.join(" "));
            }
            continue;
        }
        if cur_words + words.len() > max_words && !cur.is_empty() {
            chunks.push(cur.join("\n"));
            cur.clear();
            cur_words = 0;
        }
        cur.push(line);
        cur_words += words.len();
    }
    if !cur.is_empty() {
        chunks.push(cur.join("\n"));
    }
    if chunks.is_empty() {
        chunks.push(String::new());
    }
    chunks
}

const NEGATIONS: &[&str] = &[
    "not", "no", "never", "none", "nobody", "nothing", "neither", "nor", "cannot", "cant", "dont", "doesnt", "didnt",
    "isnt", "arent", "wasnt", "werent", "wont", "wouldnt", "shouldnt", "couldnt", "hasnt", "havent", "hadnt", "aint",
    "nowhere", "n't",
];
/// Number words; the first `NUMBER_VALUES.len()` are rewritten as digits.
const NUMBER_WORDS: &[&str] = &[
    "zero", "one", "two", "three", "four", "five", "six", "seven", "eight", "nine", "ten", "eleven", "twelve",
    "twenty", "thirty", "forty", "fifty", "hundred", "thousand", "million", "first", "second", "third", "once",
    "twice",
];
const NUMBER_VALUES: &[u32] = &[
    0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 20, 30, 40, 50, 100, 1000, 1_000_000,
];
const STOPWORDS: &[&str] = &[
    "a", "an", "the", "and", "or", "of", "to", "in", "on", "at", "for", "with", "by", "is", "are", "was", "were", "be",
    "been", "has", "have", "had", "do", "does", "did", "it", "its", "this", "that", "as", "from", "their", "his",
    "her", "they", "he", "she", "i", "we", "you", "my", "our", "your", "will", "would", "also", "very", "really",
];

/// The words of a fact as the relation rules see them.
pub(crate) struct Words {
    /// Lowercase words joined by one space (equality = restatement).
    norm: String,
    content: HashSet<String>,
    numbers: HashSet<String>,
    negated: bool,
}

impl Words {
    pub(crate) fn of(text: &str) -> Words {
        let lower = text.to_lowercase().replace('’', "'");
        let mut words: Vec<String> = Vec::new();
        for raw in lower.split(|c: char| !(c.is_alphanumeric() || c == '\'' || c == '.' || c == ',')) {
            let w = raw.trim_matches(|c: char| c == '\'' || c == '.' || c == ',');
            if w.is_empty() {
                continue;
            }
            // "doesn't" → "doesnt"; keep digits with separators ("1,500", "3.5") whole.
            let w = if w.chars().any(|c| c.is_ascii_digit()) {
                w.replace(',', "")
            } else {
                w.replace(['\'', '.', ','], "")
            };
            // "two" and "2" are the same number.
            let w = match NUMBER_WORDS.iter().position(|n| *n == w) {
                Some(i) if i < NUMBER_VALUES.len() => NUMBER_VALUES[i].to_string(),
                _ => w,
            };
            if !w.is_empty() {
                words.push(w);
            }
        }
        let negated = words.iter().any(|w| NEGATIONS.contains(&w.as_str()));
        let numbers: HashSet<String> = words
            .iter()
            .filter(|w| w.chars().any(|c| c.is_ascii_digit()) || NUMBER_WORDS.contains(&w.as_str()))
            .cloned()
            .collect();
        let content: HashSet<String> = words
            .iter()
            .filter(|w| !STOPWORDS.contains(&w.as_str()) && !NEGATIONS.contains(&w.as_str()) && !numbers.contains(*w))
            .map(|w| stem(w).to_string())
            .collect();
        Words {
            norm: words.join(" "),
            content,
            numbers,
            negated,
        }
    }

    /// Content words and numbers: what two texts saying the same thing share.
    fn keys(self) -> HashSet<String> {
        let mut k = self.content;
        k.extend(self.numbers);
        k
    }

    fn overlap(&self, other: &Words) -> f32 {
        let union = self.content.union(&other.content).count();
        if union == 0 {
            return 0.0;
        }
        self.content.intersection(&other.content).count() as f32 / union as f32
    }
}

/// A crude suffix stripper so "likes" and "like" count as one word.
/// (then a final "e": "likes", "liked", "like" and "liking" all become "lik").
fn stem(w: &str) -> &str {
    let mut root = w;
    for suffix in ["ing", "ed", "es", "s"] {
        if let Some(r) = w.strip_suffix(suffix) {
            if r.chars().count() >= 3 {
                root = r;
                break;
            }
        }
    }
    match root.strip_suffix('e') {
        Some(r) if r.chars().count() >= 3 => r,
        _ => root,
    }
}

/// The relation rule (exposed for tests): see the module docs.
pub(crate) fn decide_relation(cos: f32, a: &Words, b: &Words, t: &Thresholds) -> Relation {
    let numbers_differ = !a.numbers.is_empty() && !b.numbers.is_empty() && a.numbers != b.numbers;
    let negation_differs = a.negated != b.negated;
    let conflict = numbers_differ || negation_differs;
    if conflict {
        if cos >= t.contradicts && a.overlap(b) >= t.contradicts_overlap {
            return Relation::Contradicts;
        }
        return Relation::Unrelated;
    }
    if cos >= t.restates {
        return Relation::Restates;
    }
    Relation::Unrelated
}

impl Judge for RulesJudge {
    fn name(&self) -> String {
        format!("builtin-rules ({})", self.embedder.id().name)
    }

    fn boundaries(&self, ctx: &CallCtx, units: &[&str]) -> Result<Vec<BoundaryScore>, ModelError> {
        let r = self.boundaries_inner(ctx, units);
        self.counted(ctx, r)
    }

    fn about(&self, ctx: &CallCtx, fact: &str, episode_passages: &[&str]) -> Result<(f32, bool), ModelError> {
        let r = self
            .about_score(ctx, fact, episode_passages)
            .map(|s| (s.clamp(0.0, 1.0), !episode_passages.is_empty() && s >= self.t.about));
        self.counted(ctx, r)
    }

    fn walk_levels(&self, ctx: &CallCtx, dialogue: &str, facts: &[&str]) -> Result<Vec<WalkLevel>, ModelError> {
        let r = self
            .walk_scores(ctx, dialogue, facts)
            .map(|s| s.into_iter().map(|c| self.level(c)).collect());
        self.counted(ctx, r)
    }

    fn distill(&self, ctx: &CallCtx, facts: &[&str], conversation: &str) -> Result<Vec<usize>, ModelError> {
        let r = self.distill_inner(ctx, facts, conversation);
        self.counted(ctx, r)
    }

    fn relation(&self, ctx: &CallCtx, new_fact: &str, held_fact: &str) -> Result<Relation, ModelError> {
        let r = self.relation_inner(ctx, new_fact, held_fact);
        self.counted(ctx, r)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn chunks_keep_lines_and_bound_words() {
        assert_eq!(chunk_text("", 5), vec![String::new()]);
        assert_eq!(
            chunk_text("a b\nc d\n\ne f g", 4),
            vec!["a b\nc d".to_string(), "e f g".to_string()]
        );
        let long = "w ".repeat(11);
        assert_eq!(chunk_text(&long, 5).len(), 3);
    }

    #[test]
    fn words_see_numbers_and_negation() {
        let a = Words::of("Caroline doesn't have 3 dogs.");
        assert!(a.negated);
        assert!(a.numbers.contains("3"));
        assert!(
            a.content.contains("carolin") && a.content.contains("dog"),
            "{:?}",
            a.content
        );
        assert_eq!(
            Words::of("Caroline likes hiking").content,
            Words::of("caroline like hike").content
        );
        let b = Words::of("Caroline has 1,500 dollars");
        assert!(!b.negated && b.numbers.contains("1500"));
    }

    #[test]
    fn relation_rules_are_conservative() {
        let t = Thresholds::default();
        let a = Words::of("Melanie has two kids");
        let b = Words::of("Melanie has three kids");
        assert_eq!(decide_relation(0.9, &a, &b, &t), Relation::Contradicts);
        // Same conflict signal but weak similarity: never a contradiction.
        assert_eq!(decide_relation(0.5, &a, &b, &t), Relation::Unrelated);
        let c = Words::of("Melanie likes painting");
        let d = Words::of("Melanie enjoys painting");
        assert_eq!(decide_relation(0.95, &c, &d, &t), Relation::Restates);
        assert_eq!(decide_relation(0.7, &c, &d, &t), Relation::Unrelated);
    }

    #[test]
    fn boundary_ends_score_one_and_a_jump_scores_high() {
        let x = [1.0f32, 0.0];
        let y = [0.0f32, 1.0];
        let vs: Vec<&[f32]> = vec![&x, &x, &x, &y, &y, &y];
        let s = boundary_scores(&vs, 2);
        assert_eq!(s[0].first, 1.0);
        assert_eq!(s[5].last, 1.0);
        let best_first = (1..6).max_by(|&a, &b| s[a].first.total_cmp(&s[b].first)).unwrap();
        let best_last = (0..5).max_by(|&a, &b| s[a].last.total_cmp(&s[b].last)).unwrap();
        assert_eq!((best_first, best_last), (3, 2));
    }
}
