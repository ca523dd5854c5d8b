//! The replay's scoring on a tiny hand-made LoCoMo-format file: presence by view, excerpt and
//! fact; malformed and unknown evidence ids; baselines at a given token count; and one replay
//! through a real daemon (`$RECALLD_BIN`, else `target/debug/recalld`: `cargo build -p recalld`).

use crate::common;

use std::path::PathBuf;
use std::sync::Arc;

use recalld::client::Client;
use recalld_bench::baselines::{self, Rankings};
use recalld_bench::evaluate::evaluate;
use recalld_bench::locomo::{self, Conversation};
use recalld_bench::replay::{self, system_prompt, Ask, Asked, Options};
use recalld_bench::score::{message_tokens, request_tokens, RequestText, Scorer};
use recalld_bench::table::Table;
use serde_json::{json, Value};

fn tiny() -> Value {
    json!([{
        "sample_id": "tiny",
        "conversation": {
            "speaker_a": "Ann", "speaker_b": "Bob",
            "session_1_date_time": "1:00 pm on 1 May, 2023",
            "session_1": [
                {"speaker": "Ann", "dia_id": "D1:1", "text": "I adopted a cat named Pixel last week."},
                {"speaker": "Bob", "dia_id": "D1:2", "text": "Pixel is a great name! What color is she?"},
                {"speaker": "Ann", "dia_id": "D1:3", "text": "She is grey with white paws.",
                 "img_url": ["x"], "blip_caption": "a grey cat on a sofa"},
                {"speaker": "Bob", "dia_id": "D1:4", "text": "Lovely. I started learning the cello."}
            ],
            "session_2_date_time": "3:00 pm on 10 May, 2023",
            "session_2": [
                {"speaker": "Bob", "dia_id": "D2:1", "text": "How is Pixel doing?"},
                {"speaker": "Ann", "dia_id": "D2:2", "text": "She knocked my plant over. I'm moving to Lisbon in June."},
                {"speaker": "Bob", "dia_id": "D2:3", "text": "Lisbon! Big news."}
            ],
            "session_3_date_time": "9:00 am on 12 May, 2023"
        },
        "observation": {
            "session_1_observation": {
                "Ann": [["Ann adopted a cat named Pixel.", "D1:1"], ["Pixel is grey with white paws.", ["D1:3"]]],
                "Bob": [["Bob started learning the cello.", "D1:4"]]
            },
            "session_2_observation": {"Ann": [["Ann is moving to Lisbon in June.", "D2:2"]]}
        },
        "qa": [
            {"question": "What is the name of Ann's cat?", "answer": "Pixel", "evidence": ["D1:1"], "category": 4},
            {"question": "What does Bob play, and where is Ann moving?", "answer": "cello; Lisbon",
             "evidence": ["D1:4; D2:2"], "category": 1},
            {"question": "When is Ann moving?", "answer": "June", "evidence": ["D:2:02"], "category": 2},
            {"question": "What is Bob's cat called?", "adversarial_answer": "Pixel", "evidence": ["D1:2"], "category": 5},
            {"question": "Anything?", "answer": "", "evidence": [], "category": 3},
            {"question": "Ghost?", "answer": "", "evidence": ["D9:9"], "category": 4}
        ]
    }])
}

fn conv() -> Conversation {
    locomo::parse_sample(&tiny()[0]).unwrap()
}

fn msg(role: &str, text: &str) -> Value {
    json!({"role": role, "content": text})
}

#[test]
fn the_file_is_read_as_written() {
    let c = conv();
    assert_eq!(c.sessions.len(), 2, "a date without turns is no session");
    assert_eq!(c.turns().count(), 7);
    let t3 = c.turns().nth(2).unwrap();
    assert_eq!(t3.text, "She is grey with white paws. [shares a grey cat on a sofa]");
    assert!(t3.by_a && !c.turns().nth(1).unwrap().by_a);
    let ev: Vec<&[String]> = c.questions.iter().map(|q| q.evidence.as_slice()).collect();
    assert_eq!(ev[1], ["D1:4", "D2:2"]);
    assert_eq!(ev[2], ["D2:2"]);
    assert!(
        ev[4].is_empty() && ev[5].is_empty(),
        "no evidence, or none naming a turn"
    );
    assert_eq!(c.observations.len(), 4);
    assert_eq!(c.sessions[1].at - c.sessions[0].at, 9.0 * 86_400.0 + 7_200.0);
}

#[test]
fn presence_by_view_excerpt_and_fact() {
    let c = conv();
    let s = Scorer::new(&c);
    let request = json!({"messages": [
        msg("system", &system_prompt(&c)),
        msg("system", "Recorded facts from compacted history.\n- Bob started learning the cello. [Bob]"),
        msg("user", "I adopted a cat named Pixel last week."),
        msg("system", "Conversation excerpts:\n- [Turn 5] She knocked my plant over. I'm moving to Lisbon in June.\n"),
        // A turn's text inside a longer user message is not that turn in view.
        msg("user", "How is Pixel doing? What is the name of Ann's cat?"),
    ]});
    let r = RequestText::of(&request);
    assert_eq!(s.presence("D1:1", &r), Some("view"));
    assert_eq!(s.presence("D1:4", &r), Some("fact"));
    assert_eq!(s.presence("D2:2", &r), Some("excerpt"));
    assert_eq!(s.presence("D1:3", &r), None);
    assert_eq!(s.presence("D2:1", &r), None);
    assert_eq!(s.presence("D7:7", &r), None, "an unknown turn is never present");
    let ids = |v: &[&str]| v.iter().map(|d| d.to_string()).collect::<Vec<_>>();
    assert_eq!(s.availability(&ids(&["D1:4", "D2:2"]), &r), Some(1.0));
    assert_eq!(s.availability(&ids(&["D1:3", "D1:1"]), &r), Some(0.5));
    assert_eq!(s.availability(&ids(&["D1:3", "D2:1", "D1:2"]), &r), Some(0.0));
    assert_eq!(s.availability(&[], &r), None);
    // Tokens: cl100k of each message's text plus 4.
    let total: u64 = request["messages"]
        .as_array()
        .unwrap()
        .iter()
        .map(|m| message_tokens(m["content"].as_str().unwrap()))
        .sum();
    assert_eq!(request_tokens(&request), total);
}

fn model_dir() -> PathBuf {
    match std::env::var_os("RECALLD_MODEL_DIR") {
        Some(d) if !d.is_empty() => PathBuf::from(d),
        _ => PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../models/all-MiniLM-L6-v2"),
    }
}

fn rankings(c: &Conversation) -> Rankings {
    let embedder = recalld::models::MiniLm::load(&model_dir(), 8, Arc::new(recalld::models::Usage::default())).unwrap();
    let scratch = tempfile::tempdir().unwrap();
    baselines::rank(c, &embedder, scratch.path()).unwrap()
}

#[test]
fn baselines_get_recallds_token_count_and_are_scored_alike() {
    let c = conv();
    let r = rankings(&c);
    // BM25 and dense both put the Lisbon turn first for a Lisbon question.
    assert_eq!(r.bm25[2][0], 5, "bm25 ranking {:?}", r.bm25[2]);
    assert_eq!(r.dense[1].len(), 7);
    let q = &c.questions[0];
    let system = system_prompt(&c);
    let fixed = message_tokens(&system) + message_tokens(&q.text);
    // recalld held only the longest turn, so any single turn fits in the baselines' room; the
    // recency window at that size holds no turn of session 1.
    let last = c.turns().max_by_key(|t| message_tokens(&t.text)).unwrap().text.clone();
    let request = json!({"messages": [msg("system", &system), msg("assistant", &last), msg("user", &q.text)]});
    let tokens = request_tokens(&request);
    assert_eq!(tokens, fixed + message_tokens(&last));
    let asked = vec![Asked {
        question: 0,
        said: c.turns().count(),
        request,
        tokens,
        recall: Value::Null,
    }];
    let mut table = Table::default();
    let details = evaluate(&c, &r, &asked, 200_000, &mut table);
    let cat = 4;
    let score = |s: &str| table.mean(s, cat).unwrap();
    assert_eq!(score("recalld").availability, 0.0);
    assert_eq!(score("recency").availability, 0.0);
    assert!(score("recency").tokens <= tokens, "at most recalld's token count");
    // One turn's room: dense takes its best-ranked turn (which one is the model's call; MiniLM
    // ranks the grey-cat turn above the cat's name for this question).
    let best_is_evidence = r.dense[0][0] == 0;
    assert_eq!(
        score("dense turns").availability,
        if best_is_evidence { 1.0 } else { 0.0 },
        "{}",
        details[0]
    );
    assert!(score("dense turns").tokens <= tokens);
    // The full context at a 200k ceiling holds everything.
    assert_eq!(score("full context").availability, 1.0);
    assert_eq!(details[0]["full context"]["evidence"]["D1:1"], "view");
    assert_eq!(table.count("recalld", 0), 1);
}

#[test]
fn a_replay_through_the_daemon_holds_everything_at_200k_and_repeats_exactly() {
    let bin = common::recalld_bin();
    let dir = tempfile::tempdir().unwrap();
    let socket = dir.path().join("s.sock");
    let child = std::process::Command::new(&bin)
        .args(["serve", "--socket"])
        .arg(&socket)
        .arg("--data")
        .arg(dir.path().join("data"))
        .env("RECALLD_LOG", "warn")
        .env("RECALLD_MODEL_DIR", model_dir())
        .env_remove("RECALLD_CONFIG")
        .spawn()
        .unwrap();
    let _stop = Stop(child);
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(60);
    while std::os::unix::net::UnixStream::connect(&socket).is_err() {
        assert!(std::time::Instant::now() < deadline, "daemon did not start");
        std::thread::sleep(std::time::Duration::from_millis(20));
    }
    let c = conv();
    let r = rankings(&c);
    let o = Options {
        ceiling: 200_000,
        ..Options::default()
    };
    let mut tables = Vec::new();
    for run in 0..2 {
        let mut client = Client::connect(&socket).unwrap();
        let (asked, stats) = replay::replay(&mut client, &c, &format!("tiny{run}"), &o, &mut |_| {}).unwrap();
        assert_eq!(asked.len(), 3, "categories 1-4 with evidence naming a turn");
        assert_eq!((stats.decorates, stats.reports, stats.note_calls), (4, 4, 0));
        assert_eq!(stats.quiet_timeouts, 0);
        let mut table = Table::default();
        let details = evaluate(&c, &r, &asked, o.ceiling, &mut table);
        for d in &details {
            assert_eq!(d["recalld"]["availability"], 1.0, "everything is in view at 200k: {d}");
        }
        // The question was asked as a dry run: the memory did not keep it.
        let export = client.call("export", json!({"memory": format!("tiny{run}")})).unwrap();
        assert_eq!(export["messages"].as_array().unwrap().len(), 7);
        tables.push(table.markdown(o.ceiling));
    }
    assert_eq!(tables[0], tables[1], "a replay gives the same table twice");

    // Asked right after the session holding their last evidence turn: each question once, with
    // the turns said by then, and nothing kept.
    let o = Options {
        ask: Ask::AfterEvidence,
        ..o
    };
    let mut client = Client::connect(&socket).unwrap();
    let (asked, _) = replay::replay(&mut client, &c, "tiny-after", &o, &mut |_| {}).unwrap();
    let sessions = replay::last_evidence_session(&c);
    assert_eq!(asked.len(), 3);
    for a in &asked {
        let last = sessions[a.question].unwrap();
        let said: usize = c.sessions[..=last].iter().map(|s| s.turns.len()).sum();
        assert_eq!(a.said, said, "question {}", a.question);
    }
    assert!(
        asked.iter().any(|a| a.said < c.turns().count()),
        "one asked before the end"
    );
    let export = client.call("export", json!({"memory": "tiny-after"})).unwrap();
    assert_eq!(export["messages"].as_array().unwrap().len(), 7);
}

/// Stops the daemon this test started, whatever happens.
struct Stop(std::process::Child);

impl Drop for Stop {
    fn drop(&mut self) {
        // SAFETY: kill(2) on our own child's pid.
        unsafe { libc::kill(self.0.id() as i32, libc::SIGTERM) };
        let _ = self.0.wait();
    }
}
