//! The OpenAI-compatible providers against a local HTTP server started by each test on
//! 127.0.0.1, answering canned replies: good answers, malformed JSON, 429/500 then success,
//! a reply slower than the timeout, bounded concurrency, usage counting.

use std::collections::VecDeque;
use std::io::{BufRead, BufReader, Read, Write};
use std::net::{TcpListener, TcpStream};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use recalld::models::{
    BoundaryScore, CallCtx, Embedder, EmbedderConfig, Judge, JudgeConfig, ModelError, NamePair, OpenAiEmbedder,
    OpenAiJudge, Provider, Relation, Usage, WalkLevel,
};
use serde_json::{json, Value};

/// One canned reply.
#[derive(Clone)]
struct Canned {
    status: u16,
    headers: Vec<(String, String)>,
    body: String,
    delay: Duration,
}

fn ok(body: Value) -> Canned {
    Canned {
        status: 200,
        headers: vec![],
        body: body.to_string(),
        delay: Duration::ZERO,
    }
}

fn status(code: u16, headers: &[(&str, &str)]) -> Canned {
    Canned {
        status: code,
        headers: headers.iter().map(|(k, v)| (k.to_string(), v.to_string())).collect(),
        body: json!({"error": {"message": "try later"}}).to_string(),
        delay: Duration::ZERO,
    }
}

/// A chat completion whose message content is `content`.
fn chat(content: &str) -> Canned {
    ok(json!({
        "id": "x", "object": "chat.completion",
        "choices": [{"index": 0, "message": {"role": "assistant", "content": content}, "finish_reason": "stop"}],
        "usage": {"prompt_tokens": 40, "completion_tokens": 2, "total_tokens": 42},
    }))
}

/// A request as the server saw it.
#[derive(Debug, Clone)]
struct Seen {
    path: String,
    authorization: Option<String>,
    body: Value,
}

struct Server {
    url: String,
    seen: Arc<Mutex<Vec<Seen>>>,
    max_in_flight: Arc<AtomicUsize>,
}

impl Server {
    /// Serve `replies` in order, one per request (a thread per connection); when they run out,
    /// the last one repeats.
    fn start(replies: Vec<Canned>) -> Server {
        let listener = TcpListener::bind("127.0.0.1:0").unwrap();
        let url = format!("http://{}/v1", listener.local_addr().unwrap());
        let queue = Arc::new(Mutex::new(VecDeque::from(replies)));
        let seen = Arc::new(Mutex::new(Vec::new()));
        let in_flight = Arc::new(AtomicUsize::new(0));
        let max_in_flight = Arc::new(AtomicUsize::new(0));
        let (s, f, m) = (seen.clone(), in_flight.clone(), max_in_flight.clone());
        std::thread::spawn(move || {
            for stream in listener.incoming() {
                let Ok(stream) = stream else { continue };
                let (queue, s, f, m) = (queue.clone(), s.clone(), f.clone(), m.clone());
                std::thread::spawn(move || {
                    let _ = serve_one(stream, &queue, &s, &f, &m);
                });
            }
        });
        Server {
            url,
            seen,
            max_in_flight,
        }
    }

    fn seen(&self) -> Vec<Seen> {
        self.seen.lock().unwrap().clone()
    }
}

/// Serves one request. `in_flight` counts requests read and not yet answered (the client's
/// concurrency: a connection still closing after its answer is not in flight).
fn serve_one(
    stream: TcpStream,
    queue: &Mutex<VecDeque<Canned>>,
    seen: &Mutex<Vec<Seen>>,
    in_flight: &AtomicUsize,
    max_in_flight: &AtomicUsize,
) -> std::io::Result<()> {
    let mut reader = BufReader::new(stream.try_clone()?);
    let mut line = String::new();
    reader.read_line(&mut line)?;
    let path = line.split_whitespace().nth(1).unwrap_or("").to_string();
    let (mut len, mut authorization) = (0usize, None);
    loop {
        let mut h = String::new();
        reader.read_line(&mut h)?;
        let h = h.trim_end();
        if h.is_empty() {
            break;
        }
        let (k, v) = h.split_once(':').unwrap_or((h, ""));
        match k.to_ascii_lowercase().as_str() {
            "content-length" => len = v.trim().parse().unwrap_or(0),
            "authorization" => authorization = Some(v.trim().to_string()),
            _ => {}
        }
    }
    let mut body = vec![0u8; len];
    reader.read_exact(&mut body)?;
    let body: Value = serde_json::from_slice(&body).unwrap_or(Value::Null);
    seen.lock().unwrap().push(Seen {
        path,
        authorization,
        body,
    });
    let reply = {
        let mut q = queue.lock().unwrap();
        if q.len() > 1 {
            q.pop_front().unwrap()
        } else {
            q.front().cloned().expect("a canned reply")
        }
    };
    let now = in_flight.fetch_add(1, Ordering::SeqCst) + 1;
    max_in_flight.fetch_max(now, Ordering::SeqCst);
    std::thread::sleep(reply.delay);
    in_flight.fetch_sub(1, Ordering::SeqCst);
    let mut out = stream;
    let mut head = format!(
        "HTTP/1.1 {} X\r\nContent-Type: application/json\r\nContent-Length: {}\r\nConnection: close\r\n",
        reply.status,
        reply.body.len()
    );
    for (k, v) in &reply.headers {
        head.push_str(&format!("{k}: {v}\r\n"));
    }
    head.push_str("\r\n");
    out.write_all(head.as_bytes())?;
    out.write_all(reply.body.as_bytes())?;
    out.flush()
}

fn judge_cfg(url: &str) -> JudgeConfig {
    JudgeConfig {
        provider: Provider::Openai,
        model: "test-judge".into(),
        base_url: url.into(),
        timeout_ms: 2_000,
        retries: 3,
        max_retry_wait_ms: 5_000,
        ..JudgeConfig::default()
    }
}

fn embed_cfg(url: &str) -> EmbedderConfig {
    EmbedderConfig {
        provider: Provider::Openai,
        model: "test-embed".into(),
        base_url: url.into(),
        dim: Some(3),
        timeout_ms: 2_000,
        ..EmbedderConfig::default()
    }
}

const CTX: CallCtx<'static> = CallCtx::new("mem-a");

#[test]
fn models_openai_embeddings_good_answer() {
    std::env::set_var("RECALLD_TEST_KEY_EMBED", "sk-test-123");
    let reply = ok(json!({
        "object": "list",
        // Out of order and not normalised: the provider must reorder and normalise.
        "data": [
            {"object": "embedding", "index": 1, "embedding": [0.0, 3.0, 4.0]},
            {"object": "embedding", "index": 0, "embedding": [2.0, 0.0, 0.0]},
        ],
        "model": "test-embed",
        "usage": {"prompt_tokens": 7, "total_tokens": 7},
    }));
    let server = Server::start(vec![reply]);
    let usage = Arc::new(Usage::default());
    let cfg = EmbedderConfig {
        api_key_env: Some("RECALLD_TEST_KEY_EMBED".into()),
        ..embed_cfg(&server.url)
    };
    let e = OpenAiEmbedder::new(&cfg, usage.clone()).unwrap();
    assert_eq!(e.id().dim, 3);
    assert_eq!(e.id().name, "test-embed");
    let v = e.embed(&CTX, &["a", ""]).unwrap();
    assert_eq!(v, vec![vec![1.0, 0.0, 0.0], vec![0.0, 0.6, 0.8]]);
    let seen = server.seen();
    assert_eq!(seen.len(), 1);
    assert_eq!(seen[0].path, "/v1/embeddings");
    assert_eq!(seen[0].authorization.as_deref(), Some("Bearer sk-test-123"));
    assert_eq!(seen[0].body["model"], "test-embed");
    assert_eq!(seen[0].body["input"], json!(["a", " "]));
    assert_eq!(usage.memory("mem-a").embed_calls, 1);
    assert_eq!(usage.memory("mem-a").embed_tokens, 7);
}

#[test]
fn models_openai_embeddings_probe_dimension_and_reject_wrong_count() {
    let server = Server::start(vec![
        ok(json!({"data": [{"index": 0, "embedding": [1.0, 0.0, 0.0, 0.0]}]})),
        ok(json!({"data": [{"index": 0, "embedding": [1.0, 0.0, 0.0, 0.0]}]})),
    ]);
    let cfg = EmbedderConfig {
        dim: None,
        ..embed_cfg(&server.url)
    };
    let e = OpenAiEmbedder::new(&cfg, Arc::new(Usage::default())).unwrap();
    assert_eq!(e.id().dim, 4);
    let err = e.embed(&CTX, &["a", "b"]).unwrap_err();
    assert!(matches!(err, ModelError::Malformed(_)), "{err}");
}

#[test]
fn models_openai_missing_api_key_env_is_a_config_error() {
    let cfg = JudgeConfig {
        api_key_env: Some("RECALLD_TEST_KEY_NOT_SET_ANYWHERE".into()),
        ..judge_cfg("http://127.0.0.1:9/v1")
    };
    let err = OpenAiJudge::new(&cfg, Arc::new(Usage::default()))
        .err()
        .expect("must fail");
    let msg = err.to_string();
    assert!(
        matches!(err, ModelError::Config(_)) && msg.contains("RECALLD_TEST_KEY_NOT_SET_ANYWHERE"),
        "{msg}"
    );
}

#[test]
fn models_openai_judge_good_answers() {
    let server = Server::start(vec![
        chat(r#"{"scores": [{"unit": 0, "first": 1.0, "last": 0.1}, {"unit": 1, "first": 0.2, "last": 0.9}]}"#),
        chat(r#"{"score": 0.8, "about": true}"#),
        chat(r#"{"levels": [{"fact": 1, "level": 0}, {"fact": 0, "level": 3}]}"#),
        chat(r#"{"keep": [2, 0, 2]}"#),
        chat("```json\n{\"relation\": \"contradicts\"}\n```"),
    ]);
    let usage = Arc::new(Usage::default());
    let j = OpenAiJudge::new(&judge_cfg(&server.url), usage.clone()).unwrap();
    assert_eq!(
        j.boundaries(&CTX, &["hello", "bye"]).unwrap(),
        vec![
            BoundaryScore { first: 1.0, last: 0.1 },
            BoundaryScore { first: 0.2, last: 0.9 }
        ]
    );
    assert_eq!(j.about(&CTX, "fact", &["passage"]).unwrap(), (0.8, true));
    assert_eq!(
        j.walk_levels(&CTX, "dialogue", &["f0", "f1"]).unwrap(),
        vec![WalkLevel::Central, WalkLevel::Unrelated]
    );
    assert_eq!(j.distill(&CTX, &["a", "b", "c"], "conversation").unwrap(), vec![0, 2]);
    assert_eq!(j.relation(&CTX, "new", "held").unwrap(), Relation::Contradicts);
    let seen = server.seen();
    assert_eq!(seen.len(), 5);
    assert!(seen
        .iter()
        .all(|s| s.path == "/v1/chat/completions" && s.authorization.is_none()));
    assert_eq!(seen[0].body["model"], "test-judge");
    assert_eq!(seen[0].body["response_format"]["type"], "json_schema");
    assert_eq!(seen[0].body["response_format"]["json_schema"]["name"], "boundaries");
    let c = usage.memory("mem-a");
    assert_eq!((c.judge_calls, c.judge_tokens, c.errors), (5, 210, 0));
    // Empty inputs need no call.
    assert!(j.boundaries(&CTX, &[]).unwrap().is_empty());
    assert_eq!(server.seen().len(), 5);
}

#[test]
fn models_openai_judge_asks_once_whether_a_fact_is_about_each_of_several_episodes() {
    // Answers out of order; the episode without passages is not asked.
    let server = Server::start(vec![chat(
        r#"{"episodes": [{"episode": 1, "score": 0.2, "about": false}, {"episode": 0, "score": 0.9, "about": true}]}"#,
    )]);
    let usage = Arc::new(Usage::default());
    let j = OpenAiJudge::new(&judge_cfg(&server.url), usage.clone()).unwrap();
    let episodes = vec![
        vec!["kayak rental closes early"],
        vec![],
        vec!["dentist moved to Friday", "bring the card"],
    ];
    assert_eq!(
        j.about_each(&CTX, "the kayak rental", &episodes).unwrap(),
        vec![(0.9, true), (0.0, false), (0.2, false)]
    );
    let seen = server.seen();
    assert_eq!(seen.len(), 1, "one call for all the episodes");
    assert_eq!(seen[0].body["response_format"]["json_schema"]["name"], "about_each");
    let prompt = seen[0].body["messages"][1]["content"].as_str().unwrap();
    assert!(
        prompt.contains("Episode 0:") && prompt.contains("Episode 1:") && !prompt.contains("Episode 2:"),
        "{prompt}"
    );
    assert!(prompt.contains("for each of the 2 episodes"), "{prompt}");
    assert_eq!(usage.memory("mem-a").judge_calls, 1);
    // A wrong count is refused, never padded (asked twice: the retry after a malformed answer).
    let server = Server::start(vec![
        chat(r#"{"episodes": [{"episode": 0, "score": 0.9, "about": true}]}"#),
        chat(r#"{"episodes": [{"episode": 0, "score": 0.9, "about": true}]}"#),
    ]);
    let j = OpenAiJudge::new(&judge_cfg(&server.url), Arc::new(Usage::default())).unwrap();
    assert!(j.about_each(&CTX, "fact", &[vec!["a"], vec!["b"]]).is_err());
}

#[test]
fn models_openai_judge_compares_a_new_fact_with_its_held_facts_in_one_call() {
    let server = Server::start(vec![chat(
        r#"{"relations": [{"fact": 2, "relation": "restates"}, {"fact": 0, "relation": "contradicts"}, {"fact": 1, "relation": "unrelated"}]}"#,
    )]);
    let j = OpenAiJudge::new(&judge_cfg(&server.url), Arc::new(Usage::default())).unwrap();
    let held = ["Mia lives in Oslo", "Mia has a dog", "Mia moved to Bergen"];
    assert_eq!(
        j.relation_each(&CTX, "Mia lives in Bergen now", &held).unwrap(),
        vec![Relation::Contradicts, Relation::Unrelated, Relation::Restates]
    );
    assert!(
        j.relation_each(&CTX, "anything", &[]).unwrap().is_empty(),
        "nothing held: no call"
    );
    let seen = server.seen();
    assert_eq!(seen.len(), 1);
    assert_eq!(seen[0].body["response_format"]["json_schema"]["name"], "relation_each");
    let prompt = seen[0].body["messages"][1]["content"].as_str().unwrap();
    assert!(
        prompt.contains("for each of the 3 held facts") && prompt.contains("Mia has a dog"),
        "{prompt}"
    );
}

#[test]
fn models_openai_judge_settles_every_close_name_of_a_job_in_one_call() {
    let server = Server::start(vec![chat(
        r#"{"pairs": [{"pair": 1, "same": false}, {"pair": 0, "same": true}]}"#,
    )]);
    let j = OpenAiJudge::new(&judge_cfg(&server.url), Arc::new(Usage::default())).unwrap();
    let (marathon, priya) = (
        vec!["the marathon".to_string()],
        vec!["Priya".to_string(), "Priya Shah".to_string()],
    );
    let pairs = [
        NamePair {
            name: "marathon race",
            fact: "Marathon race numbers are handed out on Friday.",
            held: &marathon,
        },
        NamePair {
            name: "Priya's sister",
            fact: "Priya's sister joins the charity run.",
            held: &priya,
        },
    ];
    assert_eq!(j.same_entity_each(&CTX, &pairs).unwrap(), vec![true, false]);
    assert!(j.same_entity_each(&CTX, &[]).unwrap().is_empty(), "no names: no call");
    let seen = server.seen();
    assert_eq!(seen.len(), 1);
    assert_eq!(
        seen[0].body["response_format"]["json_schema"]["name"],
        "same_entity_each"
    );
    let prompt = seen[0].body["messages"][1]["content"].as_str().unwrap();
    assert!(prompt.contains("for each of the 2 pairs"), "{prompt}");
    assert!(
        prompt.contains(r#""Priya", "Priya Shah""#) && prompt.contains("charity run"),
        "{prompt}"
    );
}

#[test]
fn models_openai_malformed_then_good_after_retry() {
    let server = Server::start(vec![
        chat("sure! the answer is restates"),
        chat(r#"{"relation": "restates"}"#),
    ]);
    let j = OpenAiJudge::new(&judge_cfg(&server.url), Arc::new(Usage::default())).unwrap();
    assert_eq!(j.relation(&CTX, "a", "b").unwrap(), Relation::Restates);
    let seen = server.seen();
    assert_eq!(seen.len(), 2);
    // The retry shows the model its bad answer and the parse error.
    let msgs = seen[1].body["messages"].as_array().unwrap();
    assert_eq!(msgs.len(), 4);
    assert_eq!(msgs[2]["content"], "sure! the answer is restates");
    assert!(
        msgs[3]["content"].as_str().unwrap().contains("not valid JSON"),
        "{}",
        msgs[3]
    );
}

#[test]
fn models_openai_wrong_shape_then_malformed_error() {
    // Valid JSON but the wrong number of entries, twice: a typed error, never a made-up answer.
    let server = Server::start(vec![
        chat(r#"{"levels": [{"fact": 0, "level": 2}]}"#),
        chat(r#"{"levels": [{"fact": 0, "level": 9}, {"fact": 1, "level": 1}]}"#),
    ]);
    let usage = Arc::new(Usage::default());
    let j = OpenAiJudge::new(&judge_cfg(&server.url), usage.clone()).unwrap();
    let err = j.walk_levels(&CTX, "d", &["a", "b"]).unwrap_err();
    assert!(matches!(err, ModelError::Malformed(_)), "{err}");
    assert!(!err.retryable());
    assert_eq!(server.seen().len(), 2);
    assert_eq!(usage.memory("mem-a").errors, 1);
}

#[test]
fn models_openai_malformed_twice_is_an_error() {
    let server = Server::start(vec![chat("not json"), chat("{still not json")]);
    let j = OpenAiJudge::new(&judge_cfg(&server.url), Arc::new(Usage::default())).unwrap();
    let err = j.about(&CTX, "fact", &["p"]).unwrap_err();
    assert!(matches!(err, ModelError::Malformed(_)), "{err}");
    assert_eq!(server.seen().len(), 2);
}

#[test]
fn models_openai_429_then_success_honours_retry_after() {
    let server = Server::start(vec![
        status(429, &[("Retry-After", "1")]),
        chat(r#"{"relation": "unrelated"}"#),
    ]);
    let j = OpenAiJudge::new(&judge_cfg(&server.url), Arc::new(Usage::default())).unwrap();
    let t = Instant::now();
    assert_eq!(j.relation(&CTX, "a", "b").unwrap(), Relation::Unrelated);
    let took = t.elapsed();
    assert!(
        took >= Duration::from_millis(950) && took < Duration::from_secs(4),
        "{took:?}"
    );
    assert_eq!(server.seen().len(), 2);
}

#[test]
fn models_openai_500_then_success() {
    let server = Server::start(vec![status(500, &[]), status(502, &[]), chat(r#"{"keep": []}"#)]);
    let j = OpenAiJudge::new(&judge_cfg(&server.url), Arc::new(Usage::default())).unwrap();
    assert_eq!(j.distill(&CTX, &["a"], "c").unwrap(), Vec::<usize>::new());
    assert_eq!(server.seen().len(), 3);
}

#[test]
fn models_openai_retries_are_bounded() {
    // Always 503: retries + 1 attempts, then the HTTP error.
    let server = Server::start(vec![status(503, &[])]);
    let cfg = JudgeConfig {
        retries: 2,
        ..judge_cfg(&server.url)
    };
    let j = OpenAiJudge::new(&cfg, Arc::new(Usage::default())).unwrap();
    let err = j.relation(&CTX, "a", "b").unwrap_err();
    assert!(matches!(err, ModelError::Http { status: 503, .. }), "{err}");
    assert!(err.retryable());
    assert_eq!(server.seen().len(), 3);
    // A Retry-After beyond the total wait cap gives up at once.
    let server = Server::start(vec![
        status(429, &[("Retry-After", "120")]),
        chat(r#"{"relation": "unrelated"}"#),
    ]);
    let j = OpenAiJudge::new(&judge_cfg(&server.url), Arc::new(Usage::default())).unwrap();
    let t = Instant::now();
    assert!(matches!(
        j.relation(&CTX, "a", "b").unwrap_err(),
        ModelError::Http { status: 429, .. }
    ));
    assert!(t.elapsed() < Duration::from_secs(2));
    // A client error is not retried.
    let server = Server::start(vec![status(400, &[])]);
    let j = OpenAiJudge::new(&judge_cfg(&server.url), Arc::new(Usage::default())).unwrap();
    assert!(matches!(
        j.relation(&CTX, "a", "b").unwrap_err(),
        ModelError::Http { status: 400, .. }
    ));
    assert_eq!(server.seen().len(), 1);
}

#[test]
fn models_openai_slow_reply_hits_the_timeout() {
    let mut slow = chat(r#"{"relation": "unrelated"}"#);
    slow.delay = Duration::from_secs(3);
    let server = Server::start(vec![slow]);
    let cfg = JudgeConfig {
        timeout_ms: 300,
        ..judge_cfg(&server.url)
    };
    let j = OpenAiJudge::new(&cfg, Arc::new(Usage::default())).unwrap();
    let t = Instant::now();
    let err = j.relation(&CTX, "a", "b").unwrap_err();
    assert!(matches!(err, ModelError::Timeout { .. }), "{err}");
    assert!(t.elapsed() < Duration::from_millis(1500), "{:?}", t.elapsed());
    assert_eq!(server.seen().len(), 1, "a timeout is not retried");
}

#[test]
fn models_openai_concurrency_is_bounded() {
    let mut slow = chat(r#"{"relation": "unrelated"}"#);
    slow.delay = Duration::from_millis(150);
    let server = Server::start(vec![slow]);
    let cfg = JudgeConfig {
        max_concurrency: 2,
        ..judge_cfg(&server.url)
    };
    let j = Arc::new(OpenAiJudge::new(&cfg, Arc::new(Usage::default())).unwrap());
    let threads: Vec<_> = (0..6)
        .map(|_| {
            let j = j.clone();
            std::thread::spawn(move || j.relation(&CallCtx::new("m"), "a", "b").unwrap())
        })
        .collect();
    for t in threads {
        assert_eq!(t.join().unwrap(), Relation::Unrelated);
    }
    assert_eq!(server.seen().len(), 6);
    let max = server.max_in_flight.load(Ordering::SeqCst);
    assert!((1..=2).contains(&max), "max in flight {max}");
}

#[test]
fn models_openai_judge_extracts_facts_and_refuses_unknown_kinds() {
    let server = Server::start(vec![
        chat(
            r#"{"facts": [{"note": "Alex's staging database is in Sydney.", "subject": "staging database", "object": "Sydney", "kind": "environment"}]}"#,
        ),
        chat(r#"{"facts": []}"#),
        chat(r#"{"facts": [{"note": "x", "subject": "a", "object": "b", "kind": "gossip"}]}"#),
    ]);
    let usage = Arc::new(Usage::default());
    let j = OpenAiJudge::new(&judge_cfg(&server.url), usage).unwrap();
    let facts = j
        .extract(&CTX, "user: staging lives in Sydney now\nassistant: noted")
        .unwrap();
    assert_eq!(facts.len(), 1);
    assert_eq!(
        (facts[0].kind.as_str(), facts[0].object.as_str()),
        ("environment", "Sydney")
    );
    assert!(j.extract(&CTX, "user: thanks\nassistant: bye").unwrap().is_empty());
    // A kind outside the list is malformed (asked again, then an error): never stored as is.
    assert!(matches!(j.extract(&CTX, "user: gossip"), Err(ModelError::Malformed(_))));
    assert_eq!(
        server.seen()[0].body["response_format"]["json_schema"]["name"],
        "extract"
    );
    // Nothing to read needs no call.
    assert!(j.extract(&CTX, "  ").unwrap().is_empty());
    assert_eq!(server.seen().len(), 4);
}
