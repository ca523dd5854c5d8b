//! The knowledge graph, with the built-in models: entity resolution (aliases the note names,
//! distinct people and ids kept apart), restatements merged, contradictions retired, traces
//! append-only throughout, and re-embedding after a change of embedding model.

use crate::util;

use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use recalld::engine::records::VectorRecord;
use recalld::engine::{Engine, EngineConfig};
use recalld::lanes::Lanes;
use recalld::models::{BoundaryScore, CallCtx, Judge, ModelError, Models, ModelsConfig, NamePair, Relation, WalkLevel};
use recalld::store::{Store, StoreOptions, Table};
use recalld_protocol::ops::{DecorateArgs, HistoryMode, ReportArgs};
use serde_json::{json, Value};

struct Setup {
    engine: Arc<Engine>,
    store: Arc<Store>,
    lanes: Option<Lanes>,
    dir: Option<tempfile::TempDir>,
}

fn setup() -> Setup {
    open(tempfile::tempdir().unwrap())
}

/// An engine with the built-in models and one lane worker over the store in `dir`, its
/// indexes brought up to the store as the daemon does at start.
fn open(dir: tempfile::TempDir) -> Setup {
    open_with(dir, |m| m)
}

/// [`open`], with the built-in models changed by `models` (another judge).
fn open_with(dir: tempfile::TempDir, models: impl FnOnce(Models) -> Models) -> Setup {
    let store = Arc::new(Store::open(dir.path(), &StoreOptions::default()).unwrap());
    let cfg: ModelsConfig = toml::from_str(&format!("[embedder]\npath = {:?}\n", util::model_dir())).unwrap();
    let models = models(Models::load(&cfg, dir.path()).unwrap());
    let engine = Arc::new(Engine::new(store.clone(), Some(models), EngineConfig::default()));
    engine.check_indexes().unwrap();
    let lanes = Lanes::start(engine.clone(), 1, 0);
    Setup {
        engine,
        store,
        lanes: Some(lanes),
        dir: Some(dir),
    }
}

impl Setup {
    /// Stops the engine and opens the same data again, as a restart does.
    fn restart(mut self) -> Setup {
        if let Some(l) = self.lanes.take() {
            l.stop();
        }
        // As a daemon stops: what the indexes hold only in RAM is saved.
        self.engine.flush_indexes();
        let dir = self.dir.take().unwrap();
        let store = Arc::downgrade(&self.store);
        drop(self);
        assert!(
            store.upgrade().is_none(),
            "the store is closed before it is opened again"
        );
        open(dir)
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
            fact(
                "Pricing page copy v3 awaits legal review.",
                "pricing page copy v3",
                "legal review",
            ),
            fact(
                "Dana Smith owns the checkout migration.",
                "Dana Smith",
                "checkout migration",
            ),
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
            fact(
                "Dana Lee reviews the checkout migration.",
                "Dana Lee",
                "The checkout migration",
            ),
            fact(
                "Ticket 1235 tracks the refund rounding bug.",
                "ticket 1235",
                "refund rounding bug",
            ),
            fact(
                "Legal review takes two working days.",
                "Legal Review",
                "two working days",
            ),
        ],
        2000.0,
    );
    let export = s.engine.export("g").unwrap();
    // The note said "the new copy" is pricing page copy v3: one node, both names kept.
    assert_eq!(entity_of(&export, 3, "subject"), entity_of(&export, 0, "subject"));
    let copy = &export["entities"][entity_of(&export, 0, "subject") as usize];
    assert_eq!(copy["name"], "pricing page copy v3");
    assert!(
        copy["aliases"].as_array().unwrap().contains(&json!("the new copy")),
        "{copy}"
    );
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
    let names: Vec<&str> = export["entities"]
        .as_array()
        .unwrap()
        .iter()
        .map(|e| e["name"].as_str().unwrap())
        .collect();
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
            fact(
                "The pricing page launches on 2026-03-14.",
                "pricing page",
                "launch date",
            ),
        ],
        1000.0,
    );
    let before = traces_at(&s);
    note(
        &s,
        "r",
        vec![
            fact("Dana owns the checkout migration.", "Dana", "the checkout migration"),
            fact(
                "The pricing page launches on 2026-03-21.",
                "Pricing Page",
                "launch date",
            ),
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
                w.put(
                    Table::Vectors,
                    k,
                    &VectorRecord {
                        model: "old-model".into(),
                        v: vec![0.0; v.v.len()],
                    },
                )?;
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

#[test]
fn names_are_resolved_through_the_entity_index_which_is_rebuilt_from_the_store() {
    let s = setup();
    // A graph of some size first: forty people and places, each in a fact of its own.
    let people = [
        "Amara", "Bruno", "Chiara", "Dmitri", "Elif", "Farid", "Greta", "Hiroshi", "Ines", "Jonas", "Kofi", "Lena",
        "Mateo", "Nadia", "Oskar", "Priya", "Quentin", "Rosa", "Sven", "Tamsin",
    ];
    let places = [
        "Lisbon",
        "Oslo",
        "Nairobi",
        "Kyoto",
        "Quito",
        "Tbilisi",
        "Perth",
        "Reykjavik",
        "Hanoi",
        "Accra",
        "Bergen",
        "Cusco",
        "Dakar",
        "Fes",
        "Galway",
        "Hobart",
        "Izmir",
        "Jaipur",
        "Kaunas",
        "Lyon",
    ];
    let first: Vec<Value> = people
        .iter()
        .zip(&places)
        .map(|(p, c)| fact(&format!("{p} moved to {c}."), p, c))
        .chain([fact(
            "Joanna's character is a detective.",
            "Joanna's character",
            "detective",
        )])
        .collect();
    note(&s, "x", first, 1000.0);
    let export = s.engine.export("x").unwrap();
    let entities = export["entities"].as_array().unwrap().len() as u64;
    assert_eq!(entities, 42, "{}", export["entities"]);
    let every: Vec<u64> = (0..entities).collect();
    assert_eq!(
        s.engine.entity_index("x").unwrap(),
        Some((every.clone(), entities)),
        "each job's entities are indexed after it"
    );
    // A name the note did not alias, close in meaning and not kept apart by the guard, is found
    // among the nearest in the index.
    note(
        &s,
        "x",
        vec![fact(
            "Joanna's characters all live in Boston.",
            "Joanna's characters",
            "Boston",
        )],
        2000.0,
    );
    let export = s.engine.export("x").unwrap();
    assert_eq!(entity_of(&export, 21, "subject"), entity_of(&export, 20, "subject"));

    // The entity index deleted while stopped is rebuilt from the store at start (saved first,
    // as a stop saves it: a small index waits for more changes before its save).
    s.engine.flush_indexes();
    let dir = recalld::index::memory_dir(&s.dir.as_ref().unwrap().path().join("index"), "x");
    for f in ["entities.usearch", "entities.keys"] {
        std::fs::remove_file(dir.join(f)).unwrap();
    }
    let s = s.restart();
    let entities = s.engine.export("x").unwrap()["entities"].as_array().unwrap().len() as u64;
    assert_eq!(entities, 43, "Boston is the only new entity");
    assert_eq!(
        s.engine.entity_index("x").unwrap(),
        Some(((0..entities).collect(), entities)),
        "rebuilt at start"
    );
    note(
        &s,
        "x",
        vec![fact("New York City hosts the book fair.", "New York City", "book fair")],
        3000.0,
    );
    note(&s, "x", vec![fact("NYC is where Priya works.", "NYC", "Priya")], 4000.0);
    let export = s.engine.export("x").unwrap();
    assert_eq!(
        entity_of(&export, 23, "subject"),
        entity_of(&export, 22, "subject"),
        "NYC is New York City"
    );
    assert_eq!(
        entity_of(&export, 23, "object"),
        entity_of(&export, 15, "subject"),
        "Priya by her name"
    );
}

/// A dry-run decorate of one new user message; its `info.recall`.
fn recall_info(engine: &Engine, memory: &str, text: &str, now: f64) -> Value {
    let out = engine
        .decorate(DecorateArgs {
            now: Some(now),
            dry_run: true,
            history: HistoryMode::Delta,
            ..DecorateArgs::new(
                memory,
                json!({"model": "gpt-4o", "messages": [{"role": "user", "content": text}]}),
            )
        })
        .unwrap();
    out.info["recall"].clone()
}

#[test]
fn indexes_found_behind_at_start_are_caught_up_after_it_and_not_searched_while_rebuilt() {
    let mut s = setup();
    note(
        &s,
        "x",
        vec![
            fact("Amara moved to Lisbon in May.", "Amara", "Lisbon"),
            fact("Bruno keeps bees on his roof.", "Bruno", "bees"),
        ],
        1000.0,
    );
    // Fact 0, Amara's move, among the block's items.
    let found = |info: &Value| {
        info["items"]
            .as_array()
            .is_some_and(|items| items.iter().any(|i| i["kind"] == "fact" && i["n"] == 0))
    };
    assert!(found(&recall_info(&s.engine, "x", "Where did Amara move?", 2000.0)));
    let tmp = s.dir.take().unwrap();
    let dir = tmp.path().to_owned();
    drop(s);

    // Deleted while stopped: the start finds them and only marks them (the socket would open
    // now); recall searches nothing until they are rebuilt, and says so; quiet counts them.
    std::fs::remove_dir_all(dir.join("index")).unwrap();
    let store = Arc::new(Store::open(&dir, &StoreOptions::default()).unwrap());
    let cfg: ModelsConfig = toml::from_str(&format!("[embedder]\npath = {:?}\n", util::model_dir())).unwrap();
    let engine = Engine::new(store, Some(Models::load(&cfg, &dir).unwrap()), EngineConfig::default());
    assert_eq!(engine.find_indexes_behind().unwrap(), 1);
    assert_eq!(engine.quiet("x", 0).unwrap()["jobs"], 1, "quiet waits for the catch-up");
    let before = recall_info(&engine, "x", "Where did Amara move?", 2000.0);
    assert!(!found(&before), "{before:#}");
    assert!(
        before["skipped"].to_string().contains("indexes"),
        "says why nothing was searched: {before:#}"
    );

    // The catch-up (a thread after the socket opens) rebuilds them: recall finds it again.
    assert_eq!(engine.catch_up_indexes(), 1);
    assert_eq!(engine.quiet("x", 0).unwrap()["jobs"], 0);
    let after = recall_info(&engine, "x", "Where did Amara move?", 2000.0);
    assert!(found(&after), "{after:#}");
}

/// The built-in judge, except that it says yes to every pair of close names and records the
/// names it was asked about, one list per call (as a model judge would be asked).
struct NamesJudge {
    inner: Arc<dyn Judge>,
    asked: Asked,
}

/// Each call's pairs: the new name and the held entity's names.
type Asked = Arc<Mutex<Vec<Vec<(String, Vec<String>)>>>>;

impl Judge for NamesJudge {
    fn name(&self) -> String {
        "names-judge".into()
    }
    fn boundaries(&self, ctx: &CallCtx, units: &[&str]) -> Result<Vec<BoundaryScore>, ModelError> {
        self.inner.boundaries(ctx, units)
    }
    fn about(&self, ctx: &CallCtx, fact: &str, passages: &[&str]) -> Result<(f32, bool), ModelError> {
        self.inner.about(ctx, fact, passages)
    }
    fn walk_levels(&self, ctx: &CallCtx, dialogue: &str, facts: &[&str]) -> Result<Vec<WalkLevel>, ModelError> {
        self.inner.walk_levels(ctx, dialogue, facts)
    }
    fn distill(&self, ctx: &CallCtx, facts: &[&str], conversation: &str) -> Result<Vec<usize>, ModelError> {
        self.inner.distill(ctx, facts, conversation)
    }
    fn relation(&self, ctx: &CallCtx, new: &str, held: &str) -> Result<Relation, ModelError> {
        self.inner.relation(ctx, new, held)
    }
    fn same_entity_each(&self, _: &CallCtx, pairs: &[NamePair<'_>]) -> Result<Vec<bool>, ModelError> {
        let call = pairs.iter().map(|p| (p.name.to_string(), p.held.to_vec())).collect();
        self.asked.lock().unwrap().push(call);
        Ok(vec![true; pairs.len()])
    }
}

#[test]
fn close_names_are_settled_by_a_model_judge_in_one_call_and_kept_apart_by_the_built_in_one() {
    // MiniLM puts "marathon race" at 0.89 of "the marathon" and "charity run" at 0.83 of
    // "charity race": close, below the cosine that decides alone, and nothing for the guard.
    let first = || {
        vec![
            fact("The marathon starts at 8 am.", "the marathon", "8 am"),
            fact("Priya trains for the charity race.", "Priya", "charity race"),
        ]
    };
    let second = || {
        vec![
            fact(
                "Marathon race numbers are handed out on Friday.",
                "marathon race",
                "Friday",
            ),
            fact("Priya's sister joins the charity run.", "Priya's sister", "charity run"),
        ]
    };
    let built_in = setup();
    note(&built_in, "m", first(), 1000.0);
    note(&built_in, "m", second(), 2000.0);
    let export = built_in.engine.export("m").unwrap();
    assert_ne!(
        entity_of(&export, 2, "subject"),
        entity_of(&export, 0, "subject"),
        "the built-in judge keeps them apart"
    );
    assert_ne!(entity_of(&export, 3, "object"), entity_of(&export, 1, "object"));

    let asked = Arc::new(Mutex::new(Vec::new()));
    let judged = open_with(tempfile::tempdir().unwrap(), |m| {
        let judge = NamesJudge {
            inner: m.judge.clone(),
            asked: asked.clone(),
        };
        Models::with(m.embedder.clone(), Arc::new(judge))
    });
    note(&judged, "m", first(), 1000.0);
    assert!(asked.lock().unwrap().is_empty(), "nothing close was held yet: no call");
    note(&judged, "m", second(), 2000.0);
    let export = judged.engine.export("m").unwrap();
    let marathon = entity_of(&export, 0, "subject");
    assert_eq!(
        entity_of(&export, 2, "subject"),
        marathon,
        "the judge said they are one"
    );
    assert_eq!(entity_of(&export, 3, "object"), entity_of(&export, 1, "object"));
    let aliases = &export["entities"][marathon as usize]["aliases"];
    assert!(
        aliases.as_array().unwrap().contains(&json!("marathon race")),
        "{aliases}"
    );
    let calls = asked.lock().unwrap().clone();
    assert_eq!(calls.len(), 1, "one call for the job's close names: {calls:?}");
    let mut pairs = calls[0].clone();
    pairs.sort();
    assert_eq!(
        pairs,
        vec![
            ("charity run".to_string(), vec!["charity race".to_string()]),
            ("marathon race".to_string(), vec!["the marathon".to_string()]),
        ],
        "only the close names, with the held entity's names (Priya's sister is no one held)"
    );
}
