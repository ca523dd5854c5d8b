//! import takes an export back losslessly: real agent traces (tau-bench, SWE-agent from
//! `$RECALLD_BENCH_DIR/agent-traces-dev.jsonl`) are driven through the daemon with a small
//! ceiling (so episodes, note asks, facts and traces exist), exported, imported under a new
//! name, and exported again: equal but for the name. Both memories then answer the next
//! decorate identically. The data file is required.

use crate::convo;
use crate::util;

use std::io::BufRead;
use std::path::PathBuf;
use std::process::Command;

use recalld::client::Client;
use serde_json::{json, Value};
use util::{bin, code, Daemon};

const CONVERSATIONS: usize = 3;
const MESSAGES: usize = 70;
const CEILING: u64 = 3000;

fn traces() -> Vec<Vec<Value>> {
    let dir = match std::env::var_os("RECALLD_BENCH_DIR") {
        Some(d) if !d.is_empty() => PathBuf::from(d),
        _ => PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../../shared/bench"),
    };
    let file = std::fs::File::open(dir.join("agent-traces-dev.jsonl"))
        .expect("agent-traces-dev.jsonl (set RECALLD_BENCH_DIR)");
    std::io::BufReader::new(file)
        .lines()
        .take(CONVERSATIONS)
        .map(|l| {
            let v: Value = serde_json::from_str(&l.unwrap()).unwrap();
            v["messages"]
                .as_array()
                .unwrap()
                .iter()
                .take(MESSAGES)
                .cloned()
                .collect()
        })
        .collect()
}

fn completion(message: &Value, n: usize) -> Value {
    json!({"id": format!("chatcmpl-{n}"), "object": "chat.completion", "model": "gpt-4o",
           "choices": [{"index": 0, "finish_reason": "stop", "message": message}],
           "usage": {"prompt_tokens": 1000, "completion_tokens": 50, "total_tokens": 1050}})
}

fn asks_for_notes(decorated: &Value) -> bool {
    decorated["info"]["note_ask"] == true
}

/// Drives one conversation: decorate before each assistant message, answer note asks with a
/// note call, then report the assistant message.
fn drive(c: &mut Client, memory: &str, messages: &[Value]) {
    let mut now = 1_700_000_000.0;
    for (i, m) in messages.iter().enumerate() {
        if m["role"] != "assistant" || i == 0 {
            continue;
        }
        let request = json!({"model": "gpt-4o", "messages": messages[..i]});
        now += 30.0;
        let mut decorated = c
            .call(
                "decorate",
                json!({"memory": memory, "request": request, "now": now, "ceiling": CEILING}),
            )
            .unwrap();
        if asks_for_notes(&decorated) {
            let note = json!({"notes": [{"note": format!("{memory} step {i}: the agent answered"),
                "subject": "agent", "object": format!("step {i}"), "milestone": false}]});
            let call = json!({"role": "assistant", "content": null, "tool_calls": [{"id": format!("note-{memory}-{i}"),
                "type": "function", "function": {"name": "note", "arguments": note.to_string()}}]});
            now += 1.0;
            let r = c
                .call(
                    "report",
                    json!({"memory": memory, "response": completion(&call, i), "now": now}),
                )
                .unwrap();
            assert_eq!(r["again"], true);
            decorated = c
                .call(
                    "decorate",
                    json!({"memory": memory, "request": request, "now": now, "ceiling": CEILING}),
                )
                .unwrap();
        }
        assert!(decorated["request"]["messages"].is_array());

        now += 5.0;
        c.call(
            "report",
            json!({"memory": memory, "response": completion(m, i), "now": now}),
        )
        .unwrap();
    }
}

/// Paths where two values differ, with both sides (readable where a plain assert_eq is not).
fn differences(a: &Value, b: &Value, at: &str) -> Vec<String> {
    match (a, b) {
        (Value::Object(x), Value::Object(y)) => {
            let mut keys: Vec<&String> = x.keys().chain(y.keys()).collect();
            keys.sort();
            keys.dedup();
            keys.into_iter()
                .flat_map(|k| {
                    differences(
                        x.get(k).unwrap_or(&Value::Null),
                        y.get(k).unwrap_or(&Value::Null),
                        &format!("{at}.{k}"),
                    )
                })
                .collect()
        }
        (Value::Array(x), Value::Array(y)) if x.len() == y.len() => x
            .iter()
            .zip(y)
            .enumerate()
            .flat_map(|(i, (p, q))| differences(p, q, &format!("{at}[{i}]")))
            .collect(),
        _ if a == b => Vec::new(),
        _ => vec![format!("{at}: {} vs {}", short(a), short(b))],
    }
}

fn short(v: &Value) -> String {
    let s = v.to_string();
    if s.len() > 200 {
        format!("{}…", &s[..200])
    } else {
        s
    }
}

#[test]
fn export_then_import_is_lossless_on_real_agent_traces() {
    let d = Daemon::start();
    let mut c = d.client();
    let conversations = traces();
    assert_eq!(conversations.len(), CONVERSATIONS);
    for (k, messages) in conversations.iter().enumerate() {
        drive(&mut c, &format!("orig-{k}"), messages);
    }
    convo::drain(&mut c);
    let mut totals = (0, 0, 0, 0);
    for (k, messages) in conversations.iter().enumerate() {
        let (orig, copy) = (format!("orig-{k}"), format!("copy-{k}"));
        let exported = c.call("export", json!({"memory": orig})).unwrap();
        let n = |key: &str| exported[key].as_array().unwrap().len();
        totals = (
            totals.0 + n("messages"),
            totals.1 + n("episodes"),
            totals.2 + n("facts"),
            totals.3 + n("traces"),
        );
        // The CLI for the first (export --msgpack to a file, import from it), the op for the rest.
        if k == 0 {
            let file = d.dir.path().join("export.msgpack");
            let out = Command::new(bin())
                .args(["export", &orig, "--msgpack", "--socket", d.socket.to_str().unwrap()])
                .env_remove("RECALLD_CONFIG")
                .output()
                .unwrap();
            assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
            std::fs::write(&file, &out.stdout).unwrap();
            let out = Command::new(bin())
                .args([
                    "import",
                    &copy,
                    file.to_str().unwrap(),
                    "--socket",
                    d.socket.to_str().unwrap(),
                ])
                .env_remove("RECALLD_CONFIG")
                .output()
                .unwrap();
            assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
        } else {
            c.call("import", json!({"memory": copy, "export": exported})).unwrap();
        }
        // Import queues one job, embedding the imported facts, entities and passages again
        // (vectors are derived), which then queues the rebuild of the search indexes: once the
        // lane ran both, only the job counter tells the copy apart.
        convo::drain(&mut c);
        let mut again = c.call("export", json!({"memory": copy})).unwrap();
        assert_eq!(again["memory"], copy.as_str());
        assert_eq!(again["record"]["id"], copy.as_str());
        again["memory"] = json!(orig);
        again["record"]["id"] = json!(orig);
        let queued = again["record"]["next_job"].as_u64().unwrap() - exported["record"]["next_job"].as_u64().unwrap();
        let derived =
            !exported["facts"].as_array().unwrap().is_empty() || !exported["passages"].as_array().unwrap().is_empty();
        assert!(
            queued <= 2 && (!derived || queued == 2),
            "{orig}: {queued} jobs queued by the import"
        );
        again["record"]["next_job"] = exported["record"]["next_job"].clone();
        let diffs = differences(&again, &exported, "");
        assert!(
            diffs.is_empty(),
            "{orig}: the round trip changed {} values: {:#?}",
            diffs.len(),
            &diffs[..diffs.len().min(5)]
        );

        // Both memories answer the next step alike (dry run: nothing stored).
        let next = json!({"model": "gpt-4o", "messages": messages});
        // Recall's step times differ from call to call. Cosines may differ in the sixth
        // digit: the copy's passages were embedded again in batches of another make-up, and
        // padding to another length changes a matmul's rounding. Nothing else may differ.
        let dry = |c: &mut recalld::client::Client, memory: &str| {
            let mut v = c
                .call(
                    "decorate",
                    json!({"memory": memory, "request": next, "now": 1_800_000_000.0, "dry_run": true}),
                )
                .unwrap();
            // The lane's account names the memory (a dry run that cuts queues the new
            // episodes' passages in its copy of the state).
            if let Some(lane) = v["info"]["lane"].as_object_mut() {
                lane.remove("memory");
            }
            let mut cosines = Vec::new();
            if let Some(r) = v["info"]["recall"].as_object_mut() {
                r.remove("ms");
                cosines.extend(r.remove("best_cosine").and_then(|c| c.as_f64()));
                for item in r.get_mut("items").and_then(Value::as_array_mut).into_iter().flatten() {
                    cosines.extend(
                        item.as_object_mut()
                            .and_then(|i| i.remove("cosine"))
                            .and_then(|c| c.as_f64()),
                    );
                }
            }
            (v, cosines)
        };
        let ((a, ca), (b, cb)) = (dry(&mut c, &orig), dry(&mut c, &copy));
        assert_eq!(ca.len(), cb.len(), "{orig}: cosines {ca:?} against {cb:?}");
        assert!(
            ca.iter().zip(&cb).all(|(x, y)| (x - y).abs() < 1e-4),
            "{orig}: cosines {ca:?} against {cb:?}"
        );
        assert_eq!(a, b, "{orig}: the imported memory behaves differently");
    }
    eprintln!(
        "import round trip: {} messages, {} episodes, {} facts, {} traces",
        totals.0, totals.1, totals.2, totals.3
    );
    assert!(
        totals.1 > 0 && totals.2 > 0 && totals.3 > 0,
        "episodes, facts and traces were exercised"
    );

    // A memory that exists is not overwritten; a malformed export stores nothing.
    let exported = c.call("export", json!({"memory": "orig-0"})).unwrap();
    assert_eq!(
        code(c.call("import", json!({"memory": "copy-0", "export": exported}))),
        "conflict"
    );
    let mut broken = exported.clone();
    broken["messages"][0]["seq"] = json!(10_000_000);
    assert_eq!(
        code(c.call("import", json!({"memory": "broken", "export": broken}))),
        "invalid_argument"
    );
    assert_eq!(code(c.call("export", json!({"memory": "broken"}))), "not_found");
}
