//! Entity resolution on real names (not a test): the names in LoCoMo dev's observations, each
//! pair's cosine under the built-in embedder, and what the resolver decides for it.
//!
//!     cargo run --release -p recalld --example entity_calibration [-- --min 0.7]
//!
//! Names are what a note would use as subject or object: each conversation's speakers, runs of
//! capitalised words inside a sentence ("LGBTQ support group" is not one, "Pride" is), and
//! possessive phrases ("Melanie's kids"). Pairs are taken within one conversation (a memory's
//! graph never spans two). Prints every pair at or above `--min`, most similar first, with the
//! resolver's decision (merge when cosine ≥ SAME_ENTITY and the guard does not keep them
//! apart), for labelling by hand; docs/models.md has the labelled result.

use std::collections::BTreeSet;
use std::path::PathBuf;

use recalld::engine::graph::{distinct, norm, SAME_ENTITY};
use recalld::models::{cosine, CallCtx, Embedder, MiniLm, Usage};
use serde_json::Value;

fn names_in(sentence: &str, out: &mut BTreeSet<String>) {
    let words: Vec<&str> = sentence.split_whitespace().collect();
    let clean = |w: &str| w.trim_matches(|c: char| !c.is_alphanumeric() && c != '\'').to_owned();
    let capital = |w: &str| w.chars().next().is_some_and(char::is_uppercase);
    let mut i = 1; // the first word is capitalised anyway
    while i < words.len() {
        if capital(words[i]) {
            let start = i;
            while i < words.len() && capital(words[i]) {
                i += 1;
            }
            let span: Vec<String> = words[start..i].iter().map(|w| clean(w)).collect();
            out.insert(span.join(" ").trim_end_matches("'s").to_owned());
            continue;
        }
        i += 1;
    }
    for (k, w) in words.iter().enumerate() {
        let w = clean(w);
        if let Some(owner) = w.strip_suffix("'s") {
            if capital(owner) && k + 1 < words.len() {
                let thing = clean(words[k + 1]);
                if !thing.is_empty() && !capital(&thing) {
                    out.insert(format!("{owner}'s {thing}"));
                }
            }
        }
    }
}

fn main() {
    let mut min = 0.7f32;
    let mut args = std::env::args().skip(1);
    while let Some(a) = args.next() {
        match a.as_str() {
            "--min" => min = args.next().and_then(|v| v.parse().ok()).expect("--min X"),
            other => panic!("unknown argument {other}"),
        }
    }
    let repo = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("..");
    let bench = std::env::var_os("RECALLD_BENCH_DIR")
        .map(PathBuf::from)
        .unwrap_or_else(|| repo.join("../shared/bench"));
    let model = std::env::var_os("RECALLD_MODEL_DIR")
        .map(PathBuf::from)
        .unwrap_or_else(|| repo.join("models/all-MiniLM-L6-v2"));
    let embedder = MiniLm::load(&model, 64, std::sync::Arc::new(Usage::default())).expect("built-in model");
    let data: Vec<Value> =
        serde_json::from_str(&std::fs::read_to_string(bench.join("locomo-dev.json")).expect("locomo-dev.json"))
            .unwrap();
    let (mut pairs, mut merged, mut guarded) = (0usize, 0usize, 0usize);
    for conv in &data {
        let mut names = BTreeSet::new();
        for key in ["speaker_a", "speaker_b"] {
            if let Some(s) = conv["conversation"][key].as_str() {
                names.insert(s.to_owned());
            }
        }
        for session in conv["observation"].as_object().into_iter().flat_map(|o| o.values()) {
            for facts in session.as_object().into_iter().flat_map(|o| o.values()) {
                for f in facts.as_array().into_iter().flatten() {
                    if let Some(text) = f[0].as_str() {
                        names_in(text, &mut names);
                    }
                }
            }
        }
        let names: Vec<String> = names.into_iter().filter(|n| norm(n).len() > 1).collect();
        let refs: Vec<&str> = names.iter().map(String::as_str).collect();
        let vs = embedder.embed(&CallCtx::new("calibration"), &refs).unwrap();
        let mut found: Vec<(f32, usize, usize)> = Vec::new();
        for i in 0..names.len() {
            for j in i + 1..names.len() {
                if norm(&names[i]) == norm(&names[j]) {
                    continue; // one entity by the normalised name, no embedding needed
                }
                let c = cosine(&vs[i], &vs[j]);
                if c >= min {
                    found.push((c, i, j));
                }
            }
        }
        found.sort_by(|a, b| b.0.total_cmp(&a.0));
        println!(
            "## {} ({} names)",
            conv["sample_id"].as_str().unwrap_or("?"),
            names.len()
        );
        for (c, i, j) in found {
            pairs += 1;
            let decision = if c < SAME_ENTITY {
                "apart (below threshold)"
            } else if distinct(&names[i], &names[j]) {
                guarded += 1;
                "apart (guard)"
            } else {
                merged += 1;
                "MERGE"
            };
            println!("{c:.3}\t{decision}\t{:?}\t{:?}", names[i], names[j]);
        }
    }
    println!("pairs ≥ {min}: {pairs}; merged at {SAME_ENTITY}: {merged}; kept apart by the guard: {guarded}");
}
