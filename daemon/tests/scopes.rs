//! Memory across conversations (seed 002), through the real socket: conversations of one user
//! and agent hand their facts to the agent's scope, facts that agree are distilled into one
//! semantic fact, a later conversation is shown it, another user is not (until the agent
//! shares), deleting a source removes what was distilled from it, every step is audited, and
//! the sweep reports before it acts. Time is injected.

use crate::util;

use recalld::client::Client;
use serde_json::{json, Value};
use util::{code, Daemon};

const T0: f64 = 1_767_225_600.0; // 2026-01-01
const DAY: f64 = 86_400.0;

fn decorate(c: &mut Client, memory: &str, user: &str, text: &str, now: f64) -> Value {
    c.call(
        "decorate",
        json!({"memory": memory, "agent": "helper", "user": user, "now": now, "ceiling": 16000,
            "request": {"model": "gpt-4o", "messages": [{"role": "user", "content": text}]}}),
    )
    .unwrap()
}

/// The model answers and notes `facts` (one note call), then the conversation ends and the
/// lane hands it to the scope.
fn answer_note_end(c: &mut Client, memory: &str, facts: &[&str], now: f64) {
    let notes: Vec<Value> = facts
        .iter()
        .map(|f| json!({"note": f, "subject": "Alex", "object": "answers", "milestone": false}))
        .collect();
    let call = json!({"id": format!("call-{memory}"), "type": "function",
        "function": {"name": "note", "arguments": json!({"notes": notes}).to_string()}});
    let reply = json!({"id": "r", "object": "chat.completion", "model": "gpt-4o", "choices": [{"index": 0,
        "finish_reason": "stop", "message": {"role": "assistant", "content": "Sure, noted.", "tool_calls": [call]}}]});
    c.call("report", json!({"memory": memory, "response": reply, "now": now}))
        .unwrap();
    let ended = c.call("end", json!({"memory": memory, "now": now + 60.0})).unwrap();
    assert_eq!(ended["queued"], true);
    assert_eq!(c.quiet(memory, 120_000).unwrap(), 0, "the lane did not finish");
}

fn list(c: &mut Client, user: &str, status: &str) -> Vec<Value> {
    c.call(
        "list_memories",
        json!({"agent": "helper", "user": user, "status": status, "now": T0 + 10.0 * DAY}),
    )
    .unwrap()["memories"]
        .as_array()
        .unwrap()
        .clone()
}

fn texts(request: &Value) -> Vec<String> {
    request["messages"]
        .as_array()
        .unwrap()
        .iter()
        .filter_map(|m| m["content"].as_str().map(str::to_owned))
        .collect()
}

fn across_header(request: &Value) -> Option<String> {
    texts(request)
        .into_iter()
        .find(|t| t.starts_with("From this agent's earlier conversations"))
}

#[test]
fn three_conversations_agree_and_a_fourth_is_told() {
    let d = Daemon::start();
    let mut c = d.client();
    let preference = [
        "Alex prefers concise answers in bullet points.",
        "Alex prefers concise answers in bullet points",
        "Alex prefers concise answers, in bullet points.",
    ];
    for (i, fact) in preference.iter().enumerate() {
        let m = format!("alex-{i}");
        let now = T0 + i as f64 * DAY;
        decorate(
            &mut c,
            &m,
            "alex",
            "Please keep your answers short; bullet points suit me best.",
            now,
        );
        answer_note_end(&mut c, &m, &[fact], now + 30.0);
    }

    // One semantic fact with three sources; its sources are replaced by it, not deleted.
    let active = list(&mut c, "alex", "active");
    let semantic: Vec<&Value> = active.iter().filter(|f| f["tier"] == "semantic").collect();
    assert_eq!(semantic.len(), 1, "one distilled fact: {active:#?}");
    let distilled = semantic[0].clone();
    assert_eq!(distilled["sources"].as_array().unwrap().len(), 3);
    assert_eq!(distilled["kind"], "preference");
    assert!(
        active.iter().all(|f| f["tier"] == "semantic"),
        "the sources left active use: {active:#?}"
    );
    let replaced = list(&mut c, "alex", "replaced");
    assert_eq!(replaced.len(), 3);
    assert!(replaced.iter().all(|f| f["status"]["by"] == distilled["id"]));

    // A fourth conversation of Alex's is shown it, before the message, in its own block.
    let question = "Could you give me an overview of the quarterly numbers? Answers in bullet points please.";
    let r = decorate(&mut c, "alex-3", "alex", question, T0 + 5.0 * DAY);
    let block = across_header(&r["request"]).unwrap_or_else(|| panic!("a cross-memory block: {}", r["info"]["recall"]));
    assert!(block.contains("Alex prefers concise answers"), "{block}");
    let items = &r["info"]["recall"]["across"]["items"];
    assert_eq!(items[0]["id"], distilled["id"], "{items}");
    assert_eq!(items[0]["tier"], "semantic");

    // Another user of the same (private) agent is never shown it, nor can list or read it.
    let r = decorate(&mut c, "sam-0", "sam", question, T0 + 5.0 * DAY);
    assert!(across_header(&r["request"]).is_none(), "{:#?}", r["request"]);
    assert!(list(&mut c, "sam", "all").is_empty());
    let id = distilled["id"].as_u64().unwrap();
    let err = c.call("observe_memory", json!({"agent": "helper", "user": "sam", "id": id}));
    assert_eq!(code(err), "not_found");

    // With sharing on, Sam's conversations are shown it too.
    let set = c
        .call(
            "agent",
            json!({"agent": "helper", "sharing": "shared", "now": T0 + 5.0 * DAY}),
        )
        .unwrap();
    assert_eq!(set["sharing"], "shared");
    let r = decorate(&mut c, "sam-1", "sam", question, T0 + 5.0 * DAY + 60.0);
    assert!(across_header(&r["request"]).is_some_and(|b| b.contains("Alex prefers concise answers")));
    c.call(
        "agent",
        json!({"agent": "helper", "sharing": "private", "now": T0 + 5.0 * DAY + 120.0}),
    )
    .unwrap();

    // Observing it shows its sources and where they came from.
    let seen = c
        .call(
            "observe_memory",
            json!({"agent": "helper", "user": "alex", "id": id, "now": T0 + 6.0 * DAY}),
        )
        .unwrap();
    let origins: Vec<&str> = seen["source_facts"]
        .as_array()
        .unwrap()
        .iter()
        .map(|s| s["origin"]["memory"].as_str().unwrap())
        .collect();
    assert_eq!(origins, ["alex-0", "alex-1", "alex-2"]);

    // The sweep in report mode changes nothing and says what it would do.
    let before = list(&mut c, "alex", "all");
    let swept = c
        .call("sweep", json!({"agent": "helper", "now": T0 + 200.0 * DAY}))
        .unwrap();
    assert_eq!(swept["mode"], "report");
    assert!(!swept["plan"].as_array().unwrap().is_empty(), "{swept:#?}");
    assert_eq!(list(&mut c, "alex", "all"), before);

    // The readiness check: on, models working, everything searchable, swept.
    let doctor = c
        .call("doctor", json!({"agent": "helper", "now": T0 + 200.0 * DAY}))
        .unwrap();
    assert_eq!(doctor["ready"], true, "{doctor:#?}");
    assert_eq!(doctor["memory"], "on");

    // "Memories used" in the fourth conversation, then a correction.
    let used = c.call("memories_used", json!({"memory": "alex-3"})).unwrap();
    assert_eq!(used["used"][0]["id"], id);
    assert_eq!(used["used"][0]["tier"], "semantic");
    let fixed = c
        .call(
            "update_memory",
            json!({"agent": "helper", "user": "alex", "id": id,
            "text": "Alex prefers concise answers, as bullet points, without preamble.", "now": T0 + 201.0 * DAY}),
        )
        .unwrap();
    assert_eq!(fixed["searchable_by_meaning"], true);
    assert_eq!(
        code(c.call(
            "update_memory",
            json!({"agent": "helper", "user": "sam", "id": id, "text": "x"})
        )),
        "not_found"
    );

    // Forgetting one source conversation removes the distilled fact; the other sources are
    // in use again.
    let forgot = c.call("forget_memory", json!({"memory": "alex-0"})).unwrap();
    assert!(forgot["removed"]["scope_facts"].as_u64().unwrap() >= 2, "{forgot:#?}");
    let active = list(&mut c, "alex", "active");
    assert!(active.iter().all(|f| f["tier"] == "episodic"), "{active:#?}");
    let origins: Vec<&str> = active.iter().map(|f| f["origin"]["memory"].as_str().unwrap()).collect();
    assert_eq!(origins, ["alex-1", "alex-2"]);

    // Every step is in the audit log, memories named as the caller named them.
    let log = c.call("audit", json!({"agent": "helper"})).unwrap();
    let actions: Vec<&str> = log["entries"]
        .as_array()
        .unwrap()
        .iter()
        .map(|e| e["action"].as_str().unwrap())
        .collect();
    for a in [
        "handoff",
        "consolidate",
        "inject",
        "settings",
        "sweep",
        "forget",
        "update",
    ] {
        assert!(actions.contains(&a), "no {a} in {actions:?}");
    }
    assert_eq!(actions.iter().filter(|a| **a == "handoff").count(), 3);
    let inject = log["entries"]
        .as_array()
        .unwrap()
        .iter()
        .find(|e| e["action"] == "inject" && e["memory"] == "alex-3");
    assert_eq!(inject.expect("alex-3's block audited")["items"], json!([id]));
    // The second conversation was already shown the first one's fact, and restated it: the
    // handoff counted that as a use.
    let shown = log["entries"]
        .as_array()
        .unwrap()
        .iter()
        .find(|e| e["action"] == "inject" && e["memory"] == "alex-1");
    assert_eq!(shown.expect("alex-1 was shown alex-0's fact")["items"], json!([0]));
    let handoff = log["entries"]
        .as_array()
        .unwrap()
        .iter()
        .find(|e| e["action"] == "handoff" && e["memory"] == "alex-1")
        .unwrap();
    assert_eq!(handoff["detail"]["used"], json!([0]));

    // Clearing Alex's memories leaves none, and says which went.
    let cleared = c
        .call("clear_memories", json!({"agent": "helper", "user": "alex"}))
        .unwrap();
    assert_eq!(cleared["removed"].as_array().unwrap().len(), 2);
    assert!(list(&mut c, "alex", "all").is_empty());
}

#[test]
fn a_conversation_ends_by_itself_when_quiet() {
    let d = Daemon::start_with_config("[engine.scopes]\nquiet_minutes = 0.02\n");
    let mut c = d.client();
    let now = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_secs_f64();
    c.call(
        "decorate",
        json!({"memory": "q", "agent": "helper", "user": "alex", "now": now,
            "request": {"model": "gpt-4o", "messages": [{"role": "user", "content": "I run everything on Debian."}]}}),
    )
    .unwrap();
    let call = json!({"id": "c1", "type": "function", "function": {"name": "note", "arguments": json!({"notes": [
        {"note": "Alex's servers run Debian.", "subject": "Alex", "object": "Debian", "milestone": false}]}).to_string()}});
    let reply = json!({"id": "r", "object": "chat.completion", "model": "gpt-4o", "choices": [{"index": 0,
        "finish_reason": "stop", "message": {"role": "assistant", "content": "Noted.", "tool_calls": [call]}}]});
    c.call("report", json!({"memory": "q", "response": reply, "now": now}))
        .unwrap();
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(60);
    loop {
        let facts = c
            .call("list_memories", json!({"agent": "helper", "user": "alex"}))
            .unwrap();
        if let Some(f) = facts["memories"].as_array().unwrap().first() {
            assert_eq!(f["text"], "Alex's servers run Debian.");
            assert_eq!(f["kind"], "environment");
            break;
        }
        assert!(
            std::time::Instant::now() < deadline,
            "the quiet memory was never handed over"
        );
        std::thread::sleep(std::time::Duration::from_millis(200));
    }
}

#[test]
fn scope_ops_refuse_bad_input_clearly() {
    let d = Daemon::start();
    let mut c = d.client();
    assert_eq!(
        code(c.call("agent", json!({"agent": "a", "policy": "forever"}))),
        "invalid_argument"
    );
    assert_eq!(
        code(c.call("agent", json!({"agent": "a", "sharing": "public"}))),
        "invalid_argument"
    );
    assert_eq!(
        code(c.call("observe_memory", json!({"agent": "a"}))),
        "invalid_argument"
    );
    assert_eq!(
        code(c.call("observe_memory", json!({"agent": "a", "id": 7}))),
        "not_found"
    );
    assert_eq!(code(c.call("end", json!({"memory": "nope"}))), "not_found");
    assert_eq!(code(c.call("list_memories", json!({"agent": ""}))), "invalid_argument");
    assert_eq!(
        code(c.call("list_memories", json!({"agent": "a", "status": "gone"}))),
        "invalid_argument"
    );
    // A memory with no agent has no scope to end into.
    c.call(
        "decorate",
        json!({"memory": "plain", "request": {"model": "m", "messages": [{"role": "user", "content": "hi"}]}}),
    )
    .unwrap();
    assert_eq!(code(c.call("end", json!({"memory": "plain"}))), "invalid_argument");
}
