//! Data in and out on the real daemon: forget_memory removes a memory and everything derived
//! from it (and only it), and a backup taken while serving restores to the same memories.

use crate::convo;
use crate::util;

use std::process::Command;

use convo::Convo;
use recalld::store::{Store, StoreOptions};
use serde_json::{json, Value};
use util::{bin, code, indexed_ids, Daemon};

fn cli(args: &[&str]) -> (bool, Value, String) {
    let out = Command::new(bin())
        .args(args)
        .env_remove("RECALLD_CONFIG")
        .output()
        .unwrap();
    let stdout: Value = serde_json::from_slice(&out.stdout).unwrap_or(Value::Null);
    (
        out.status.success(),
        stdout,
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}

fn len(v: &Value, key: &str) -> u64 {
    v[key].as_array().map(|a| a.len() as u64).unwrap_or(0)
}

#[test]
fn forget_removes_every_record_of_one_memory_and_backup_restore_round_trips() {
    let mut d = Daemon::start();
    let mut c = d.client();
    let mut keep = Convo::new("keep");
    let mut gone = Convo::new("gone");
    for _ in 0..12 {
        keep.turn_trip(&mut c).unwrap();
        gone.turn_trip(&mut c).unwrap();
    }
    convo::drain(&mut c);
    let before_keep = c.call("export", json!({"memory": "keep"})).unwrap();
    let before = c.call("export", json!({"memory": "gone"})).unwrap();
    assert!(len(&before, "facts") >= 12, "{}", len(&before, "facts"));
    assert!(len(&before, "episodes") > 0, "the low ceiling cuts episodes");

    let socket = d.socket.to_str().unwrap().to_string();
    // A reader that stops early (`recalld call … | head`) is not an error; the echo is more
    // than a pipe holds, so the writer finds the pipe closed.
    let payload = json!({"payload": "x".repeat(100_000)}).to_string();
    let mut head = Command::new(bin())
        .args(["call", "--socket", &socket, "ping", &payload])
        .env_remove("RECALLD_CONFIG")
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    let mut first = [0u8; 16];
    std::io::Read::read_exact(head.stdout.as_mut().unwrap(), &mut first).unwrap();
    drop(head.stdout.take());
    let out = head.wait_with_output().unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success() && stderr.is_empty(), "{:?}: {stderr}", out.status);
    // Output that cannot be written (a full disk) is an error, in both export formats.
    for msgpack in [false, true] {
        let mut args = vec!["export", "keep", "--socket", &socket];
        if msgpack {
            args.push("--msgpack");
        }
        let out = Command::new(bin())
            .args(&args)
            .env_remove("RECALLD_CONFIG")
            .stdout(std::fs::File::create("/dev/full").unwrap())
            .output()
            .unwrap();
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert!(!out.status.success(), "msgpack {msgpack}: a failed write exits 0");
        assert!(
            stderr.contains("cannot write the output"),
            "msgpack {msgpack}: {stderr}"
        );
    }

    let (ok, receipt, err) = cli(&["forget", "gone", "--socket", &socket]);
    assert!(ok, "{err}");
    assert_eq!(receipt["memory"], "gone");
    let removed = &receipt["removed"];
    assert_eq!(removed["memories"], 1);
    assert_eq!(removed["messages"].as_u64(), Some(len(&before, "messages")));
    assert_eq!(removed["facts"].as_u64(), Some(len(&before, "facts")));
    assert_eq!(removed["episodes"].as_u64(), Some(len(&before, "episodes")));
    assert_eq!(removed["traces"].as_u64().unwrap_or(0), len(&before, "traces"));
    assert_eq!(code(c.call("export", json!({"memory": "gone"}))), "not_found");
    assert_eq!(code(c.call("forget_memory", json!({"memory": "gone"}))), "not_found");
    assert_eq!(
        c.call("export", json!({"memory": "keep"})).unwrap(),
        before_keep,
        "a neighbour untouched"
    );

    // A backup while the daemon serves (and a client keeps writing).
    let backup = d.dir.path().join("backup-1");
    let data = d.data.to_str().unwrap().to_string();
    let (ok, info, err) = cli(&["backup", backup.to_str().unwrap(), "--data", &data]);
    assert!(ok, "{err}");
    assert_eq!(info["memories"], 1);
    keep.turn_trip(&mut c).unwrap();
    convo::drain(&mut c);
    let after_backup = c.call("export", json!({"memory": "keep"})).unwrap();
    drop(c);
    assert_eq!(d.stop(), Some(0));

    // Nothing of the forgotten memory is left in any table (whatever it is named inside).
    {
        let store = Store::open(&d.data, &StoreOptions::default()).unwrap();
        let left = store
            .read(|r| r.memory_entries(&format!("u{}/gone", unsafe { libc::geteuid() })))
            .unwrap();
        assert_eq!(left, 0);
        let kept = store
            .read(|r| r.memory_entries(&format!("u{}/keep", unsafe { libc::geteuid() })))
            .unwrap();
        assert!(kept > 0);
    }

    // Restore is refused while a daemon serves, then puts the backup in place.
    d.spawn(&[]);
    let (ok, _, err) = cli(&[
        "restore",
        backup.to_str().unwrap(),
        "--data",
        &data,
        "--socket",
        &socket,
    ]);
    assert!(!ok && err.contains("stop it"), "{err}");
    assert_eq!(d.stop(), Some(0));
    let (ok, restored, err) = cli(&[
        "restore",
        backup.to_str().unwrap(),
        "--data",
        &data,
        "--socket",
        &socket,
    ]);
    assert!(ok, "{err}");
    assert!(
        restored["replaced_file_kept_at"].is_string(),
        "the replaced file is kept"
    );
    d.spawn(&[]);
    let mut c = d.client();
    assert_eq!(c.call("export", json!({"memory": "keep"})).unwrap(), before_keep);
    assert_ne!(before_keep, after_backup);
    assert_eq!(code(c.call("export", json!({"memory": "gone"}))), "not_found");
}

// ---- forget_memory, then search: nothing of the forgotten memory is found ----

/// The forgotten conversation's own words: its user messages say "Turn n of gone:" and its
/// facts "gone fact n:"; no other memory here says either.
const GONE_MARKS: [&str; 2] = ["of gone:", "gone fact"];

/// Low enough that twelve turns fade: early episodes are sealed, cut into passages and indexed.
const CEILING: u64 = 1200;

fn question() -> String {
    // About turn 2 of the forgotten conversation (convo::Convo::user_text(2) for "gone").
    "Turn 2 of gone: which version did the charlie crate ship, and in which city does its maintainer live?".into()
}

/// decorate (dry run: nothing stored) of `history` plus the question. Returns its info, the
/// recall block just before the question, and the text of everything else the request holds
/// (instructions, facts block, history in view, recall blocks, note ask).
fn ask(c: &mut recalld::client::Client, memory: &str, history: &[Value], now: f64) -> (Value, Option<String>, String) {
    let mut messages = history.to_vec();
    messages.push(json!({"role": "user", "content": question()}));
    let r = c
        .call(
            "decorate",
            json!({"memory": memory, "now": now, "ceiling": CEILING, "dry_run": true,
                   "request": {"model": "gpt-4o", "messages": messages}}),
        )
        .unwrap();
    let mut sent = r["request"]["messages"].as_array().unwrap().clone();
    let at = sent
        .iter()
        .rposition(|m| m["content"] == json!(question()))
        .expect("the question is sent");
    sent.remove(at);
    let block = at.checked_sub(1).and_then(|i| {
        let text = sent[i]["content"].as_str()?;
        (sent[i]["role"] == "system" && text.starts_with("Recalled from earlier")).then(|| text.to_owned())
    });
    (r["info"].clone(), block, serde_json::to_string(&sent).unwrap())
}

/// Whether the question was searched by meaning as well as by words (its embedding was ready).
fn by_meaning(info: &Value) -> bool {
    info["recall"]["searches"]
        .as_object()
        .is_some_and(|s| s.keys().any(|k| k.starts_with("meaning")))
}

fn items(info: &Value) -> usize {
    info["recall"]["items"].as_array().map_or(0, Vec::len)
}

/// A conversation about something else entirely (a garden), turn by turn, each reply with a
/// note call, at the same low ceiling as the conversations before it: so it is cut, sealed and
/// indexed too.
fn garden(c: &mut recalld::client::Client, memory: &str, turns: u64) -> Vec<Value> {
    let mut history = vec![json!({"role": "system", "content": "You are a careful assistant."})];
    let mut now = 1_800_000_000.0;
    for n in 1..=turns {
        let (bed, litres) = (n * 3 % 11, n % 7 + 2);
        let beans = ["runner", "broad", "french", "borlotti"][(n % 4) as usize];
        let filler = "Some words about weather, soil and compost to give the message a realistic size. ".repeat(3);
        let text = format!(
            "Day {n} in the allotment: the tomatoes in bed {bed} need {litres} litres of water, and the {beans} \
             beans were planted beside the shed. {filler}"
        );
        history.push(json!({"role": "user", "content": text}));
        now += 60.0;
        let request = json!({"model": "gpt-4o", "messages": history});
        let args = json!({"memory": memory, "now": now, "ceiling": CEILING, "request": request});
        c.call("decorate", args).unwrap();
        let note = json!({"notes": [{"note": format!("Bed {bed} tomatoes take {litres} litres on day {n}"),
            "subject": format!("bed {bed}"), "object": "tomatoes"}]});
        let call = json!({"id": format!("call_garden_{n}"), "type": "function",
            "function": {"name": "note", "arguments": note.to_string()}});
        let answer = format!("Watering plan for day {n} noted.");
        let message = json!({"role": "assistant", "content": answer, "tool_calls": [call]});
        let response = json!({"id": format!("chatcmpl-garden-{n}"), "object": "chat.completion", "model": "gpt-4o",
            "choices": [{"index": 0, "finish_reason": "tool_calls", "message": message}],
            "usage": {"prompt_tokens": 900, "completion_tokens": 40, "total_tokens": 940}});
        now += 5.0;
        c.call("report", json!({"memory": memory, "now": now, "response": response}))
            .unwrap();
        history.push(json!({"role": "assistant", "content": answer}));
    }
    history
}

/// What the word and vector indexes under `root` hold for `memory`, and the word index's hits
/// for the forgotten conversation's words (opened only while no daemon runs).
fn held(root: &std::path::Path, memory: &str) -> (Vec<u64>, Vec<u64>, usize) {
    let words = recalld::index::words::Words::open(root, 8).unwrap();
    let vectors = recalld::index::vectors::Vectors::open(root, 384, "vectors", 8).unwrap();
    let (mut w, mut v) = (words.ids(memory).unwrap(), vectors.ids(memory).unwrap());
    w.sort_unstable();
    v.sort_unstable();
    let hits = words
        .search(memory, "gone crate charlie maintainer ships version", 50)
        .unwrap()
        .len();
    (w, v, hits)
}

#[test]
fn after_forget_memory_no_search_finds_anything_of_it() {
    // Two configs: the conversations are held with the default recall deadline (a debug build's
    // embedding is slow, so most turns recall by words only); the questions are asked by a
    // daemon that waits for their embedding, so they are searched by meaning as well.
    // New facts are judged against a few recent episodes only, so the lane drains sooner.
    let mut d = Daemon::start_with_config("[engine]\nmax_episodes_judged = 4\n");
    let talk = d.dir.path().join("recalld.toml").to_str().unwrap().to_string();
    let ask_config = d.dir.path().join("ask.toml");
    std::fs::write(
        &ask_config,
        "[engine]\nmax_episodes_judged = 4\nrecall_deadline_ms = 60000\n",
    )
    .unwrap();
    let ask_config = ask_config.to_str().unwrap().to_string();
    let uid = unsafe { libc::geteuid() };
    let (gone_id, keep_id) = (format!("u{uid}/gone"), format!("u{uid}/keep"));
    let index = d.data.join("index");
    let mut c = d.client();
    let (mut keep, mut gone) = (Convo::new("keep"), Convo::new("gone"));
    (keep.ceiling, gone.ceiling) = (CEILING, CEILING);
    for _ in 0..12 {
        keep.turn_trip(&mut c).unwrap();
        gone.turn_trip(&mut c).unwrap();
    }
    convo::drain(&mut c);
    let before = c.call("export", json!({"memory": "gone"})).unwrap();
    assert!(len(&before, "facts") >= 12, "{}", len(&before, "facts"));
    assert!(len(&before, "passages") > 0, "sealed episodes were cut into passages");
    let dir = recalld::index::memory_dir(&index, &gone_id);
    let files = [
        "marks.json",
        "words",
        "vectors.usearch",
        "vectors.keys",
        "entities.usearch",
        "entities.keys",
    ];
    drop(c);
    // A small vector index is saved when enough changed, or at the latest at shutdown.
    assert_eq!(d.stop(), Some(0));
    for f in files {
        assert!(
            dir.join(f).exists(),
            "the lane indexed the memory: {f} in {}",
            dir.display()
        );
    }
    d.spawn(&["--config", &ask_config]);
    let mut c = d.client();

    // Before: the question brings the forgotten memory's words back, by words and by meaning.
    let (info, block, _) = ask(&mut c, "gone", &gone.history, gone.now + 3600.0);
    assert!(
        items(&info) > 0,
        "recall found something before forgetting: {}",
        info["recall"]
    );
    assert!(by_meaning(&info), "{}", info["recall"]);
    let close = info["recall"]["best_cosine"].as_f64().unwrap();
    assert!(
        close > 0.5,
        "its passage of turn 2 is close in meaning: {}",
        info["recall"]
    );
    let block = block.unwrap_or_else(|| panic!("a recall block before forgetting: {}", info["recall"]));
    assert!(GONE_MARKS.iter().any(|m| block.contains(m)), "{block}");

    let receipt = c.call("forget_memory", json!({"memory": "gone"})).unwrap();
    let removed = &receipt["removed"];
    assert_eq!(removed["facts"].as_u64(), Some(len(&before, "facts")), "{receipt}");
    assert_eq!(
        removed["passages"].as_u64(),
        Some(len(&before, "passages")),
        "{receipt}"
    );
    assert!(
        removed["vectors"].as_u64().unwrap_or(0) >= len(&before, "passages"),
        "{receipt}"
    );
    for f in files {
        assert!(!dir.join(f).exists(), "{f} of the forgotten memory is still on disk");
    }
    let keep_export = c.call("export", json!({"memory": "keep"})).unwrap();
    drop(c);

    // Stopped (shutdown flushes every open index): nothing of it was written back, and the
    // neighbour's indexes still hold exactly its own documents.
    assert_eq!(d.stop(), Some(0));
    for f in files {
        assert!(
            !dir.join(f).exists(),
            "{f} of the forgotten memory came back at shutdown"
        );
    }
    assert_eq!(
        held(&index, &gone_id),
        (vec![], vec![], 0),
        "indexes of the forgotten memory"
    );
    let want = indexed_ids(&keep_export);
    let (w, v, _) = held(&index, &keep_id);
    assert_eq!((w, v), (want.clone(), want), "the neighbour's indexes are untouched");

    // A new memory of the same name, about something else, cut and indexed as well.
    d.spawn(&["--config", &talk]);
    let mut c = d.client();
    let history = garden(&mut c, "gone", 12);
    convo::drain(&mut c);
    let new_export = c.call("export", json!({"memory": "gone"})).unwrap();
    assert!(
        len(&new_export, "passages") > 0,
        "the new memory's history is searched too"
    );
    drop(c);
    assert_eq!(d.stop(), Some(0));

    // The same question to it, to the neighbour and to a memory never seen: nothing of the
    // forgotten memory comes back.
    d.spawn(&["--config", &ask_config]);
    let mut c = d.client();
    let (info, block, sent) = ask(&mut c, "gone", &history, 1_900_000_000.0);
    assert!(
        by_meaning(&info),
        "recall searched the new memory by words and meaning: {}",
        info["recall"]
    );
    // Nothing in its vector index is near the question any more (the forgotten passage was
    // above 0.5), nothing was recalled, and none of the old words is anywhere in the request.
    let best = info["recall"]["best_cosine"].as_f64().unwrap();
    assert!(
        best < 0.3,
        "best cosine {best} (before forgetting {close}): {}",
        info["recall"]
    );
    assert_eq!(info["recall"]["relevant"], false, "{}", info["recall"]);
    // What the block may hold is the new memory's own garden, when the view leaves room for
    // it (that depends on where the lane's cuts fell): each item is one of its facts or
    // passages, none of it about the forgotten memory.
    for item in info["recall"]["items"].as_array().into_iter().flatten() {
        let table = if item["kind"] == "fact" { "facts" } else { "passages" };
        let n = item["n"].as_u64().unwrap() as usize;
        let own = &new_export[table][n];
        assert!(!own.is_null(), "{item} is not the new memory's");
        let text = own.to_string();
        assert!(GONE_MARKS.iter().all(|m| !text.contains(m)), "{item}: {text}");
    }
    assert_eq!(block.is_some(), items(&info) > 0, "{block:?}");
    for m in GONE_MARKS.iter().chain(&["crate", "maintainer"]) {
        assert!(!sent.contains(m), "{m:?} came back from the forgotten memory:\n{sent}");
    }
    let (info, block, sent) = ask(&mut c, "keep", &keep.history, keep.now + 3600.0);
    assert!(
        items(&info) > 0 && by_meaning(&info),
        "the neighbour still recalls its own: {}",
        info["recall"]
    );
    let block = block.unwrap_or_default();
    assert!(block.contains("of keep:") || block.contains("keep fact"), "{block}");
    for m in GONE_MARKS {
        assert!(!sent.contains(m), "{m:?} came back in the neighbour:\n{sent}");
    }
    let (info, block, _) = ask(&mut c, "other", &[], 1_900_000_000.0);
    assert_eq!(items(&info), 0, "{}", info["recall"]);
    assert!(block.is_none());
    drop(c);
    assert_eq!(d.stop(), Some(0));

    // The new memory's indexes hold its own documents and nothing with the old words.
    let want = indexed_ids(&new_export);
    assert_eq!(
        held(&index, &gone_id),
        (want.clone(), want, 0),
        "indexes of the new memory of the same name"
    );
}
