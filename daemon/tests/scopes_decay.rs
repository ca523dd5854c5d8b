//! Forgetting by unimportance across sessions (seed 003), with injected time across months:
//! each domain's decay schedule, fading out, promotion into a durable fact, "as of" answers
//! with the older belief, and weights each user's own signals teach.

use std::sync::Arc;

use recalld::engine::scopes::ops::{AgentChanges, Correction, ListFilter};
use recalld::engine::{Engine, EngineConfig};
use recalld::models::{BoundaryScore, CallCtx, Embedder, Judge, ModelError, ModelId, Models, Relation, WalkLevel};
use recalld::store::{Store, StoreOptions};
use recalld_protocol::ops::{DecorateArgs, ReportArgs};
use serde_json::{json, Value};

use crate::util::LetterEmbedder;

const T0: f64 = 1_767_225_600.0; // 2026-01-01
const DAY: f64 = 86_400.0;

/// A judge that relates facts by a rule (`relation`) and finds nothing else.
struct RuleJudge<F>(F);

impl<F: Fn(&CallCtx, &str, &str) -> Relation + Send + Sync> Judge for RuleJudge<F> {
    fn name(&self) -> String {
        "test-rule".into()
    }
    fn boundaries(&self, _: &CallCtx, units: &[&str]) -> Result<Vec<BoundaryScore>, ModelError> {
        Ok(units.iter().map(|_| BoundaryScore { first: 0.5, last: 0.5 }).collect())
    }
    fn about(&self, _: &CallCtx, _: &str, _: &[&str]) -> Result<(f32, bool), ModelError> {
        Ok((0.5, false))
    }
    fn walk_levels(&self, _: &CallCtx, _: &str, facts: &[&str]) -> Result<Vec<WalkLevel>, ModelError> {
        Ok(vec![WalkLevel::Unrelated; facts.len()])
    }
    fn distill(&self, _: &CallCtx, _: &[&str], _: &str) -> Result<Vec<usize>, ModelError> {
        Ok(Vec::new())
    }
    fn relation(&self, ctx: &CallCtx, new: &str, held: &str) -> Result<Relation, ModelError> {
        Ok((self.0)(ctx, new, held))
    }
}

/// Same words restate; "X lives in A" against "X lives in B" contradicts; nothing else relates.
fn city_judge() -> Arc<dyn Judge> {
    Arc::new(RuleJudge(|_: &CallCtx, new: &str, held: &str| {
        let norm = |s: &str| s.trim_end_matches('.').to_lowercase();
        if norm(new) == norm(held) {
            Relation::Restates
        } else if new.contains(" lives in ") && held.contains(" lives in ") {
            Relation::Contradicts
        } else {
            Relation::Unrelated
        }
    }))
}

struct Setup {
    engine: Engine,
    _dir: tempfile::TempDir,
}

fn setup() -> Setup {
    setup_with(EngineConfig {
        recall: false,
        ..EngineConfig::default()
    })
}

fn setup_with(config: EngineConfig) -> Setup {
    let dir = tempfile::tempdir().unwrap();
    let store = Arc::new(Store::open(dir.path(), &StoreOptions::default()).unwrap());
    let embedder: Arc<dyn Embedder> = Arc::new(LetterEmbedder);
    let models = Models::with(embedder, city_judge());
    Setup {
        engine: Engine::new(store, Some(models), config),
        _dir: dir,
    }
}

fn decorate(e: &Engine, memory: &str, user: &str, text: &str, now: f64) -> Value {
    e.decorate(DecorateArgs {
        now: Some(now),
        agent: Some("coach".into()),
        user: Some(user.into()),
        ..DecorateArgs::new(
            memory,
            json!({"model": "gpt-4o", "messages": [{"role": "user", "content": text}]}),
        )
    })
    .unwrap()
    .info
}

/// A conversation: the user says `said`, the model notes `facts`, the conversation ends.
fn conversation(e: &Engine, memory: &str, user: &str, said: &str, facts: &[&str], now: f64) -> Value {
    let info = decorate(e, memory, user, said, now);
    let notes: Vec<Value> = facts
        .iter()
        .map(|f| json!({"note": f, "subject": user, "object": "x", "milestone": false}))
        .collect();
    let call = json!({"id": format!("n-{memory}"), "type": "function", "function": {"name": "note", "arguments": json!({"notes": notes}).to_string()}});
    let reply = json!({"id": "r", "object": "chat.completion", "model": "gpt-4o", "choices": [{"index": 0,
        "finish_reason": "stop", "message": {"role": "assistant", "content": "Noted.", "tool_calls": [call]}}]});
    e.report(ReportArgs {
        memory: memory.into(),
        response: reply,
        now: Some(now + 1.0),
    })
    .unwrap();
    e.end(memory, Some(now + 2.0)).unwrap();
    while e.run_next_job(memory).unwrap() {}
    info
}

fn listed(e: &Engine, user: &str, filter: ListFilter, now: f64) -> Vec<Value> {
    e.list_scope("coach", Some(user), filter, Some(now)).unwrap()["memories"]
        .as_array()
        .unwrap()
        .clone()
}

fn find<'a>(facts: &'a [Value], text: &str) -> &'a Value {
    facts
        .iter()
        .find(|f| f["text"] == text)
        .unwrap_or_else(|| panic!("no {text:?} in {facts:#?}"))
}

fn live(e: &Engine) {
    e.agent_settings(
        "coach",
        AgentChanges {
            sweep_live: Some(true),
            ..Default::default()
        },
        Some(T0),
    )
    .unwrap();
}

const GENERAL: &str = "Alex plays chess on Sundays.";
const EMOTIONAL: &str = "Alex is anxious about public speaking.";
const EDUCATIONAL: &str = "Alex is studying for the chess exam.";

#[test]
fn each_domain_fades_on_its_own_schedule() {
    let s = setup();
    let e = &s.engine;
    live(e);
    conversation(e, "c1", "alex", "hi", &[GENERAL, EMOTIONAL, EDUCATIONAL], T0);
    let freshness = |id: u64, at: f64| {
        e.observe_scope("coach", Some("alex"), id, Some(at)).unwrap()["decay"]["freshness"]
            .as_f64()
            .unwrap()
    };
    let all = listed(e, "alex", ListFilter::default(), T0);
    let (g, m, d) = (
        find(&all, GENERAL)["id"].as_u64().unwrap(),
        find(&all, EMOTIONAL)["id"].as_u64().unwrap(),
        find(&all, EDUCATIONAL)["id"].as_u64().unwrap(),
    );
    assert_eq!(find(&all, EMOTIONAL)["domain"], "emotional");
    assert_eq!(find(&all, EDUCATIONAL)["domain"], "educational");
    // Half fresh after one schedule: a month, three months, six months.
    for (id, days) in [(g, 30.0), (m, 90.0), (d, 180.0)] {
        assert!((freshness(id, T0 + 1.0 + days * DAY) - 0.5).abs() < 1e-3);
    }
    // Month by month the general fact falls behind; it fades out at the policy's 90-day
    // retention (the plainest kind of fact), the emotional and educational ones stay.
    let importance = |at: f64, text: &str| {
        find(&listed(e, "alex", ListFilter::default(), at), text)["importance_now"]
            .as_f64()
            .unwrap()
    };
    for month in [1.0, 2.0] {
        let at = T0 + month * 30.0 * DAY;
        assert!(importance(at, GENERAL) < importance(at, EDUCATIONAL), "month {month}");
        assert!(importance(at, GENERAL) < importance(at, EMOTIONAL), "month {month}");
    }
    let swept = e.sweep("coach", T0 + 89.0 * DAY).unwrap();
    assert!(
        !swept["plan"]
            .as_array()
            .unwrap()
            .iter()
            .any(|p| p["action"] == "archive"),
        "{swept:#?}"
    );
    let swept = e.sweep("coach", T0 + 91.0 * DAY).unwrap();
    let faded: Vec<u64> = swept["plan"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|p| p["action"] == "archive")
        .map(|p| p["id"].as_u64().unwrap())
        .collect();
    assert_eq!(faded, [g], "{swept:#?}");
    let left = listed(e, "alex", ListFilter::default(), T0 + 91.0 * DAY);
    assert_eq!(left.len(), 2);
    // A year on, the emotional and educational facts are still kept.
    e.sweep("coach", T0 + 365.0 * DAY).unwrap();
    assert_eq!(listed(e, "alex", ListFilter::default(), T0 + 365.0 * DAY).len(), 2);
}

#[test]
fn a_policys_schedule_applies_to_its_agents_unless_an_agent_sets_its_own() {
    let scopes: recalld::engine::scopes::ScopesConfig =
        toml::from_str("[decay_days.knowledge_worker]\ngeneral = 10.0\n").unwrap();
    let s = setup_with(EngineConfig {
        recall: false,
        scopes,
        ..EngineConfig::default()
    });
    let e = &s.engine;
    conversation(e, "c1", "alex", "hi", &[GENERAL, EMOTIONAL], T0);
    let all = listed(e, "alex", ListFilter::default(), T0);
    let observe = |text: &str, days: f64| {
        e.observe_scope(
            "coach",
            Some("alex"),
            find(&all, text)["id"].as_u64().unwrap(),
            Some(T0 + 1.0 + days * DAY),
        )
        .unwrap()["decay"]
            .clone()
    };
    // The knowledge worker policy's general facts halve in 10 days here; emotional ones keep
    // the seed's 90 (a domain the setting does not name).
    assert!((observe(GENERAL, 10.0)["freshness"].as_f64().unwrap() - 0.5).abs() < 1e-3);
    assert_eq!(observe(EMOTIONAL, 0.0)["schedule_days"], 90.0);
    let agent = e.agent_settings("coach", AgentChanges::default(), Some(T0)).unwrap();
    assert_eq!(agent["decay_days"]["general"], 10.0, "{agent:#}");
    // An agent's own schedule wins over its policy's.
    let own = recalld::engine::scopes::decay::Schedule {
        general: 40.0,
        emotional: 90.0,
        educational: 180.0,
    };
    e.agent_settings(
        "coach",
        AgentChanges {
            schedule: Some(own),
            ..Default::default()
        },
        Some(T0),
    )
    .unwrap();
    assert!((observe(GENERAL, 40.0)["freshness"].as_f64().unwrap() - 0.5).abs() < 1e-3);
}

#[test]
fn a_users_restores_and_deletes_teach_the_sweep_when_to_archive_their_facts() {
    let s = setup();
    let e = &s.engine;
    live(e);
    let archived = |swept: &Value| -> Vec<u64> {
        swept["plan"]
            .as_array()
            .unwrap()
            .iter()
            .filter(|p| p["action"] == "archive")
            .map(|p| p["id"].as_u64().unwrap())
            .collect()
    };
    let id = |user: &str, text: &str, at: f64| {
        find(
            &listed(
                e,
                user,
                ListFilter {
                    status: Some("all".into()),
                    ..Default::default()
                },
                at,
            ),
            text,
        )["id"]
            .as_u64()
            .unwrap()
    };
    conversation(e, "a1", "alex", "hi", &["Alex plays chess on Sundays."], T0);
    conversation(e, "b1", "bea", "hi", &["Bea plays chess on Sundays."], T0);
    // Past the retention both plain facts faded alike; Alex wants his back.
    let day91 = T0 + 91.0 * DAY;
    assert_eq!(archived(&e.sweep("coach", day91).unwrap()).len(), 2);
    e.restore_scope_fact(
        "coach",
        Some("alex"),
        id("alex", "Alex plays chess on Sundays.", day91),
        Some(day91),
    )
    .unwrap();
    let scale = |at: f64, text: &str| {
        e.observe_scope("coach", Some("alex"), id("alex", text, at), Some(at))
            .unwrap()["decay"]["archive_scale"]
            .as_f64()
            .unwrap()
    };
    assert_eq!(scale(day91, "Alex plays chess on Sundays."), 0.75);
    // The same kind of fact, said by both later, now fades later for Alex than for Bea.
    let later = T0 + 100.0 * DAY;
    conversation(e, "a2", "alex", "hi", &["Alex walks the dog at seven."], later);
    conversation(e, "b2", "bea", "hi", &["Bea walks the dog at seven."], later);
    let past = later + 92.0 * DAY;
    let gone = archived(&e.sweep("coach", past).unwrap());
    assert!(
        gone.contains(&id("bea", "Bea walks the dog at seven.", past)),
        "{gone:?}"
    );
    assert!(
        !gone.contains(&id("alex", "Alex walks the dog at seven.", past)),
        "{gone:?}"
    );
    // Deleting by hand what the sweep kept past the retention teaches the other way.
    e.delete_scope_fact(
        "coach",
        Some("alex"),
        id("alex", "Alex walks the dog at seven.", past),
        Some(past),
    )
    .unwrap();
    assert_eq!(scale(past, "Alex plays chess on Sundays."), 0.75 * 1.25);
}

#[test]
fn a_fact_used_often_and_confirmed_is_promoted_and_stops_fading() {
    let s = setup();
    let e = &s.engine;
    live(e);
    conversation(e, "c1", "alex", "hi", &[GENERAL], T0);
    let id = listed(e, "alex", ListFilter::default(), T0)[0]["id"].as_u64().unwrap();
    // A person confirms it; it is looked up four times.
    e.update_scope_fact("coach", Some("alex"), id, Correction::default(), Some(T0 + DAY))
        .unwrap();
    for i in 0..4 {
        e.search_scope(
            "coach",
            Some("alex"),
            "chess on Sundays",
            5,
            None,
            Some(T0 + DAY + i as f64),
        )
        .unwrap();
    }
    // Too young at five days; promoted after a week.
    let swept = e.sweep("coach", T0 + 5.0 * DAY).unwrap();
    assert!(swept["promoted"].as_array().unwrap().is_empty());
    let swept = e.sweep("coach", T0 + 8.0 * DAY).unwrap();
    let promoted = swept["promoted"][0]["to"]
        .as_u64()
        .unwrap_or_else(|| panic!("{swept:#?}"));
    let seen = e
        .observe_scope("coach", Some("alex"), promoted, Some(T0 + 8.0 * DAY))
        .unwrap();
    assert_eq!(seen["tier"], "semantic");
    assert_eq!(seen["sources"], json!([id]));
    let log = e.audit_log("coach", None, None, None).unwrap();
    assert!(log["entries"]
        .as_array()
        .unwrap()
        .iter()
        .any(|a| a["action"] == "sweep" && a["detail"]["promoted"][0]["to"] == promoted));
    // A year on, the promoted fact is still there; the log it came from is its source.
    e.sweep("coach", T0 + 365.0 * DAY).unwrap();
    let left = listed(e, "alex", ListFilter::default(), T0 + 365.0 * DAY);
    assert_eq!(left.len(), 1);
    assert_eq!(left[0]["id"], promoted);
}

#[test]
fn as_of_answers_what_was_believed_then() {
    let s = setup();
    let e = &s.engine;
    conversation(e, "jan", "alex", "hi", &["Alex lives in Berlin."], T0);
    // In March the conversation is shown the old fact and states a new one that contradicts it.
    let info = conversation(
        e,
        "mar",
        "alex",
        "Alex lives in Lisbon now.",
        &["Alex lives in Lisbon."],
        T0 + 60.0 * DAY,
    );
    assert_eq!(
        info["recall"]["across"]["items"][0]["id"], 0,
        "the old fact was shown: {info:#?}"
    );
    let as_of = |t: f64| -> Vec<String> {
        listed(
            e,
            "alex",
            ListFilter {
                as_of: Some(t),
                ..Default::default()
            },
            t,
        )
        .iter()
        .map(|f| f["text"].as_str().unwrap().to_owned())
        .collect()
    };
    assert_eq!(as_of(T0 + 30.0 * DAY), ["Alex lives in Berlin."]);
    assert_eq!(as_of(T0 + 90.0 * DAY), ["Alex lives in Lisbon."]);
    // The old belief is kept, its validity closed when the new one began.
    let old = e
        .observe_scope("coach", Some("alex"), 0, Some(T0 + 90.0 * DAY))
        .unwrap();
    assert_eq!(old["status"]["state"], "replaced");
    assert!(old["valid_to"].as_f64().unwrap() > T0 + 59.0 * DAY);
    let searched = e
        .search_scope(
            "coach",
            Some("alex"),
            "Where does Alex live?",
            5,
            Some(T0 + 30.0 * DAY),
            Some(T0 + 90.0 * DAY),
        )
        .unwrap();
    assert_eq!(searched["memories"][0]["text"], "Alex lives in Berlin.");
}

#[test]
fn two_users_signals_keep_the_same_kind_of_fact_differently() {
    let s = setup();
    let e = &s.engine;
    live(e);
    let likes = ["prefers tea", "prefers jazz", "prefers trains", "prefers mornings"];
    for user in ["ana", "ben"] {
        let facts: Vec<String> = likes.iter().map(|l| format!("{user} {l}.")).collect();
        let refs: Vec<&str> = facts.iter().map(String::as_str).collect();
        conversation(e, &format!("{user}-1"), user, "hi", &refs, T0);
    }
    // Ana confirms her preferences by hand; Ben deletes his.
    for l in likes {
        let id = find(&listed(e, "ana", ListFilter::default(), T0), &format!("ana {l}."))["id"]
            .as_u64()
            .unwrap();
        e.update_scope_fact("coach", Some("ana"), id, Correction::default(), Some(T0 + DAY))
            .unwrap();
        let id = find(&listed(e, "ben", ListFilter::default(), T0), &format!("ben {l}."))["id"]
            .as_u64()
            .unwrap();
        e.delete_scope_fact("coach", Some("ben"), id, Some(T0 + DAY)).unwrap();
    }
    // Each then states one new preference, never used.
    conversation(e, "ana-2", "ana", "hi", &["ana prefers window seats."], T0 + 2.0 * DAY);
    conversation(e, "ben-2", "ben", "hi", &["ben prefers window seats."], T0 + 2.0 * DAY);
    let weight = |user: &str| {
        let f = find(
            &listed(e, user, ListFilter::default(), T0 + 2.0 * DAY),
            &format!("{user} prefers window seats."),
        )
        .clone();
        e.observe_scope("coach", Some(user), f["id"].as_u64().unwrap(), Some(T0 + 2.0 * DAY))
            .unwrap()["decay"]["learned_weights"]["preference"]
            .as_f64()
            .unwrap()
    };
    assert!(
        weight("ana") > 1.0 && weight("ben") < 1.0,
        "ana {} ben {}",
        weight("ana"),
        weight("ben")
    );
    // A month on, Ben's faded out and Ana's is kept.
    e.sweep("coach", T0 + 32.0 * DAY).unwrap();
    let kept = |user: &str| {
        listed(e, user, ListFilter::default(), T0 + 32.0 * DAY)
            .iter()
            .any(|f| f["text"] == format!("{user} prefers window seats."))
    };
    assert!(kept("ana"));
    assert!(!kept("ben"));
}

/// An engine with no models: scope facts are found by their words alone.
fn setup_plain() -> Setup {
    let dir = tempfile::tempdir().unwrap();
    let store = Arc::new(Store::open(dir.path(), &StoreOptions::default()).unwrap());
    Setup {
        engine: Engine::new(store, None, EngineConfig::default()),
        _dir: dir,
    }
}

fn across_text(info: &Value, e: &Engine, memory: &str) -> String {
    // The block as stored with the message (what the request shows during its turn).
    let export = e.export(memory).unwrap();
    let _ = info;
    export["recalls"]
        .as_array()
        .unwrap()
        .last()
        .and_then(|b| b["across"]["text"].as_str())
        .unwrap_or("")
        .to_owned()
}

#[test]
fn the_hot_tier_core_blocks_and_the_graph_tier_reach_a_new_conversation() {
    let s = setup_plain();
    let e = &s.engine;
    e.set_core_block(
        "coach",
        Some("alex"),
        "persona",
        "Alex is a nurse who works night shifts.",
        Some(T0),
    )
    .unwrap();
    // A first conversation: a turn worth remembering for a while, and a fact about Maria.
    decorate(e, "c1", "alex", "I booked the Lisbon flight for May 3.", T0);
    let call = json!({"id": "n1", "type": "function", "function": {"name": "note", "arguments": json!({"notes": [
        {"note": "She is allergic to peanuts.", "subject": "Maria", "object": "peanuts", "milestone": false}]}).to_string()}});
    let reply = json!({"id": "r", "object": "chat.completion", "model": "gpt-4o", "choices": [{"index": 0,
        "finish_reason": "stop", "message": {"role": "assistant", "content": "Great, enjoy Lisbon.", "tool_calls": [call]}}]});
    e.report(ReportArgs {
        memory: "c1".into(),
        response: reply,
        now: Some(T0 + 1.0),
    })
    .unwrap();
    e.end("c1", Some(T0 + 2.0)).unwrap();
    while e.run_next_job("c1").unwrap() {}

    // The next day, a new conversation: the core block, the recent turns of the other
    // conversation, and (by the entity the message names, though no word of the fact is in
    // it) the fact about Maria.
    let info = decorate(e, "c2", "alex", "Plan a dinner menu for Maria.", T0 + DAY);
    let across = &info["recall"]["across"];
    let text = across_text(&info, e, "c2");
    assert!(text.contains("[persona] Alex is a nurse"), "{text}");
    assert!(text.contains("user: I booked the Lisbon flight for May 3."), "{text}");
    assert!(text.contains("assistant: Great, enjoy Lisbon."), "{text}");
    assert!(text.contains("She is allergic to peanuts."), "{text}");
    assert_eq!(across["items"][0]["found_by"], "graph", "{across:#?}");
    for tier in ["hot", "vector", "graph", "total"] {
        assert!(across["ms"][tier].as_f64().is_some(), "{across:#?}");
    }
    // Another user of the agent gets none of it.
    let info = decorate(e, "b1", "bea", "Plan a dinner menu for Maria.", T0 + DAY);
    assert!(across_text(&info, e, "b1").is_empty());
    // Forgetting the first conversation takes its turns out of the hot tier, and its fact out
    // of the next block (the block's decoded facts are cached by the scope's version).
    e.forget("c1").unwrap();
    let hot = e.hot_state("coach", Some("alex")).unwrap();
    assert!(
        hot["turns"].as_array().unwrap().iter().all(|t| t["memory"] != "c1"),
        "{hot:#?}"
    );
    let info = decorate(e, "c3", "alex", "Plan a dinner menu for Maria.", T0 + 2.0 * DAY);
    assert!(!across_text(&info, e, "c3").contains("peanuts"), "{info:#?}");
}

/// Vectors from hashed words: texts that share no word are orthogonal.
struct WordEmbedder;

impl Embedder for WordEmbedder {
    fn id(&self) -> ModelId {
        ModelId {
            name: "test-words".into(),
            dim: 64,
        }
    }
    fn embed(&self, _: &CallCtx, texts: &[&str]) -> Result<Vec<Vec<f32>>, ModelError> {
        Ok(texts
            .iter()
            .map(|t| {
                let mut v = vec![0f32; 64];
                for w in t
                    .to_lowercase()
                    .split(|c: char| !c.is_alphanumeric())
                    .filter(|w| w.len() > 3)
                {
                    let h = w.bytes().fold(7u64, |h, b| h.wrapping_mul(31).wrapping_add(b as u64));
                    v[(h % 64) as usize] += 1.0;
                }
                v
            })
            .collect())
    }
}

fn word_models() -> Models {
    let embedder: Arc<dyn Embedder> = Arc::new(WordEmbedder);
    Models::with(embedder, city_judge())
}

/// The knowledge base with real indexes (tantivy, usearch) under the store.
fn setup_indexed() -> Setup {
    let dir = tempfile::tempdir().unwrap();
    let store = Arc::new(Store::open(dir.path(), &StoreOptions::default()).unwrap());
    Setup {
        engine: Engine::new(store, Some(word_models()), EngineConfig::default()),
        _dir: dir,
    }
}

const HANDBOOK: &str = "# Returns\n\nUnworn shoes may be returned within 30 days of delivery for a full refund.\n\n\
# Warranty\n\nThe hiking boots carry a two-year warranty against sole separation and broken eyelets.\n\n\
# Shipping\n\nStandard shipping takes four business days; express ships overnight.";

#[test]
fn a_knowledge_base_answers_as_reference_and_its_indexes_come_back() {
    let s = setup_indexed();
    let e = &s.engine;
    let added = e.add_document("coach", "handbook", HANDBOOK, Some(T0)).unwrap();
    assert_eq!(added["chunks"], 3, "{added}");
    assert_eq!(added["by_meaning"], true);
    // (Each asks as another user: a user's own earlier turns would show in their block.)
    let block = |memory: &str, user: &str, text: &str| {
        let info = decorate(e, memory, user, text, T0 + DAY);
        (
            across_text(&info, e, memory),
            info["recall"]["across"]["documents"].clone(),
        )
    };
    let (text, docs) = block(
        "k1",
        "alex",
        "Does the warranty on my hiking boots cover sole separation?",
    );
    assert!(text.contains("reference documents"), "{text}");
    assert!(
        text.contains("[handbook] Warranty: The hiking boots carry a two-year warranty"),
        "{text}"
    );
    assert!(
        !text.contains("Standard shipping"),
        "only what the message is about: {text}"
    );
    assert_eq!(docs[0]["name"], "handbook", "{docs:#?}");
    // Small talk finds nothing.
    assert!(block("k2", "bea", "Thanks, bye!").0.is_empty());

    // Its indexes are caches: deleted, they are rebuilt from the store at start.
    drop(s.engine);
    std::fs::remove_dir_all(s._dir.path().join("index")).unwrap();
    let store = Arc::new(Store::open(s._dir.path(), &StoreOptions::default()).unwrap());
    let e = Engine::new(store, Some(word_models()), EngineConfig::default());
    assert!(e.check_indexes().unwrap() >= 1);
    let info = decorate(&e, "k3", "cy", "How long is the warranty on the boots?", T0 + DAY);
    assert!(across_text(&info, &e, "k3").contains("two-year warranty"), "{info:#?}");

    // The same name replaces it; removing it takes it out of the next block; both audited.
    let again = e
        .add_document("coach", "handbook", "# Warranty\n\nBoots: five years.", Some(T0 + DAY))
        .unwrap();
    assert_eq!(again["replaced"], 0);
    assert_eq!(
        e.list_documents("coach").unwrap()["documents"]
            .as_array()
            .unwrap()
            .len(),
        1
    );
    e.remove_document("coach", 1, Some(T0 + DAY)).unwrap();
    let info = decorate(&e, "k4", "dee", "How long is the warranty on the boots?", T0 + DAY);
    assert!(
        !across_text(&info, &e, "k4").contains("reference documents"),
        "{info:#?}"
    );
    let audit = e.audit_log("coach", None, None, None).unwrap().to_string();
    assert!(
        audit.contains("add_document") && audit.contains("remove_document"),
        "{audit}"
    );
    assert!(
        audit.contains(r#""documents":[[0,1]]"#),
        "the warranty chunk's inject is audited: {audit}"
    );
    assert!(e.add_document("coach", "", "x", None).is_err());
    assert!(e.remove_document("coach", 7, None).is_err());
}

/// In consolidation (asked for the agent), says "restates" of two facts about bullet points and
/// counts the calls; at a handoff (asked for a conversation) relates nothing.
fn bullet_judge(calls: Arc<std::sync::atomic::AtomicUsize>) -> Arc<dyn Judge> {
    Arc::new(RuleJudge(move |ctx: &CallCtx, new: &str, held: &str| {
        if ctx.memory != "coach" {
            return Relation::Unrelated;
        }
        calls.fetch_add(1, std::sync::atomic::Ordering::SeqCst);
        if new.contains("bullet") && held.contains("bullet") {
            Relation::Restates
        } else {
            Relation::Unrelated
        }
    }))
}

#[test]
fn consolidation_asks_each_pair_once_and_waits_for_the_next_day_when_its_budget_is_spent() {
    let dir = tempfile::tempdir().unwrap();
    let store = Arc::new(Store::open(dir.path(), &StoreOptions::default()).unwrap());
    let calls = Arc::new(std::sync::atomic::AtomicUsize::new(0));
    let embedder: Arc<dyn Embedder> = Arc::new(LetterEmbedder);
    let models = Models::with(embedder, bullet_judge(calls.clone()));
    let mut config = EngineConfig {
        recall: false,
        ..EngineConfig::default()
    };
    config.scopes.judge_calls_per_day = 1;
    let e = Engine::new(store, Some(models), config);
    let asked = || calls.load(std::sync::atomic::Ordering::SeqCst);
    let semantic = |now: f64| {
        listed(
            &e,
            "alex",
            ListFilter {
                tier: Some("semantic".into()),
                ..Default::default()
            },
            now,
        )
    };

    conversation(
        &e,
        "b1",
        "alex",
        "Bullets please.",
        &["Alex prefers answers in bullet points."],
        T0,
    );
    conversation(
        &e,
        "b2",
        "alex",
        "Bullets again.",
        &["Alex likes bullet points in answers."],
        T0 + 60.0,
    );
    assert_eq!(asked(), 1, "the one pair, within the day's budget of one");
    conversation(
        &e,
        "b3",
        "alex",
        "And bullets.",
        &["Alex wants bullet points for answers."],
        T0 + 120.0,
    );
    assert_eq!(asked(), 1, "the budget is spent: the new pairs wait");
    assert!(
        semantic(T0 + 200.0).is_empty(),
        "three agree, but only two are known to"
    );
    let today = e.consolidate("coach", Some("alex"), Some(T0 + 300.0)).unwrap();
    assert_eq!(today["owners"]["alex"]["pairs"]["pairs_deferred"], 2, "{today:#}");
    assert_eq!(asked(), 1);

    // The next day: the pair judged yesterday is remembered, not asked again; one new call
    // joins the third fact, and the three are distilled into one semantic fact.
    let tomorrow = e.consolidate("coach", Some("alex"), Some(T0 + DAY + 300.0)).unwrap();
    assert_eq!(asked(), 2, "{tomorrow:#}");
    assert_eq!(
        tomorrow["owners"]["alex"]["pairs"]["pairs_remembered"], 1,
        "{tomorrow:#}"
    );
    let s = semantic(T0 + DAY + 400.0);
    assert_eq!(s.len(), 1, "{s:#?}");
    assert_eq!(s[0]["sources"].as_array().unwrap().len(), 3, "{s:#?}");
}

fn reply_remembering(note: &str) -> Value {
    let call = json!({"id": "rem-1", "type": "function", "function": {"name": "remember", "arguments": json!({"note": note}).to_string()}});
    json!({"id": "r", "object": "chat.completion", "model": "gpt-4o", "choices": [{"index": 0,
        "finish_reason": "tool_calls", "message": {"role": "assistant", "content": "I'll check on that next time.", "tool_calls": [call]}}]})
}

fn tool_names(request: &Value) -> Vec<String> {
    request["tools"]
        .as_array()
        .into_iter()
        .flatten()
        .filter_map(|t| t["function"]["name"].as_str().map(str::to_owned))
        .collect()
}

#[test]
fn a_working_note_saved_with_remember_reaches_the_users_next_conversations_for_a_day() {
    let s = setup_plain();
    let e = &s.engine;
    const NOTE: &str = "Alex's visa application waits on the bank statement; ask whether it arrived.";
    let request = |memory: &str, agent: Option<&str>, user: &str, now: f64| {
        e.decorate(DecorateArgs {
            now: Some(now),
            agent: agent.map(str::to_owned),
            user: Some(user.into()),
            ..DecorateArgs::new(memory, json!({"model": "gpt-4o", "messages": [{"role": "user", "content": "Where does my visa application stand?"}]}))
        })
        .unwrap()
    };
    // Offered to a memory that names an agent; the call is taken out of the reply.
    let out = request("w1", Some("coach"), "alex", T0);
    assert!(
        tool_names(&out.request).contains(&"remember".to_string()),
        "{:#}",
        out.request
    );
    let reply = e
        .report(ReportArgs {
            memory: "w1".into(),
            response: reply_remembering(NOTE),
            now: Some(T0 + 1.0),
        })
        .unwrap();
    assert!(
        reply.response["choices"][0]["message"].get("tool_calls").is_none(),
        "{:#}",
        reply.response
    );
    assert!(!reply.again, "the reply had an answer besides the note");
    assert_eq!(e.hot_state("coach", Some("alex")).unwrap()["notes"][0]["text"], NOTE);
    // Explicitly remembered: the note's class of facts weighs more for this user.
    let agent = e.agent_settings("coach", Default::default(), Some(T0 + 1.0)).unwrap();
    let learned = agent["learned_weights"]["alex"]
        .as_object()
        .expect("alex learned something")
        .clone();
    assert_eq!(learned.len(), 1, "{agent:#}");
    let (class, w) = learned.iter().next().unwrap();
    let prior = recalld::engine::scopes::decay::prior(class);
    assert!(
        (w.as_f64().unwrap() as f32 - prior * 1.25).abs() < 1e-4,
        "{class}: {w} against prior {prior}"
    );
    // A client that kept the model's raw reply sends the call back: it is not history.
    let raw = reply_remembering(NOTE)["choices"][0]["message"].clone();
    let next = e
        .decorate(DecorateArgs {
            now: Some(T0 + 2.0),
            dry_run: true,
            agent: Some("coach".into()),
            user: Some("alex".into()),
            ..DecorateArgs::new(
                "w1",
                json!({"model": "gpt-4o", "messages": [
                {"role": "user", "content": "Where does my visa application stand?"}, raw,
                {"role": "user", "content": "Thanks."}]}),
            )
        })
        .unwrap();
    let sent = next.request["messages"].to_string();
    assert!(
        !sent.contains("rem-1") && sent.contains("I'll check on that next time."),
        "{sent}"
    );

    // The user's next conversation, an hour later, is shown it; another user's is not.
    request("w2", Some("coach"), "alex", T0 + 3_600.0);
    let text = across_text(&Value::Null, e, "w2");
    assert!(text.contains("Working notes") && text.contains(NOTE), "{text}");
    request("o1", Some("coach"), "bea", T0 + 3_600.0);
    assert!(!across_text(&Value::Null, e, "o1").contains(NOTE));

    // With `block`, the model replaces a core block instead: always shown, never expiring.
    let call = json!({"id": "rem-2", "type": "function", "function": {"name": "remember",
        "arguments": json!({"note": "Alex is a nurse on night shifts.", "block": "user"}).to_string()}});
    let reply = json!({"id": "r2", "object": "chat.completion", "model": "gpt-4o", "choices": [{"index": 0,
        "finish_reason": "tool_calls", "message": {"role": "assistant", "content": null, "tool_calls": [call]}}]});
    let answered = e
        .report(ReportArgs {
            memory: "w2".into(),
            response: reply,
            now: Some(T0 + 3_601.0),
        })
        .unwrap();
    assert!(answered.again, "only our call: the model is asked again");
    assert_eq!(
        e.hot_state("coach", Some("alex")).unwrap()["core"]["user"],
        "Alex is a nurse on night shifts."
    );

    // A day later it is gone from the block; the sweep reports it, and deletes it when live.
    request("w3", Some("coach"), "alex", T0 + 25.0 * 3_600.0);
    let text = across_text(&Value::Null, e, "w3");
    assert!(!text.contains(NOTE), "{text}");
    assert!(text.contains("[user] Alex is a nurse on night shifts."), "{text}");
    assert_eq!(
        e.sweep("coach", T0 + 25.0 * 3_600.0).unwrap()["expired_working_notes"],
        1
    );
    assert_eq!(
        e.hot_state("coach", Some("alex")).unwrap()["notes"]
            .as_array()
            .unwrap()
            .len(),
        1,
        "report mode changes nothing"
    );
    live(e);
    assert_eq!(
        e.sweep("coach", T0 + 26.0 * 3_600.0).unwrap()["expired_working_notes"],
        1
    );
    assert!(e.hot_state("coach", Some("alex")).unwrap()["notes"]
        .as_array()
        .unwrap()
        .is_empty());

    // Without an agent the tool is not offered, and a tool of the agent's own by that name is
    // left alone.
    let out = request("plain", None, "alex", T0);
    assert!(!tool_names(&out.request).contains(&"remember".to_string()));
    let reply = e
        .report(ReportArgs {
            memory: "plain".into(),
            response: reply_remembering(NOTE),
            now: Some(T0 + 1.0),
        })
        .unwrap();
    assert_eq!(
        reply.response["choices"][0]["message"]["tool_calls"][0]["function"]["name"],
        "remember"
    );
}

#[test]
fn the_recall_tool_searches_the_agents_memory_and_the_next_request_of_the_turn_shows_it() {
    let s = setup_plain();
    let e = &s.engine;
    const FACT: &str = "Alex's staging database is hosted in Sydney.";
    conversation(e, "r1", "alex", "Where is staging?", &[FACT], T0);
    let ask = json!({"model": "gpt-4o", "messages": [{"role": "user", "content": "Let's plan the migration."}]});
    let decorate = |now: f64| {
        e.decorate(DecorateArgs {
            now: Some(now),
            agent: Some("coach".into()),
            user: Some("alex".into()),
            ..DecorateArgs::new("r2", ask.clone())
        })
        .unwrap()
    };
    let first = decorate(T0 + DAY);
    assert!(tool_names(&first.request).contains(&"recall".to_string()));
    let system = |out: &recalld_protocol::ops::DecorateReply| out.request["messages"].to_string();
    assert!(
        !system(&first).contains("Sydney"),
        "not shown unasked: {}",
        system(&first)
    );
    // The model asks; report takes the call out and says to call again.
    let call = json!({"id": "rc", "type": "function", "function": {"name": "recall", "arguments": "{\"query\": \"staging database\"}"}});
    let reply = json!({"id": "r", "object": "chat.completion", "model": "gpt-4o", "choices": [{"index": 0,
        "finish_reason": "tool_calls", "message": {"role": "assistant", "content": null, "tool_calls": [call]}}]});
    let answered = e
        .report(ReportArgs {
            memory: "r2".into(),
            response: reply,
            now: Some(T0 + DAY + 1.0),
        })
        .unwrap();
    assert!(answered.again);
    assert!(
        answered.response["choices"][0]["message"].get("tool_calls").is_none(),
        "{:#}",
        answered.response
    );
    // The same request again: the turn's block now holds what was found, counted as used.
    let second = decorate(T0 + DAY + 2.0);
    assert!(
        system(&second).contains("on the assistant's request") && system(&second).contains(FACT),
        "{}",
        system(&second)
    );
    let facts = listed(e, "alex", ListFilter::default(), T0 + DAY + 3.0);
    assert_eq!(find(&facts, FACT)["uses"], 1, "{facts:#?}");
    let used = e.memories_used("r2").unwrap();
    assert_eq!(used["used"].as_array().unwrap().len(), 1, "{used:#}");
}
