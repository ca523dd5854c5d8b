//! The knowledge graph, with the built-in models: entity resolution (aliases the note names,
//! distinct people and ids kept apart), restatements merged, contradictions retired, traces
//! append-only throughout, and re-embedding after a change of embedding model.

mod util;

use std::sync::Arc;
use std::time::{Duration, Instant};

use recalld::engine::records::VectorRecord;
use recalld::engine::{Engine, EngineConfig};
use recalld::lanes::Lanes;
use recalld::models::{Models, ModelsConfig};
use recalld::store::{Store, StoreOptions, Table};
use recalld_protocol::ops::ReportArgs;
use serde_json::{json, Value};

struct Setup {
    engine: Arc<Engine>,
    store: Arc<Store>,
    lanes: Option<Lanes>,
    _dir: tempfile::TempDir,
}

fn setup() -> Setup {
    let dir = tempfile::tempdir().unwrap();
    let store = Arc::new(Store::open(dir.path(), &StoreOptions::default()).unwrap());
    let cfg: ModelsConfig = toml::from_str(&format!("[embedder]\npath = {:?}\n", util::model_dir())).unwrap();
    let models = Models::load(&cfg, dir.path()).unwrap();
    let engine = Arc::new(Engine::new(store.clone(), Some(models), EngineConfig::default()));
    let lanes = Lanes::start(engine.clone(), 1, 0);
    Setup {
        engine,
        store,
        lanes: Some(lanes),
        _dir: dir,
    }
}

impl Drop for Setup {
    fn drop(&mut self) {
        if let Some(l) = self.lanes.take() {
            l.stop();
        }
    }
}

fn fact(note: &str, subject: &str, object: &str) -> Value {
    json!({"note": note, "subject": subject, "object": object, "milestone": false})
}

/// The model's reply: a sentence and a note call with `facts`; then the lane drains.
fn note(s: &Setup, memory: &str, facts: Vec<Value>, now: f64) {
    let call = json!({"id": format!("call-{now}"), "type": "function",
        "function": {"name": "note", "arguments": json!({"notes": facts}).to_string()}});
    let reply = json!({"id": "r", "object": "chat.completion", "model": "gpt-4o", "choices": [{"index": 0,
        "finish_reason": "tool_calls", "message": {"role": "assistant", "content": format!("Noted at {now}."), "tool_calls": [call]}}]});
    s.engine
        .report(ReportArgs {
            memory: memory.into(),
            response: reply,
            now: Some(now),
        })
        .unwrap();
    drain(&s.engine);
}

fn drain(engine: &Engine) {
    let deadline = Instant::now() + Duration::from_secs(120);
    while engine.pending_jobs().unwrap().1 > 0 {
        assert!(Instant::now() < deadline, "the lane did not drain");
        std::thread::sleep(Duration::from_millis(10));
    }
}

fn facts(export: &Value) -> Vec<Value> {
    export["facts"].as_array().unwrap().clone()
}

fn entity_of(export: &Value, fact: usize, side: &str) -> u64 {
    export["facts"][fact][format!("{side}_entity")]
        .as_u64()
        .unwrap_or_else(|| panic!("fact {fact} has no {side} entity: {}", export["facts"][fact]))
}

#[test]
fn entities_resolve_aliases_the_note_names_and_keep_distinct_ones_apart() {
    let s = setup();
    note(
        &s,
        "g",
        vec![
            fact("Pricing page copy v3 awaits legal review.", "pricing page copy v3", "legal review"),
            fact("Dana Smith owns the checkout migration.", "Dana Smith", "checkout migration"),
            fact("Ticket 1234 tracks the tax table bug.", "ticket 1234", "tax table bug"),
        ],
        1000.0,
    );
    note(
        &s,
        "g",
        vec![
            json!({"note": "The new copy launches on 2026-03-14.", "subject": "the new copy",
                "subject_aliases": ["pricing page copy v3"], "object": "launch date", "milestone": false}),
            fact("Dana Lee reviews the checkout migration.", "Dana Lee", "The checkout migration"),
            fact("Ticket 1235 tracks the refund rounding bug.", "ticket 1235", "refund rounding bug"),
            fact("Legal review takes two working days.", "Legal Review", "two working days"),
        ],
        2000.0,
    );
    let export = s.engine.export("g").unwrap();
    // The note said "the new copy" is pricing page copy v3: one node, both names kept.
    assert_eq!(entity_of(&export, 3, "subject"), entity_of(&export, 0, "subject"));
    let copy = &export["entities"][entity_of(&export, 0, "subject") as usize];
    assert_eq!(copy["name"], "pricing page copy v3");
    assert!(copy["aliases"].as_array().unwrap().contains(&json!("the new copy")), "{copy}");
    // Same entity under another case or article: one node.
    assert_eq!(entity_of(&export, 4, "object"), entity_of(&export, 1, "object"));
    assert_eq!(entity_of(&export, 6, "subject"), entity_of(&export, 0, "object"));
    // Two people with the same first name, two tickets an id apart: distinct.
    assert_ne!(entity_of(&export, 4, "subject"), entity_of(&export, 1, "subject"));
    assert_ne!(entity_of(&export, 5, "subject"), entity_of(&export, 2, "subject"));
    // Every placed fact is an edge, exported.
    assert_eq!(export["edges"].as_array().unwrap().len(), 7);
    // The facts block would show resolved names: the alias fact reads under the canonical one.
    assert_eq!(facts(&export).len(), 7);
}

#[test]
fn a_fact_that_names_no_object_is_about_its_subject_and_no_nameless_entity_is_made() {
    let s = setup();
    note(
        &s,
        "g",
        vec![
            fact("Caroline joined a mentorship program.", "Caroline", ""),
            fact("Melanie signed up for a pottery class.", "Melanie", "  "),
        ],
        1000.0,
    );
    let export = s.engine.export("g").unwrap();
    for i in 0..2 {
        assert_eq!(entity_of(&export, i, "object"), entity_of(&export, i, "subject"));
    }
    // Without the rule, both facts met at one entity named "": a hub joining unrelated facts
    // (and the recall block named a group "About :").
    let names: Vec<&str> = export["entities"].as_array().unwrap().iter().map(|e| e["name"].as_str().unwrap()).collect();
    assert_eq!(names, ["Caroline", "Melanie"]);
}

#[test]
fn a_restatement_merges_and_a_contradiction_retires_keeping_both() {
    let s = setup();
    let traces_at = |s: &Setup| s.engine.export("r").unwrap()["traces"].as_array().unwrap().clone();
    note(
        &s,
        "r",
        vec![
            fact("Dana owns the checkout migration.", "Dana", "checkout migration"),
            fact("The pricing page launches on 2026-03-14.", "pricing page", "launch date"),
        ],
        1000.0,
    );
    let before = traces_at(&s);
    note(
        &s,
        "r",
        vec![
            fact("Dana owns the checkout migration.", "Dana", "the checkout migration"),
            fact("The pricing page launches on 2026-03-21.", "Pricing Page", "launch date"),
        ],
        2000.0,
    );
    let export = s.engine.export("r").unwrap();
    let f = facts(&export);
    assert_eq!(f.len(), 4, "nothing is deleted");
    // Restatement: the new fact merged into the held one, which keeps both sources.
    assert_eq!(f[2]["status"], json!({"state": "merged", "into": 0, "at": 2000.0}));
    assert_eq!(f[0]["status"]["state"], "active");
    assert_eq!(f[0]["restated_by"][0]["fact"], 2);
    assert_eq!(f[0]["restated_by"][0]["note_seq"], f[2]["note_seq"]);
    // Contradiction: the older launch date is retired by the newer one, and stays.
    assert_eq!(f[1]["status"], json!({"state": "retired", "by": 3, "at": 2000.0}));
    assert_eq!(f[3]["status"]["state"], "active");
    assert_eq!(f[1]["valid_from"], 1000.0, "valid from when it was stated");
    assert_eq!(f[3]["at"], 2000.0, "recorded when it was stated");
    // Traces are append-only through merges and retirements.
    let after = traces_at(&s);
    for t in &before {
        assert!(after.contains(t), "trace {t} was rewritten or lost");
    }
}

#[test]
fn a_change_of_embedding_model_embeds_stored_vectors_again() {
    let s = setup();
    note(
        &s,
        "e",
        vec![fact("Priya books the flight to Seattle.", "Priya", "flight to Seattle")],
        1000.0,
    );
    let prefix = recalld::store::keys::memory_prefix("e");
    let read = |s: &Setup| -> Vec<(Vec<u8>, VectorRecord)> {
        s.store
            .read(|r| {
                let mut out = Vec::new();
                r.visit(Table::Vectors, &prefix, &prefix, |k, v: VectorRecord| {
                    out.push((k.to_vec(), v));
                    Ok(true)
                })?;
                Ok(out)
            })
            .unwrap()
    };
    let vectors = read(&s);
    assert_eq!(vectors.len(), 3, "one fact and two entities embedded");
    let current = vectors[0].1.model.clone();
    // As if an older model had made them.
    s.store
        .write(|w| {
            for (k, v) in &vectors {
                w.put(Table::Vectors, k, &VectorRecord { model: "old-model".into(), v: vec![0.0; v.v.len()] })?;
            }
            Ok(())
        })
        .unwrap();
    assert_eq!(s.engine.queue_reembed().unwrap(), 1);
    drain(&s.engine);
    let again = read(&s);
    assert_eq!(again.len(), 3);
    for ((_, old), (_, new)) in vectors.iter().zip(&again) {
        assert_eq!(new.model, current);
        assert_eq!(new.v, old.v, "the same model gives the same vector");
    }
}
