//! The built-in models against the real all-MiniLM-L6-v2 weights: reference vectors and judge
//! behaviour. The model is found via `RECALLD_MODEL_DIR` or `<repo>/models/all-MiniLM-L6-v2`;
//! when it is missing these tests FAIL with the command that fetches it.

use std::path::PathBuf;
use std::sync::{Arc, OnceLock};

use recalld::models::{
    cosine, CallCtx, Embedder, Judge, MiniLm, ModelError, Models, ModelsConfig, Relation, RulesJudge, Thresholds,
    Usage, WalkLevel,
};

fn model_dir() -> PathBuf {
    match std::env::var_os("RECALLD_MODEL_DIR") {
        Some(d) if !d.is_empty() => PathBuf::from(d),
        _ => PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../models/all-MiniLM-L6-v2"),
    }
}

/// One loaded model shared by all tests of this binary (loading takes ~0.2 s).
fn minilm() -> Arc<MiniLm> {
    static M: OnceLock<Arc<MiniLm>> = OnceLock::new();
    M.get_or_init(|| match MiniLm::load(&model_dir(), 32, Arc::new(Usage::default())) {
        Ok(m) => Arc::new(m),
        Err(e) => panic!("{e}"),
    })
    .clone()
}

fn judge() -> RulesJudge {
    RulesJudge::new(minilm(), Thresholds::default(), Arc::new(Usage::default()))
}

const CTX: CallCtx<'static> = CallCtx::new("test");

#[derive(serde::Deserialize)]
struct RefFile {
    items: Vec<RefItem>,
}
#[derive(serde::Deserialize)]
struct RefItem {
    text: String,
    tokens: usize,
    vector: Vec<f32>,
}

fn reference() -> RefFile {
    let path = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("tests/data/embeddings_ref.json");
    serde_json::from_str(&std::fs::read_to_string(path).unwrap()).unwrap()
}

#[test]
fn models_embeddings_match_reference_vectors() {
    let m = minilm();
    assert_eq!(m.id().dim, 384);
    let r = reference();
    let texts: Vec<&str> = r.items.iter().map(|i| i.text.as_str()).collect();
    // One batch (padding in play) and one text at a time must both match the reference.
    let batch = m.embed(&CTX, &texts).unwrap();
    for (item, v) in r.items.iter().zip(&batch) {
        let one = &m.embed(&CTX, &[item.text.as_str()]).unwrap()[0];
        for got in [v, one] {
            assert_eq!(got.len(), 384);
            let norm: f32 = got.iter().map(|x| x * x).sum::<f32>().sqrt();
            assert!((norm - 1.0).abs() < 1e-4, "not unit length: {norm}");
            let c = cosine(got, &item.vector);
            assert!(c > 1.0 - 1e-3, "{:?}: cosine to reference {c}", item.text);
            let max_diff = got
                .iter()
                .zip(&item.vector)
                .map(|(a, b)| (a - b).abs())
                .fold(0f32, f32::max);
            assert!(max_diff < 1e-3, "{:?}: max abs diff {max_diff}", item.text);
        }
    }
    let counts = m.token_counts(&texts).unwrap();
    assert_eq!(counts, r.items.iter().map(|i| i.tokens).collect::<Vec<_>>());
    // The published first values of sentence-transformers' example.
    let v = &batch[0];
    for (got, want) in v.iter().zip([0.067657f32, 0.063496, 0.048713, 0.079305, 0.037448]) {
        assert!((got - want).abs() < 1e-4, "{got} vs {want}");
    }
}

#[test]
fn models_embeddings_are_semantic_and_batch_independent() {
    let m = minilm();
    let v = m
        .embed(&CTX, &["eating food", "eating bread", "the stock market fell sharply"])
        .unwrap();
    let close = cosine(&v[0], &v[1]);
    let far = cosine(&v[0], &v[2]);
    assert!(
        close > 0.6 && far < 0.2 && close > far + 0.4,
        "close {close}, far {far}"
    );
    // More texts than one batch, mixed lengths: same as one by one, order kept.
    let texts: Vec<String> = (0..70)
        .map(|i| format!("sentence number {i} {}", "word ".repeat(i % 13)))
        .collect();
    let refs: Vec<&str> = texts.iter().map(String::as_str).collect();
    let all = m.embed(&CTX, &refs).unwrap();
    assert_eq!(all.len(), 70);
    for i in [0, 31, 32, 69] {
        let one = &m.embed(&CTX, &[refs[i]]).unwrap()[0];
        assert!(cosine(one, &all[i]) > 0.9999, "text {i}");
    }
    assert!(m.embed(&CTX, &[]).unwrap().is_empty());
}

#[test]
fn models_long_input_is_truncated_not_rejected() {
    let m = minilm();
    let long = "memory ".repeat(2000);
    let v = m.embed(&CTX, &[long.as_str()]).unwrap();
    assert_eq!(v[0].len(), 384);
    assert_eq!(m.token_counts(&[long.as_str()]).unwrap()[0], 256);
}

#[test]
fn models_missing_model_names_the_fix_command() {
    let dir = tempfile::tempdir().unwrap();
    let err = MiniLm::load(dir.path(), 32, Arc::new(Usage::default()))
        .err()
        .expect("must fail");
    assert!(matches!(err, ModelError::MissingModel { .. }));
    let msg = err.to_string();
    assert!(
        msg.contains("scripts/fetch-model.sh") && msg.contains(&dir.path().display().to_string()),
        "{msg}"
    );
    assert!(msg.contains("model.safetensors"), "{msg}");
}

#[test]
fn models_load_builtin_from_config_and_count_usage() {
    let toml_text = format!(
        "[embedder]\npath = {:?}\n[judge.thresholds]\nabout = 0.5\n",
        model_dir().display().to_string()
    );
    let cfg: ModelsConfig = toml::from_str(&toml_text).unwrap();
    let models = Models::load(&cfg, std::path::Path::new("/nonexistent")).unwrap();
    assert_eq!(models.embedder.id().dim, 384);
    models.embedder.embed(&CallCtx::new("alpha"), &["one", "two"]).unwrap();
    models
        .judge
        .relation(&CallCtx::new("beta"), "a cat sat", "a dog ran")
        .unwrap();
    let s = models.stats();
    assert_eq!(s["memories"]["alpha"]["embed_calls"], 1);
    assert!(s["memories"]["alpha"]["embed_tokens"].as_u64().unwrap() >= 6);
    assert_eq!(s["memories"]["beta"]["judge_calls"], 1);
    assert!(s["total"]["embed_calls"].as_u64().unwrap() >= 2);
    assert_eq!(s["embedder"]["dim"], 384);
    // Unknown keys are rejected; the defaults parse.
    assert!(toml::from_str::<ModelsConfig>("[embedder]\nbogus = 1\n").is_err());
    let d: ModelsConfig = toml::from_str("").unwrap();
    assert_eq!(d.embedder.batch_size, 32);
}

#[test]
fn models_judge_topic_change_is_a_boundary() {
    let j = judge();
    let units = [
        "I'm planning a trip to Japan next spring.",
        "Which cities should I visit in Japan? I was thinking Tokyo and Kyoto.",
        "Kyoto has beautiful temples; Tokyo is great for food and shopping.",
        "How many days should I spend in Kyoto during the trip?",
        "My sourdough bread didn't rise at all this morning.",
        "Maybe the yeast starter was too cold; try proofing the dough somewhere warm.",
        "How long should I let the dough proof before baking the bread?",
    ];
    let s = j.boundaries(&CTX, &units).unwrap();
    assert_eq!(s.len(), units.len());
    let best_first = (1..units.len())
        .max_by(|&a, &b| s[a].first.total_cmp(&s[b].first))
        .unwrap();
    let best_last = (0..units.len() - 1)
        .max_by(|&a, &b| s[a].last.total_cmp(&s[b].last))
        .unwrap();
    assert_eq!(best_first, 4, "{s:?}");
    assert_eq!(best_last, 3, "{s:?}");
    assert!(j.boundaries(&CTX, &[]).unwrap().is_empty());
}

#[test]
fn models_judge_fact_about_its_episode_scores_higher() {
    let j = judge();
    let episode = [
        "Caroline: I went to an LGBTQ support group yesterday and it was so powerful.",
        "Melanie: That's wonderful! What was it like?",
        "Caroline: People shared their transgender stories; I felt accepted and inspired.",
    ];
    let other = [
        "Melanie: We took the kids camping at the lake last weekend.",
        "Caroline: Sounds fun! Did you roast marshmallows by the campfire?",
    ];
    let fact = "Caroline attended an LGBTQ support group and felt inspired.";
    let (yes_score, yes) = j.about(&CTX, fact, &episode).unwrap();
    let (no_score, no) = j.about(&CTX, fact, &other).unwrap();
    assert!(yes_score > no_score + 0.2, "{yes_score} vs {no_score}");
    assert!(yes && !no, "{yes_score} {yes} / {no_score} {no}");
    assert!((0.0..=1.0).contains(&yes_score) && (0.0..=1.0).contains(&no_score));
    assert_eq!(j.about(&CTX, fact, &[]).unwrap(), (0.0, false));
}

#[test]
fn models_judge_walk_levels_order_by_relevance() {
    let j = judge();
    let dialogue = "user: I loved Melanie's painting of the sunset over the lake. When did she paint it?\nassistant: Let me check what I remember about her art.";
    let facts = [
        "Melanie painted a sunset over the lake last month.",
        "Melanie enjoys painting and pottery.",
        "The quarterly tax filing deadline is in April.",
    ];
    let l = j.walk_levels(&CTX, dialogue, &facts).unwrap();
    let raw = j.walk_scores(&CTX, dialogue, &facts).unwrap();
    assert_eq!(l.len(), 3);
    assert!(l[0] >= WalkLevel::Keep, "{l:?} {raw:?}");
    assert_eq!(l[2], WalkLevel::Unrelated, "{l:?} {raw:?}");
    assert!(raw[0] > raw[1] && raw[1] > raw[2] + 0.3, "{raw:?}");
    assert!(j.walk_levels(&CTX, dialogue, &[]).unwrap().is_empty());
}

#[test]
fn models_judge_distill_keeps_what_mattered() {
    let j = judge();
    let facts = [
        "Melanie's daughter plays the violin in the school orchestra.",
        "Caroline adopted a grey cat named Oscar.",
    ];
    let conversation = "user: Is Melanie's daughter still playing violin in the school orchestra?\nassistant: Yes, she still plays violin there and just had a solo.";
    assert_eq!(j.distill(&CTX, &facts, conversation).unwrap(), vec![0]);
    // A fact the conversation already states word for word is not kept.
    let said = "user: Caroline adopted a grey cat named Oscar.\nassistant: How lovely!";
    assert!(!j.distill(&CTX, &facts[1..], said).unwrap().contains(&0));
    // Among the many lines a tool output brings (only the lines sharing a fact's words are
    // compared with it): said again nearly word for word, not kept; asked about, kept. (120
    // lines of 7 words: the judge reads 120-word chunks, so the exchange is a chunk.)
    let mut noise = String::new();
    for i in 0..120 {
        noise.push_str(&format!("tool: {i} GET /health 200 in {}ms\n", i % 17));
    }
    let said = format!("{noise}user: Did Caroline get a pet?\nassistant: Caroline adopted a gray cat named Oscar.\n");
    assert!(!j.distill(&CTX, &facts, &said).unwrap().contains(&1));
    assert_eq!(
        j.distill(&CTX, &facts, &format!("{noise}{conversation}")).unwrap(),
        vec![0]
    );
}

#[test]
fn models_judge_relation_restates_vs_contradicts() {
    let j = judge();
    let r = |a: &str, b: &str| j.relation(&CTX, a, b).unwrap();
    assert_eq!(
        r("Melanie has two children.", "melanie has two children"),
        Relation::Restates
    );
    assert_eq!(r("Melanie has 2 kids", "Melanie has two kids"), Relation::Restates);
    assert_eq!(
        r("Caroline lives in Boston.", "Caroline lives in Boston now."),
        Relation::Restates
    );
    assert_eq!(
        r("Melanie has three children.", "Melanie has two children."),
        Relation::Contradicts
    );
    assert_eq!(
        r("Caroline does not like hiking.", "Caroline likes hiking."),
        Relation::Contradicts
    );
    assert_eq!(
        r("John ran 5 miles on Monday.", "John ran 10 miles on Monday."),
        Relation::Contradicts
    );
    // Weak evidence is never a contradiction.
    assert_eq!(
        r("Caroline likes hiking.", "Melanie bought a new car."),
        Relation::Unrelated
    );
    assert_eq!(
        r(
            "Caroline is not a fan of jazz.",
            "Caroline went to the museum on 3 May."
        ),
        Relation::Unrelated
    );
    assert_eq!(
        r("Melanie paints landscapes.", "Melanie took a pottery class."),
        Relation::Unrelated
    );
}
