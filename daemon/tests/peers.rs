//! Isolation by peer credentials, with real uids: each connecting uid has its own memories, a
//! share rule lets a group use an agent's, and another uid's memory is always `not_found`.
//! Needs root (to create users and run clients as them); CI runs as root.

use crate::util;

use std::os::unix::fs::PermissionsExt;
use std::os::unix::process::CommandExt;
use std::process::Command;

use serde_json::{json, Value};
use util::{bin, code, Daemon};

const AGENT: &str = "recalld-t-agent";
const OTHER: &str = "recalld-t-other";
const SHARER: &str = "recalld-t-sharer";
const GROUP: &str = "recalld-t-share";

fn ensure_group(name: &str) {
    if !Command::new("getent")
        .args(["group", name])
        .output()
        .unwrap()
        .status
        .success()
    {
        let st = Command::new("groupadd").args(["--system", name]).status().unwrap();
        assert!(st.success(), "groupadd {name}");
    }
}

/// Creates the user if missing; returns (uid, gid).
fn ensure_user(name: &str, groups: &[&str]) -> (u32, u32) {
    if !Command::new("getent")
        .args(["passwd", name])
        .output()
        .unwrap()
        .status
        .success()
    {
        let mut cmd = Command::new("useradd");
        cmd.args([
            "--system",
            "--no-create-home",
            "--user-group",
            "--shell",
            "/usr/sbin/nologin",
        ]);
        if !groups.is_empty() {
            cmd.arg("--groups").arg(groups.join(","));
        }
        assert!(cmd.arg(name).status().unwrap().success(), "useradd {name}");
    }
    let id = |flag: &str| -> u32 {
        let out = Command::new("id").arg(flag).arg(name).output().unwrap();
        String::from_utf8_lossy(&out.stdout).trim().parse().unwrap()
    };
    (id("-u"), id("-g"))
}

/// `recalld call` run as `user`: Ok(reply) or Err(error code).
fn call_as(user: (u32, u32), d: &Daemon, op: &str, args: Value) -> Result<Value, String> {
    let out = Command::new(bin())
        .arg("call")
        .arg(op)
        .arg(args.to_string())
        .arg("--socket")
        .arg(&d.socket)
        .env_remove("RECALLD_CONFIG")
        .env("HOME", "/nonexistent")
        .uid(user.0)
        .gid(user.1)
        .output()
        .unwrap();
    if out.status.success() {
        Ok(serde_json::from_slice(&out.stdout).unwrap())
    } else {
        let err: Value = serde_json::from_slice(&out.stderr)
            .unwrap_or_else(|_| panic!("not an error reply: {}", String::from_utf8_lossy(&out.stderr)));
        Err(err["code"].as_str().unwrap().to_string())
    }
}

fn chat(text: &str) -> Value {
    json!({"model": "gpt-4o", "messages": [{"role": "user", "content": text}]})
}

fn texts(export: &Value) -> Vec<String> {
    export["messages"]
        .as_array()
        .unwrap()
        .iter()
        .map(|m| m["message"]["content"].as_str().unwrap_or_default().to_string())
        .collect()
}

#[test]
fn each_uid_has_its_own_memories_and_a_share_rule_opens_an_agents_to_a_group() {
    // SAFETY: geteuid has no preconditions.
    if unsafe { libc::geteuid() } != 0 {
        eprintln!("skipped: needs root to create users and connect as them (CI runs as root)");
        return;
    }
    ensure_group(GROUP);
    let agent = ensure_user(AGENT, &[]);
    let other = ensure_user(OTHER, &[]);
    let sharer = ensure_user(SHARER, &[GROUP]);

    let d = Daemon::start_with_config(&format!(
        "socket_mode = 0o666\n[peers]\nshare = [{{ owner = \"{AGENT}\", members = [\"@{GROUP}\"] }}]\n"
    ));
    std::fs::set_permissions(d.dir.path(), std::fs::Permissions::from_mode(0o755)).unwrap();

    call_as(
        agent,
        &d,
        "decorate",
        json!({"memory": "notes", "request": chat("agent secret"), "now": 1000.0}),
    )
    .unwrap();
    // Another uid cannot see it, by any op, and learns nothing about its existence.
    assert_eq!(
        call_as(other, &d, "export", json!({"memory": "notes"})).unwrap_err(),
        "not_found"
    );
    assert_eq!(
        call_as(other, &d, "forget_memory", json!({"memory": "notes"})).unwrap_err(),
        "not_found"
    );
    let ns_guess = format!("u{}/notes", agent.0);
    assert_eq!(
        call_as(other, &d, "export", json!({"memory": ns_guess})).unwrap_err(),
        "not_found"
    );
    // The same name is its own memory for the other uid.
    call_as(
        other,
        &d,
        "decorate",
        json!({"memory": "notes", "request": chat("other's words"), "now": 1001.0}),
    )
    .unwrap();
    let theirs = call_as(other, &d, "export", json!({"memory": "notes"})).unwrap();
    assert_eq!(texts(&theirs), vec!["other's words"]);
    assert_eq!(
        theirs["memory"], "notes",
        "the caller's name comes back, not the namespace"
    );
    let mine = call_as(agent, &d, "export", json!({"memory": "notes"})).unwrap();
    assert_eq!(texts(&mine), vec!["agent secret"]);
    // Root connecting has a namespace of its own too.
    assert_eq!(code(d.client().call("export", json!({"memory": "notes"}))), "not_found");
    // A member of the share group works in the agent's memories.
    let shared = call_as(sharer, &d, "export", json!({"memory": "notes"})).unwrap();
    assert_eq!(texts(&shared), vec!["agent secret"]);
    // `memories` lists the caller's own only, named as the caller names them (a share
    // member sees the owner's), and `inspect` reaches no other namespace.
    call_as(
        agent,
        &d,
        "decorate",
        json!({"memory": "plans", "request": chat("agent plans"), "now": 1002.0}),
    )
    .unwrap();
    let listed = |user| -> Vec<String> {
        let reply = call_as(user, &d, "memories", json!({})).unwrap();
        reply["memories"]
            .as_array()
            .unwrap()
            .iter()
            .map(|m| m["memory"].as_str().unwrap().to_string())
            .collect()
    };
    assert_eq!(listed(agent), ["notes", "plans"]);
    assert_eq!(listed(sharer), ["notes", "plans"]);
    assert_eq!(listed(other), ["notes"]);
    let root = d.client().call("memories", json!({})).unwrap();
    assert_eq!(root["memories"], json!([]), "root has none of its own");
    assert_eq!(
        call_as(other, &d, "inspect", json!({"memory": "plans"})).unwrap_err(),
        "not_found"
    );
    assert_eq!(
        call_as(other, &d, "inspect", json!({"memory": format!("u{}/plans", agent.0)})).unwrap_err(),
        "not_found"
    );
    let inspected = call_as(sharer, &d, "inspect", json!({"memory": "plans", "turns": [1, 1]})).unwrap();
    assert_eq!(inspected["memory"], "plans");
    assert_eq!(inspected["messages"][0]["text"], "agent plans");

    // Forgetting one uid's memory leaves the other's.
    let receipt = call_as(other, &d, "forget_memory", json!({"memory": "notes"})).unwrap();
    assert_eq!(receipt["memory"], "notes");
    assert_eq!(
        call_as(other, &d, "export", json!({"memory": "notes"})).unwrap_err(),
        "not_found"
    );
    assert_eq!(
        texts(&call_as(agent, &d, "export", json!({"memory": "notes"})).unwrap()),
        vec!["agent secret"]
    );
}
