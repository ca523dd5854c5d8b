//! `inspect` and `memories` through the real socket, and `recalld inspect` run as a process: a
//! conversation long enough that episodes fade, over hours of injected time.

use crate::convo;
use crate::util;

use std::process::Command;

use convo::Convo;
use recalld::client::Client;
use serde_json::{json, Value};
use util::{bin, code, Daemon};

/// Time between turns: the conversation spans a day, so activation decays between them.
const HALF_HOUR: f64 = 1800.0;
const DAY: f64 = 86_400.0;

fn inspect(c: &mut Client, args: Value) -> Value {
    c.call("inspect", args).unwrap()
}

fn list(v: &Value) -> &Vec<Value> {
    v.as_array().unwrap_or_else(|| panic!("not a list: {v}"))
}

fn nums(v: &Value) -> Vec<u64> {
    list(v).iter().map(|n| n.as_u64().unwrap()).collect()
}

/// A conversation of `turns` turns, half an hour apart; returns each decorate's `info`.
fn talk(c: &mut Client, convo: &mut Convo, turns: usize) -> Vec<Value> {
    let mut infos = Vec::new();
    for _ in 0..turns {
        infos.push(convo.decorate(c).unwrap()["info"].clone());
        convo.report(c).unwrap();
        convo.now += HALF_HOUR;
    }
    infos
}

#[test]
fn inspect_shows_what_faded_and_the_decisions_and_changes_nothing() {
    let d = Daemon::start();
    let mut c = d.client();
    let mut convo = Convo::new("talk");
    convo.ceiling = 2000;
    let infos = talk(&mut c, &mut convo, 40);
    convo::drain(&mut c);
    let end = convo.now;
    let before = c.call("export", json!({"memory": "talk"})).unwrap();

    let now = inspect(&mut c, json!({"memory": "talk", "at": end}));
    let week = inspect(&mut c, json!({"memory": "talk", "at": end + 7.0 * DAY}));
    let with_turns = inspect(
        &mut c,
        json!({"memory": "talk", "at": end, "turns": [3, 4], "decisions": 32}),
    );
    assert_eq!(
        c.call("export", json!({"memory": "talk"})).unwrap(),
        before,
        "inspect changes nothing stored"
    );

    // The record and the episodes, live and out of view.
    assert_eq!(now["memory"], "talk");
    assert_eq!(now["at"], end);
    assert_eq!(now["record"]["turns"], 40);
    assert_eq!(now["record"]["messages"], list(&before["messages"]).len());
    assert_eq!(now["record"]["ceiling"], convo.ceiling);
    let episodes = list(&now["episodes"]);
    assert_eq!(episodes.len(), list(&before["episodes"]).len(), "under 200: all listed");
    assert_eq!(now["episodes_omitted"], 0);
    let states: Vec<&str> = episodes.iter().map(|e| e["state"].as_str().unwrap()).collect();
    assert!(states.contains(&"live"), "{states:?}");
    assert!(
        states.iter().any(|s| *s == "sealed" || *s == "forgotten"),
        "episodes faded: {states:?}"
    );
    for (e, stored) in episodes.iter().zip(list(&before["episodes"])) {
        for key in [
            "n",
            "state",
            "first_turn",
            "last_turn",
            "first_seq",
            "last_seq",
            "tokens",
            "facts",
        ] {
            assert_eq!(e[key], stored[key], "episode {} {key}", e["n"]);
        }
        let traces = list(&e["traces"]);
        assert_eq!(traces[0]["kind"], "encoding");
    }

    // Activation as of `at`: an old episode is less active a week later, never negative; its
    // curve runs from its encoding to `at`, log-spaced, and ends at its activation.
    let old = &episodes[0];
    let (a_now, a_week) = (
        old["activation"].as_f64().unwrap(),
        week["episodes"][0]["activation"].as_f64().unwrap(),
    );
    assert!(a_week > 0.0 && a_week < a_now, "{a_week} a week later, {a_now} now");
    assert_eq!(
        week["episodes"][0]["significance"], old["significance"],
        "significance never fades"
    );
    let curve = list(&old["curve"]);
    assert!(curve.len() >= 48, "{} points", curve.len());
    let point = |p: &Value| (p[0].as_f64().unwrap(), p[1].as_f64().unwrap());
    let (t0, a0) = point(&curve[0]);
    let (tn, an) = point(curve.last().unwrap());
    assert_eq!(t0, old["at"].as_f64().unwrap());
    assert!(a0 >= 1.0, "the encoding counts in full at first: {a0}");
    assert_eq!((tn, an), (end, a_now));
    let gaps: Vec<f64> = curve.windows(2).map(|w| point(&w[1]).0 - point(&w[0]).0).collect();
    assert!(gaps.iter().all(|g| *g > 0.0));
    // Log-spaced (the steps at traces aside): the gaps grow from a minute to hours.
    let spaced: Vec<f64> = gaps.iter().copied().filter(|g| *g >= 1.0).collect();
    assert!(spaced[0] * 10.0 < *spaced.last().unwrap(), "{gaps:?}");
    // Facts carry their activation as of `at` too.
    let facts = list(&now["facts"]);
    assert_eq!(facts.len(), list(&before["facts"]).len());
    assert!(facts.iter().all(|f| f["activation"].as_f64().unwrap() > 0.0));

    // Decisions: the latest 32 kept, 8 by default, newest last, each what its decorate's
    // `info` said.
    assert_eq!(now["decisions_kept"], 32);
    assert_eq!(list(&before["decisions"]).len(), 32, "export has them");
    let ds = list(&now["decisions"]);
    assert_eq!(ds.len(), 8);
    let all = list(&with_turns["decisions"]);
    assert_eq!(all.len(), 32);
    let turns: Vec<u64> = all.iter().map(|d| d["turn"].as_u64().unwrap()).collect();
    assert_eq!(turns, (9..=40).collect::<Vec<_>>(), "one per decorate, newest last");
    assert_eq!(&all[24..], &ds[..]);
    for (d, info) in all.iter().zip(&infos[8..]) {
        for key in [
            "ceiling",
            "budget",
            "fixed",
            "room",
            "landing",
            "view_tokens",
            "request_tokens",
            "hidden_for_ceiling",
            "hidden_for_recall",
            "note_ask",
            "turn",
            "cut",
        ] {
            assert_eq!(d[key], info[key], "turn {}: {key}", d["turn"]);
        }
        // The episodes in view hold exactly the request's stored messages that belong to one.
        let in_view = nums(&d["in_view"]);
        let seqs = nums(&info["in_view"]);
        let episode_of = |seq: u64| {
            list(&before["episodes"])
                .iter()
                .find(|e| e["first_seq"].as_u64().unwrap() <= seq && seq <= e["last_seq"].as_u64().unwrap())
                .map(|e| e["n"].as_u64().unwrap())
        };
        // Episodes the lane cut later are not the decorate's.
        let existed = list(&info["episodes"]).len() as u64 + info["episodes_omitted"].as_u64().unwrap();
        let mut held: Vec<u64> = seqs
            .iter()
            .filter_map(|s| episode_of(*s))
            .filter(|n| *n < existed)
            .collect();
        held.dedup();
        assert_eq!(in_view, held, "turn {}", d["turn"]);
        match (&d["recall"], &info["recall"]) {
            (Value::Null, _) => assert!(info["recall"].get("ms").is_none(), "turn {}", d["turn"]),
            (r, i) => {
                for key in ["tokens", "relevant", "best_cosine"] {
                    assert_eq!(r[key], i[key], "turn {}: recall {key}", d["turn"]);
                }
                let items: Vec<(&Value, &Value)> = list(&r["items"]).iter().map(|x| (&x["kind"], &x["n"])).collect();
                let want: Vec<(&Value, &Value)> = i["items"]
                    .as_array()
                    .map(|v| v.iter().map(|x| (&x["kind"], &x["n"])).collect())
                    .unwrap_or_default();
                assert_eq!(items, want, "turn {}", d["turn"]);
            }
        }
    }
    let moved: usize = all
        .iter()
        .map(|d| list(&d["faded"]).len() + list(&d["leaving"]).len() + list(&d["forgotten"]).len())
        .sum();
    assert!(moved > 0, "some decorate moved an episode");
    assert!(
        all.iter().any(|d| !d["recall"].is_null()),
        "recall searched for some message"
    );

    // A dry run decides nothing that is kept; more decorates keep 32, dropping the oldest.
    let mut dry = convo.history.clone();
    dry.push(json!({"role": "user", "content": "only trying"}));
    c.call(
        "decorate",
        json!({"memory": "talk", "dry_run": true, "now": convo.now,
               "request": {"model": "gpt-4o", "messages": dry}}),
    )
    .unwrap();
    let after_dry = inspect(&mut c, json!({"memory": "talk", "decisions": 1}));
    assert_eq!(after_dry["decisions"][0], ds[7], "the dry run left no decision");
    talk(&mut c, &mut convo, 2);
    let after = inspect(&mut c, json!({"memory": "talk", "decisions": 32}));
    assert_eq!(after["decisions_kept"], 32);
    let turns: Vec<u64> = list(&after["decisions"])
        .iter()
        .map(|d| d["turn"].as_u64().unwrap())
        .collect();
    assert_eq!(turns, (11..=42).collect::<Vec<_>>());

    // The messages of the turns asked for, and only those.
    let messages = list(&with_turns["messages"]);
    assert!(
        messages.iter().all(|m| m["turn"] == 3 || m["turn"] == 4),
        "{messages:?}"
    );
    let texts: Vec<&str> = messages.iter().map(|m| m["text"].as_str().unwrap()).collect();
    for turn in [3, 4] {
        assert!(
            texts.contains(&convo.user_text(turn).as_str()),
            "turn {turn}: {texts:?}"
        );
        assert!(texts.contains(&format!("Noted turn {turn} for talk.").as_str()));
    }
    assert!(now.get("messages").is_none(), "no messages unless turns are asked for");

    // Bad arguments and unknown memories.
    assert_eq!(code(c.call("inspect", json!({"memory": "nobody"}))), "not_found");
    for bad in [
        json!({"memory": "talk", "decisions": 33}),
        json!({"memory": "talk", "turns": [5, 3]}),
        json!({"memory": "talk", "turns": [5]}),
        json!({"memory": "talk", "at": -1.0}),
    ] {
        assert_eq!(code(c.call("inspect", bad.clone())), "invalid_argument", "{bad}");
    }

    // forget_memory's receipt counts the decisions.
    let receipt = c.call("forget_memory", json!({"memory": "talk"})).unwrap();
    assert_eq!(receipt["removed"]["decisions"], 32);
}

#[test]
fn memories_lists_the_callers_own_from_their_records() {
    let d = Daemon::start();
    let mut c = d.client();
    let mut b = Convo::new("b-talk");
    talk(&mut c, &mut b, 3);
    let mut a = Convo::new("a-talk");
    talk(&mut c, &mut a, 2);
    let reply = c.call("memories", json!({})).unwrap();
    let ms = list(&reply["memories"]);
    let names: Vec<&str> = ms.iter().map(|m| m["memory"].as_str().unwrap()).collect();
    assert_eq!(names, ["a-talk", "b-talk"], "named as the caller names them, in order");
    let export = c.call("export", json!({"memory": "b-talk"})).unwrap();
    let m = &ms[1];
    assert_eq!(m["turns"], 3);
    assert_eq!(m["messages"], list(&export["messages"]).len());
    assert_eq!(m["episodes"], list(&export["episodes"]).len());
    assert_eq!(m["facts"], list(&export["facts"]).len());
    assert_eq!(m["last_at"], export["record"]["updated_at"]);
    assert_eq!(m["agent"], Value::Null);
    // Another uid's memories are not listed: see peers.rs (needs root).

    // Both ops are served and counted by name.
    let caps = c.call("hello", json!({})).unwrap()["capabilities"].clone();
    for op in ["inspect", "memories"] {
        assert!(list(&caps).contains(&json!(op)), "{op} in {caps}");
    }
    c.call("inspect", json!({"memory": "a-talk"})).unwrap();
    let metrics = c.call("metrics", json!({})).unwrap();
    assert_eq!(metrics["requests"]["memories"]["count"], 1);
    assert_eq!(metrics["requests"]["inspect"]["count"], 1);
}

#[test]
fn recalld_inspect_prints_the_memory_in_80_columns() {
    let d = Daemon::start();
    let mut c = d.client();
    let mut convo = Convo::new("cli");
    talk(&mut c, &mut convo, 12);
    convo::drain(&mut c);
    let run = |args: &[&str]| {
        let out = Command::new(bin())
            .arg("inspect")
            .args(args)
            .arg("--socket")
            .arg(&d.socket)
            .env_remove("RECALLD_CONFIG")
            .output()
            .unwrap();
        (
            out.status.code(),
            String::from_utf8(out.stdout).unwrap(),
            String::from_utf8_lossy(&out.stderr).into_owned(),
        )
    };
    let (status, text, err) = run(&["cli", "--at", "2023-11-15T12:00:00Z"]);
    assert_eq!(status, Some(0), "{err}");
    let first = text.lines().next().unwrap();
    assert!(first.starts_with("cli · 12 turns · "), "{text}");
    assert!(first.contains("ceiling 4,000"), "{first}");
    assert!(text.contains("as of 2023-11-15 12:00 UTC"), "{text}");
    for section in ["EPISODES", "FACTS", "DECISIONS  (last 8 of 12 kept)", "LANE"] {
        assert!(text.contains(section), "{section} in:\n{text}");
    }
    for line in text.lines() {
        assert!(line.chars().count() <= 80, "{} columns: {line}", line.chars().count());
    }
    let (status, json_text, err) = run(&["cli", "--json", "--decisions", "2", "--at", "1700000000"]);
    assert_eq!(status, Some(0), "{err}");
    let reply: Value = serde_json::from_str(&json_text).unwrap();
    assert_eq!(reply["memory"], "cli");
    assert_eq!(reply["at"], 1_700_000_000.0);
    assert_eq!(list(&reply["decisions"]).len(), 2);
    let (status, _, err) = run(&["nobody"]);
    assert_eq!(status, Some(1));
    assert!(err.contains("not_found"), "{err}");
    let (status, _, err) = run(&["cli", "--at", "tomorrow"]);
    assert_eq!(status, Some(2));
    assert!(err.contains("--at"), "{err}");
}
