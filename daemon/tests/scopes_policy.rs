//! Every policy's numbers, enforced with injected time (seed 002): retention, caps, the
//! archive window, unused facts kept under compliance, the token budget of the cross-memory
//! block, an agent's shorter retention, the organisation's retention on top, and Off.
//! No models: facts are handed over without vectors and found by their words.

use std::sync::Arc;

use recalld::engine::scopes::ops::{AgentChanges, ListFilter};
use recalld::engine::scopes::policy::PolicyName;
use recalld::engine::{Engine, EngineConfig};
use recalld::store::{Store, StoreOptions};
use recalld_protocol::ops::{DecorateArgs, ReportArgs};
use serde_json::{json, Value};

const T0: f64 = 1_767_225_600.0;
const DAY: f64 = 86_400.0;

struct Setup {
    engine: Engine,
    _dir: tempfile::TempDir,
}

fn setup(config: EngineConfig) -> Setup {
    let dir = tempfile::tempdir().unwrap();
    let store = Arc::new(Store::open(dir.path(), &StoreOptions::default()).unwrap());
    Setup {
        engine: Engine::new(store, None, config),
        _dir: dir,
    }
}

fn decorate(e: &Engine, memory: &str, agent: &str, text: &str, now: f64) -> Value {
    let r = e
        .decorate(DecorateArgs {
            now: Some(now),
            ceiling: Some(100_000),
            agent: Some(agent.into()),
            user: Some("alex".into()),
            ..DecorateArgs::new(
                memory,
                json!({"model": "gpt-4o", "messages": [{"role": "user", "content": text}]}),
            )
        })
        .unwrap();
    r.info
}

/// One conversation that notes `facts` and ends at `now`; its lane drained.
fn conversation(e: &Engine, memory: &str, agent: &str, facts: &[String], now: f64) {
    decorate(e, memory, agent, "hello", now);
    let notes: Vec<Value> = facts
        .iter()
        .map(|f| json!({"note": f, "subject": "Alex", "object": "project", "milestone": false}))
        .collect();
    let call = json!({"id": "n1", "type": "function", "function": {"name": "note", "arguments": json!({"notes": notes}).to_string()}});
    let reply = json!({"id": "r", "object": "chat.completion", "model": "gpt-4o", "choices": [{"index": 0,
        "finish_reason": "stop", "message": {"role": "assistant", "content": "Noted.", "tool_calls": [call]}}]});
    e.report(ReportArgs {
        memory: memory.into(),
        response: reply,
        now: Some(now),
    })
    .unwrap();
    e.end(memory, Some(now)).unwrap();
    while e.run_next_job(memory).unwrap() {}
}

/// `n` distinct facts of about 40 tokens each, all sharing the words of [`QUESTION`].
fn facts(n: usize) -> Vec<String> {
    (0..n)
        .map(|i| format!("Alex keeps the billing ledger number {i} reconciled every week, with the invoices, credit notes and refunds of customer account {i} checked against the bank statement."))
        .collect()
}

const QUESTION: &str = "Is the billing ledger reconciled with the invoices, credit notes, refunds and the bank statement for every customer account?";

fn set(e: &Engine, agent: &str, changes: AgentChanges) {
    e.agent_settings(agent, changes, Some(T0)).unwrap();
}

fn policy(p: PolicyName) -> AgentChanges {
    AgentChanges {
        policy: Some(p),
        sweep_live: Some(true),
        ..Default::default()
    }
}

fn count(e: &Engine, agent: &str, status: &str) -> usize {
    e.list_scope(
        agent,
        Some("alex"),
        ListFilter {
            status: Some(status.into()),
            ..Default::default()
        },
        Some(T0),
    )
    .unwrap()["memories"]
        .as_array()
        .unwrap()
        .len()
}

fn plan(swept: &Value, action: &str) -> usize {
    swept["plan"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|p| p["action"] == action)
        .count()
}

#[test]
fn conversational_caps_retention_and_archive_window() {
    let s = setup(EngineConfig::default());
    let e = &s.engine;
    set(e, "a", policy(PolicyName::Conversational));
    conversation(e, "c1", "a", &facts(101), T0);
    assert_eq!(count(e, "a", "active"), 101);

    // 101 episodic facts, cap 100: the lowest-ranked one is archived.
    let swept = e.sweep("a", T0 + DAY).unwrap();
    assert_eq!(plan(&swept, "archive"), 1, "{swept:#?}");
    assert_eq!(count(e, "a", "active"), 100);
    assert_eq!(count(e, "a", "archived"), 1);

    // Kept 14 days: at 13 nothing is archived for age, at 15 every unused fact is.
    let swept = e.sweep("a", T0 + 13.0 * DAY).unwrap();
    assert_eq!(plan(&swept, "archive"), 0, "{swept:#?}");
    // A fact used once survives its retention.
    e.search_scope(
        "a",
        Some("alex"),
        "billing ledger number 7 reconciled",
        1,
        None,
        Some(T0 + 14.0 * DAY),
    )
    .unwrap();
    let swept = e.sweep("a", T0 + 15.0 * DAY).unwrap();
    assert_eq!(plan(&swept, "archive"), 99, "{swept:#?}");
    assert_eq!(count(e, "a", "active"), 1);

    // Archived facts are purged after the archive window (90 days), not before.
    let swept = e.sweep("a", T0 + 15.0 * DAY + 89.0 * DAY).unwrap();
    assert_eq!(plan(&swept, "purge"), 1, "only the one archived on day 1: {swept:#?}");
    let swept = e.sweep("a", T0 + 15.0 * DAY + 91.0 * DAY).unwrap();
    assert_eq!(plan(&swept, "purge"), 99);
    assert_eq!(count(e, "a", "all"), 1);
}

#[test]
fn knowledge_worker_and_compliance_retention() {
    let s = setup(EngineConfig::default());
    let e = &s.engine;
    set(e, "kw", policy(PolicyName::KnowledgeWorker));
    set(e, "cx", policy(PolicyName::Compliance));
    conversation(e, "k", "kw", &facts(3), T0);
    conversation(e, "x", "cx", &facts(3), T0);
    assert_eq!(plan(&e.sweep("kw", T0 + 89.0 * DAY).unwrap(), "archive"), 0);
    assert_eq!(plan(&e.sweep("kw", T0 + 91.0 * DAY).unwrap(), "archive"), 3);
    // Compliance: nothing archived for being unused, even after years.
    assert_eq!(plan(&e.sweep("cx", T0 + 3_000.0 * DAY).unwrap(), "archive"), 0);
    assert_eq!(count(e, "cx", "active"), 3);
}

#[test]
fn an_agents_retention_only_shortens_and_the_organisations_applies_on_top() {
    let mut config = EngineConfig::default();
    config.scopes.retention_days = Some(30.0);
    let s = setup(config);
    let e = &s.engine;
    set(
        e,
        "short",
        AgentChanges {
            retention_days: Some(7.0),
            sweep_live: Some(true),
            ..Default::default()
        },
    );
    set(
        e,
        "long",
        AgentChanges {
            retention_days: Some(400.0),
            sweep_live: Some(true),
            ..Default::default()
        },
    );
    set(e, "cx", policy(PolicyName::Compliance));
    conversation(e, "s", "short", &facts(2), T0);
    conversation(e, "l", "long", &facts(2), T0);
    conversation(e, "x", "cx", &facts(2), T0);
    assert_eq!(plan(&e.sweep("short", T0 + 8.0 * DAY).unwrap(), "archive"), 2);
    // 400 days asked, but the organisation keeps 30: archived after 30, purged after 30 too.
    assert_eq!(plan(&e.sweep("long", T0 + 29.0 * DAY).unwrap(), "archive"), 0);
    let swept = e.sweep("long", T0 + 31.0 * DAY).unwrap();
    assert_eq!(plan(&swept, "purge"), 2, "{swept:#?}");
    // Even compliance keeps nothing past the organisation's retention.
    assert_eq!(plan(&e.sweep("cx", T0 + 31.0 * DAY).unwrap(), "purge"), 2);
    assert_eq!(count(e, "cx", "all"), 0);
}

#[test]
fn the_block_stays_within_each_policys_budget() {
    let s = setup(EngineConfig::default());
    let e = &s.engine;
    for (agent, p, budget) in [
        ("conv", PolicyName::Conversational, 1_500u64),
        ("kw", PolicyName::KnowledgeWorker, 3_000),
        ("cx", PolicyName::Compliance, 2_000),
    ] {
        set(e, agent, policy(p));
        conversation(e, &format!("{agent}-1"), agent, &facts(100), T0);
        let info = decorate(e, &format!("{agent}-2"), agent, QUESTION, T0 + DAY);
        let tokens = info["recall"]["across"]["tokens"].as_u64().unwrap();
        assert!(tokens <= budget, "{agent}: {tokens} > {budget}");
        assert!(tokens > budget - 100, "{agent}: {tokens} leaves the budget unused");
    }
}

#[test]
fn off_captures_and_recalls_nothing() {
    let s = setup(EngineConfig::default());
    let e = &s.engine;
    set(e, "off", policy(PolicyName::Off));
    conversation(e, "o1", "off", &facts(3), T0);
    assert_eq!(count(e, "off", "all"), 0);
    let info = decorate(e, "o2", "off", QUESTION, T0 + DAY);
    assert!(
        info["recall"]["across"].is_null() || info["recall"]["across"]["items"] == json!([]),
        "{info:#?}"
    );
    // Switched on, the next conversation's facts are kept.
    set(e, "off", policy(PolicyName::KnowledgeWorker));
    conversation(e, "o3", "off", &facts(2), T0 + 2.0 * DAY);
    assert_eq!(count(e, "off", "all"), 2);
}
