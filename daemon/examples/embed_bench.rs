//! The built-in embedder's speed, and the calibration of the built-in judge's thresholds.
//!
//! ```text
//! cargo run --release -p recalld --example embed_bench                 # latency + throughput
//! cargo run --release -p recalld --example embed_bench -- calibrate [LOCOMO_JSON]
//! ```
//! The model comes from `$RECALLD_MODEL_DIR` or `<repo>/models/all-MiniLM-L6-v2`
//! (`scripts/fetch-model.sh`). LOCOMO_JSON defaults to `<repo>/../shared/bench/locomo-dev.json`.
//! The method and the figures are written up in docs/models.md.

use std::collections::{BTreeMap, HashMap, HashSet};
use std::path::PathBuf;
use std::sync::Arc;
use std::time::Instant;

use recalld::models::{
    boundary_scores, cosine, CallCtx, Embedder, Judge, MiniLm, Relation, RulesJudge, Thresholds, Usage,
};
use serde_json::Value;

const CTX: CallCtx<'static> = CallCtx::new("bench");

fn repo() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("..")
}

fn load() -> MiniLm {
    let dir = match std::env::var_os("RECALLD_MODEL_DIR") {
        Some(d) if !d.is_empty() => PathBuf::from(d),
        _ => repo().join("models/all-MiniLM-L6-v2"),
    };
    MiniLm::load(&dir, 32, Arc::new(Usage::default())).unwrap_or_else(|e| {
        eprintln!("{e}");
        std::process::exit(1)
    })
}

fn median(mut xs: Vec<f64>) -> f64 {
    xs.sort_by(f64::total_cmp);
    xs[xs.len() / 2]
}

fn main() {
    let args: Vec<String> = std::env::args().skip(1).collect();
    match args.first().map(String::as_str) {
        Some("calibrate") => {
            let path = args
                .get(1)
                .map(PathBuf::from)
                .unwrap_or_else(|| repo().join("../shared/bench/locomo-dev.json"));
            calibrate(&path);
        }
        None | Some("bench") => bench(),
        Some(other) => {
            eprintln!("usage: embed_bench [bench | calibrate [LOCOMO_JSON]] (got {other:?})");
            std::process::exit(2);
        }
    }
}

// ---------------------------------------------------------------------------------------------
// Speed

fn bench() {
    let t = Instant::now();
    let m = load();
    println!("load: {:.0} ms", t.elapsed().as_secs_f64() * 1e3);
    let sentence =
        "The quick brown fox jumped over the lazy dog while the farmer watched quietly from the porch of his barn.";
    assert_eq!(sentence.split_whitespace().count(), 20);
    println!(
        "threads: {}",
        std::thread::available_parallelism().map_or(1, |n| n.get())
    );

    for _ in 0..5 {
        m.embed(&CTX, &[sentence]).unwrap();
    }
    let runs = 60;
    let lat: Vec<f64> = (0..runs)
        .map(|_| {
            let t = Instant::now();
            m.embed(&CTX, &[sentence]).unwrap();
            t.elapsed().as_secs_f64() * 1e3
        })
        .collect();
    let mut sorted = lat.clone();
    sorted.sort_by(f64::total_cmp);
    println!(
        "one 20-word sentence: median {:.2} ms, p90 {:.2} ms, min {:.2} ms over {runs} runs",
        median(lat),
        sorted[runs * 9 / 10],
        sorted[0]
    );

    // 64 different sentences of varied length (8-40 words).
    let words: Vec<&str> = "memory recall agent conversation model episode fact search vector token budget user \
        assistant context window history tool output note graph entity sleep fade seal passage index"
        .split_whitespace()
        .collect();
    let batch: Vec<String> = (0..64)
        .map(|i| {
            (0..8 + (i * 7) % 33)
                .map(|j| words[(i * 13 + j * 5) % words.len()])
                .collect::<Vec<_>>()
                .join(" ")
        })
        .collect();
    let refs: Vec<&str> = batch.iter().map(String::as_str).collect();
    m.embed(&CTX, &refs).unwrap();
    let runs = 7;
    let tput: Vec<f64> = (0..runs)
        .map(|_| {
            let t = Instant::now();
            m.embed(&CTX, &refs).unwrap();
            64.0 / t.elapsed().as_secs_f64()
        })
        .collect();
    let avg_tokens = m.token_counts(&refs).unwrap().iter().sum::<usize>() as f64 / 64.0;
    println!(
        "batch of 64 ({avg_tokens:.0} tokens on average): median {:.1} sentences/s over {runs} runs ({:.2} ms per sentence)",
        median(tput.clone()),
        1e3 / median(tput)
    );
}

// ---------------------------------------------------------------------------------------------
// Calibration on LoCoMo

/// `D<n>:<i>` ids, tolerating the malformed ones (`D:11:26`, `D30:05`, `D8:6; D9:17`).
fn dia_ids(v: &Value) -> Vec<(u32, u32)> {
    let mut raw: Vec<String> = Vec::new();
    match v {
        Value::String(s) => raw.push(s.clone()),
        Value::Array(a) => raw.extend(a.iter().filter_map(|x| x.as_str().map(str::to_string))),
        _ => {}
    }
    let mut out = Vec::new();
    for s in raw {
        for tok in s.split([';', ',', ' ']).filter(|t| !t.is_empty()) {
            let t = tok.trim_start_matches('D').trim_start_matches(':');
            if let Some((a, b)) = t.split_once(':') {
                if let (Ok(a), Ok(b)) = (a.trim().parse(), b.trim().parse()) {
                    out.push((a, b));
                }
            }
        }
    }
    out
}

struct Turn {
    id: (u32, u32),
    text: String,
}

struct Fact {
    text: String,
    session: u32,
    ids: Vec<(u32, u32)>,
}

/// question, answer, evidence turns
type Qa = (String, String, Vec<(u32, u32)>);

struct Conv {
    sessions: BTreeMap<u32, Vec<Turn>>,
    facts: Vec<Fact>,
    qa: Vec<Qa>,
}

fn read_locomo(path: &PathBuf) -> Vec<Conv> {
    let data: Value = serde_json::from_str(&std::fs::read_to_string(path).unwrap_or_else(|e| {
        eprintln!("cannot read {}: {e}", path.display());
        std::process::exit(1)
    }))
    .unwrap();
    let mut convs = Vec::new();
    for sample in data.as_array().unwrap() {
        let c = &sample["conversation"];
        let mut sessions = BTreeMap::new();
        for (k, v) in c.as_object().unwrap() {
            let Some(n) = k.strip_prefix("session_").and_then(|n| n.parse::<u32>().ok()) else {
                continue;
            };
            let Some(turns) = v.as_array() else { continue };
            let turns: Vec<Turn> = turns
                .iter()
                .filter_map(|t| {
                    let id = *dia_ids(&t["dia_id"]).first()?;
                    let mut text = t["text"].as_str().unwrap_or("").to_string();
                    if let Some(cap) = t["blip_caption"].as_str() {
                        text = format!("{text} [shares {cap}]");
                    }
                    Some(Turn {
                        id,
                        text: format!("{}: {}", t["speaker"].as_str().unwrap_or("?"), text.trim()),
                    })
                })
                .collect();
            if !turns.is_empty() {
                sessions.insert(n, turns);
            }
        }
        let mut facts = Vec::new();
        for (k, v) in sample["observation"].as_object().unwrap() {
            let Some(n) = k
                .strip_prefix("session_")
                .and_then(|r| r.strip_suffix("_observation"))
                .and_then(|n| n.parse().ok())
            else {
                continue;
            };
            for list in v.as_object().unwrap().values() {
                for f in list.as_array().unwrap() {
                    let text = f[0].as_str().unwrap_or("").to_string();
                    let ids = dia_ids(&f[1]);
                    if !text.is_empty() && !ids.is_empty() {
                        facts.push(Fact { text, session: n, ids });
                    }
                }
            }
        }
        let qa = sample["qa"]
            .as_array()
            .unwrap()
            .iter()
            .filter(|q| (1..=4).contains(&q["category"].as_u64().unwrap_or(0)))
            .filter_map(|q| {
                let ev = dia_ids(&q["evidence"]);
                let answer = match &q["answer"] {
                    Value::String(s) => s.clone(),
                    other => other.to_string(),
                };
                (!ev.is_empty()).then(|| (q["question"].as_str().unwrap_or("").to_string(), answer, ev))
            })
            .collect();
        convs.push(Conv { sessions, facts, qa });
    }
    convs
}

/// Precision, recall and F1 of `score >= t`.
fn prf(pairs: &[(f32, bool)], t: f32) -> (f64, f64, f64) {
    let tp = pairs.iter().filter(|(s, y)| *y && *s >= t).count() as f64;
    let fp = pairs.iter().filter(|(s, y)| !*y && *s >= t).count() as f64;
    let pos = pairs.iter().filter(|(_, y)| *y).count() as f64;
    let p = if tp + fp > 0.0 { tp / (tp + fp) } else { 1.0 };
    let r = if pos > 0.0 { tp / pos } else { 0.0 };
    let f = if p + r > 0.0 { 2.0 * p * r / (p + r) } else { 0.0 };
    (p, r, f)
}

/// Area under the ROC curve (probability a positive outscores a negative).
fn auc(pairs: &[(f32, bool)]) -> f64 {
    let mut v: Vec<(f32, bool)> = pairs.to_vec();
    v.sort_by(|a, b| a.0.total_cmp(&b.0));
    let (mut neg_below, mut sum) = (0f64, 0f64);
    let pos = v.iter().filter(|x| x.1).count() as f64;
    let neg = v.len() as f64 - pos;
    for (_, y) in &v {
        if *y {
            sum += neg_below;
        } else {
            neg_below += 1.0;
        }
    }
    sum / (pos * neg).max(1.0)
}

/// Candidate thresholds on a 0.01 grid.
fn grid() -> impl Iterator<Item = f32> {
    (0..=100).map(|i| i as f32 / 100.0)
}

fn best_f1(pairs: &[(f32, bool)]) -> f32 {
    grid()
        .max_by(|&a, &b| prf(pairs, a).2.total_cmp(&prf(pairs, b).2))
        .unwrap()
}

/// F-beta with beta = 2 (recall weighs twice as much as precision).
fn f2(pairs: &[(f32, bool)], t: f32) -> f64 {
    let (p, r, _) = prf(pairs, t);
    if p + r == 0.0 {
        0.0
    } else {
        5.0 * p * r / (4.0 * p + r)
    }
}

fn best_f2(pairs: &[(f32, bool)]) -> f32 {
    grid().max_by(|&a, &b| f2(pairs, a).total_cmp(&f2(pairs, b))).unwrap()
}

/// The highest threshold keeping recall at least `r`.
fn at_recall(pairs: &[(f32, bool)], r: f64) -> f32 {
    grid().filter(|&t| prf(pairs, t).1 >= r).last().unwrap_or(0.0)
}

/// The lowest threshold reaching precision at least `p`.
fn at_precision(pairs: &[(f32, bool)], p: f64) -> f32 {
    grid().find(|&t| prf(pairs, t).0 >= p).unwrap_or(1.0)
}

fn report(name: &str, pairs: &[(f32, bool)], t: f32) {
    let (p, r, f) = prf(pairs, t);
    let pos = pairs.iter().filter(|x| x.1).count();
    println!(
        "  {name:<28} t={t:.2}  precision {p:.3}  recall {r:.3}  F1 {f:.3}  (pos {pos}, neg {})",
        pairs.len() - pos
    );
}

/// Embed, reusing `target/embed_bench_calibration.json` when it holds exactly these texts.
fn cached_embed(m: &MiniLm, texts: &[&str]) -> Vec<Vec<f32>> {
    let cache = repo().join("target/embed_bench_calibration.json");
    if let Ok(s) = std::fs::read_to_string(&cache) {
        if let Ok((t, v)) = serde_json::from_str::<(Vec<String>, Vec<Vec<f32>>)>(&s) {
            if t.len() == texts.len() && t.iter().zip(texts).all(|(a, b)| a == b) {
                return v;
            }
        }
    }
    let v = m.embed(&CTX, texts).unwrap();
    let _ = std::fs::write(&cache, serde_json::to_string(&(texts, &v)).unwrap());
    v
}

/// Serves precomputed vectors, so the real judge code runs on the calibration set.
struct Precomputed(HashMap<String, Vec<f32>>);

impl Embedder for Precomputed {
    fn id(&self) -> recalld::models::ModelId {
        recalld::models::ModelId {
            name: "precomputed".into(),
            dim: 384,
        }
    }
    fn embed(&self, _: &CallCtx, texts: &[&str]) -> Result<Vec<Vec<f32>>, recalld::models::ModelError> {
        Ok(texts.iter().map(|t| self.0[*t].clone()).collect())
    }
}

fn calibrate(path: &PathBuf) {
    let m = load();
    let convs = read_locomo(path);
    let defaults = Thresholds::default();
    // Embed everything once.
    let mut texts: Vec<String> = Vec::new();
    for c in &convs {
        for turns in c.sessions.values() {
            texts.extend(turns.iter().map(|t| t.text.clone()));
        }
        texts.extend(c.facts.iter().map(|f| f.text.clone()));
        for (q, a, _) in &c.qa {
            texts.push(q.clone());
            texts.push(format!("user: {q}\nassistant: {a}"));
        }
    }
    texts.sort();
    texts.dedup();
    let t = Instant::now();
    let refs: Vec<&str> = texts.iter().map(String::as_str).collect();
    let vecs = cached_embed(&m, &refs);
    println!("embedded {} texts in {:.1} s", texts.len(), t.elapsed().as_secs_f64());
    let vec_of: HashMap<&str, &Vec<f32>> = refs.iter().copied().zip(vecs.iter()).collect();
    let v = |s: &str| vec_of[s].as_slice();

    // about: fact vs its own session's turns (positive) and every other session's (negative);
    // score = best cosine to a turn.
    let mut about = Vec::new();
    for c in &convs {
        for f in &c.facts {
            for (n, turns) in &c.sessions {
                let s = turns
                    .iter()
                    .map(|t| cosine(v(&f.text), v(&t.text)))
                    .fold(-1.0, f32::max);
                about.push((s, *n == f.session));
            }
        }
    }
    println!("\nabout (fact vs session turns, best cosine), AUC {:.3}", auc(&about));
    report("best F1", &about, best_f1(&about));
    report("best F2", &about, best_f2(&about));
    report("default", &about, defaults.about);
    for t in [0.5, 0.6, 0.65, 0.7, 0.75, 0.8] {
        report("", &about, t);
    }

    // walk: question as the dialogue; candidates = the 20 facts of the conversation nearest to
    // it (what search would hand the walk); positive = the fact cites an evidence turn.
    let mut walk = Vec::new();
    let mut distill = Vec::new();
    for c in &convs {
        for (q, a, ev) in &c.qa {
            let ev: HashSet<(u32, u32)> = ev.iter().copied().collect();
            let mut cands: Vec<(f32, &Fact)> = c.facts.iter().map(|f| (cosine(v(q), v(&f.text)), f)).collect();
            cands.sort_by(|x, y| y.0.total_cmp(&x.0));
            cands.truncate(20);
            if !cands.iter().any(|(_, f)| f.ids.iter().any(|i| ev.contains(i))) {
                continue;
            }
            let conv = format!("user: {q}\nassistant: {a}");
            for (s, f) in &cands {
                let y = f.ids.iter().any(|i| ev.contains(i));
                walk.push((*s, y));
                distill.push((cosine(v(&conv), v(&f.text)), y));
            }
        }
    }
    println!(
        "\nwalk (question vs its 20 nearest facts; positive = fact from an evidence turn), AUC {:.3}",
        auc(&walk)
    );
    report("related = recall 0.90", &walk, at_recall(&walk, 0.90));
    report("best F1", &walk, best_f1(&walk));
    report("keep = best F2", &walk, best_f2(&walk));
    report("central = precision 0.5", &walk, at_precision(&walk, 0.5));
    report("default related", &walk, defaults.walk_related);
    report("default keep", &walk, defaults.walk_keep);
    report("default central", &walk, defaults.walk_central);

    println!(
        "\ndistill (question + answer vs the same candidates), AUC {:.3}",
        auc(&distill)
    );
    report("best F1", &distill, best_f1(&distill));
    report("best F2", &distill, best_f2(&distill));
    report("recall 0.80", &distill, at_recall(&distill, 0.80));
    report("default", &distill, defaults.distill);

    // boundaries: all turns of a conversation in a row; positive = a session's first turn
    // (for `first`) or last turn (for `last`).
    println!("\nboundaries (turns of each conversation in a row; positive = session start / end)");
    for w in [1usize, 2, 3, 5] {
        let (mut first, mut last) = (Vec::new(), Vec::new());
        for c in &convs {
            let turns: Vec<&Turn> = c.sessions.values().flatten().collect();
            let vs: Vec<&[f32]> = turns.iter().map(|t| v(&t.text)).collect();
            let s = boundary_scores(&vs, w);
            for i in 1..turns.len() - 1 {
                first.push((s[i].first, turns[i].id.1 == 1));
                last.push((s[i].last, turns[i + 1].id.1 == 1));
            }
        }
        println!("  window {w}: AUC first {:.3}, last {:.3}", auc(&first), auc(&last));
    }

    // relation: how many pairs of facts of one conversation the rules would call restatements.
    let mut near = Vec::new();
    for c in &convs {
        for (i, a) in c.facts.iter().enumerate() {
            for b in &c.facts[i + 1..] {
                let s = cosine(v(&a.text), v(&b.text));
                if s >= 0.75 {
                    near.push((s, a.text.clone(), b.text.clone()));
                }
            }
        }
    }
    near.sort_by(|x, y| y.0.total_cmp(&x.0));
    let judge = RulesJudge::new(
        Arc::new(Precomputed(
            refs.iter().map(|t| (t.to_string(), vec_of[t].clone())).collect(),
        )),
        defaults.clone(),
        Arc::new(Usage::default()),
    );
    let mut counts: BTreeMap<String, usize> = BTreeMap::new();
    for (_, a, b) in &near {
        let r = judge.relation(&CTX, a, b).unwrap();
        *counts.entry(format!("{r:?}")).or_default() += 1;
        if r == Relation::Contradicts {
            println!("  contradicts: {a}  |  {b}");
        }
    }
    println!("  rules on the pairs at cosine >= 0.75: {counts:?}");
    let restates = near.iter().filter(|x| x.0 >= defaults.restates).count();
    println!(
        "\nrelation: {} fact pairs at cosine >= 0.75, {restates} at >= {:.2}; samples:",
        near.len(),
        defaults.restates
    );
    for (s, a, b) in near.iter().step_by((near.len() / 12).max(1)).take(12) {
        println!("  {s:.3}  {a}  |  {b}");
    }
}
