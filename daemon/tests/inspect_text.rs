//! `recalld inspect`'s text, by snapshot: a fixed `inspect` reply (`tests/golden/
//! inspect_reply.json`: a real one, edited to hold an agent, a retired fact, a long note,
//! entity aliases, a decorate that cut, slept, faded and recalled many items, and a lane with
//! waiting and parked jobs) rendered and compared with `tests/golden/inspect.txt`.
//! `UPDATE_GOLDEN=1` rewrites the text; read the diff before committing it. Every line fits
//! in 80 columns, in the snapshot and with the longest names and largest numbers.

use std::path::PathBuf;

use serde_json::{json, Value};

fn golden(name: &str) -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
        .join("tests/golden")
        .join(name)
}

fn reply() -> Value {
    serde_json::from_str(&std::fs::read_to_string(golden("inspect_reply.json")).unwrap()).unwrap()
}

fn assert_fits(text: &str) {
    for line in text.lines() {
        let columns = line.chars().count();
        assert!(columns <= recalld::inspect::WIDTH, "{columns} columns: {line}");
    }
}

#[test]
fn the_text_matches_its_snapshot_and_fits_80_columns() {
    let text = recalld::inspect::render(&reply());
    let path = golden("inspect.txt");
    if std::env::var_os("UPDATE_GOLDEN").is_some_and(|v| v == "1") {
        std::fs::write(&path, &text).unwrap();
    }
    let want = std::fs::read_to_string(&path)
        .unwrap_or_else(|e| panic!("{}: {e} (run with UPDATE_GOLDEN=1 to create it)", path.display()));
    for (i, (got, want)) in text.lines().zip(want.lines()).enumerate() {
        assert_eq!(got, want, "line {} differs (UPDATE_GOLDEN=1 rewrites)", i + 1);
    }
    assert_eq!(text, want, "(UPDATE_GOLDEN=1 rewrites; full text:\n{text})");
    assert_fits(&text);
    for section in ["EPISODES", "FACTS", "ENTITIES", "DECISIONS", "LANE"] {
        assert!(text.contains(section), "{section}");
    }
}

#[test]
fn long_names_and_large_numbers_still_fit() {
    let mut r = reply();
    r["memory"] = json!("m".repeat(256));
    r["record"]["agent"] = json!("a".repeat(256));
    r["record"]["user"] = json!("u".repeat(256));
    r["record"]["turns"] = json!(u64::MAX);
    r["record"]["messages"] = json!(u64::MAX);
    r["record"]["ceiling"] = json!(u64::MAX);
    for e in r["episodes"].as_array_mut().unwrap() {
        e["first_turn"] = json!(u64::MAX - 1);
        e["last_turn"] = json!(u64::MAX);
        e["tokens"] = json!(u64::MAX);
        e["activation"] = json!(1e300);
    }
    for f in r["facts"].as_array_mut().unwrap() {
        f["subject"] = json!("s".repeat(300));
        f["object"] = json!("o".repeat(300));
        f["note"] = json!("n".repeat(3000));
        f["subject_entity"] = json!(u64::MAX);
    }
    for d in r["decisions"].as_array_mut().unwrap() {
        for key in ["turn", "request_tokens", "ceiling", "budget", "view_tokens"] {
            d[key] = json!(u64::MAX);
        }
        d["in_view"] = json!((0..200).map(|n| n * 2).collect::<Vec<u64>>());
    }
    let text = recalld::inspect::render(&r);
    assert_fits(&text);
    assert!(
        text.lines().next().unwrap().starts_with("mmmm"),
        "the name leads the header"
    );
    // A reply with nothing in it renders too.
    let empty = recalld::inspect::render(&json!({"memory": "new", "at": 0.0, "record": {}}));
    assert_fits(&empty);
    assert!(
        empty.contains("EPISODES  (none)") && empty.contains("LANE  idle"),
        "{empty}"
    );
}
