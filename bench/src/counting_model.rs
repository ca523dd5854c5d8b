//! A local OpenAI-compatible endpoint that counts what it is asked (the load mode's cost run):
//! `/v1/embeddings` answers every input with a vector made from its words, and
//! `/v1/chat/completions` answers each of the judge's tasks (named by its `json_schema`) with
//! a valid, neutral verdict: mid scores, no facts, "unrelated". Each reply carries `usage`
//! (about four characters a token), as a real provider's does, so the daemon's `stats` and this
//! endpoint's own count can be compared.

use std::collections::BTreeMap;
use std::io::{BufRead, BufReader, Read, Write};
use std::net::{TcpListener, TcpStream};
use std::sync::{Arc, Mutex};

use serde::Serialize;
use serde_json::{json, Value};

/// The vector size the endpoint answers with (the daemon is told, so it does not probe).
pub const DIM: usize = 64;

/// Calls and tokens one path was asked for.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize)]
pub struct Count {
    pub calls: u64,
    pub prompt_tokens: u64,
    pub completion_tokens: u64,
}

/// The endpoint, serving until dropped (its thread ends with the process).
pub struct CountingModel {
    pub base_url: String,
    counts: Arc<Mutex<BTreeMap<String, Count>>>,
}

impl CountingModel {
    pub fn start() -> Result<CountingModel, String> {
        let listener = TcpListener::bind("127.0.0.1:0").map_err(|e| format!("counting endpoint: {e}"))?;
        let port = listener.local_addr().map_err(|e| e.to_string())?.port();
        let counts: Arc<Mutex<BTreeMap<String, Count>>> = Arc::default();
        let shared = counts.clone();
        std::thread::spawn(move || {
            for stream in listener.incoming().flatten() {
                let counts = shared.clone();
                std::thread::spawn(move || {
                    let _ = serve(stream, &counts);
                });
            }
        });
        Ok(CountingModel {
            base_url: format!("http://127.0.0.1:{port}/v1"),
            counts,
        })
    }

    /// Per path (`embeddings`, `chat/completions <task>`), what was asked so far.
    pub fn counts(&self) -> BTreeMap<String, Count> {
        self.counts.lock().unwrap_or_else(|e| e.into_inner()).clone()
    }

    /// The daemon's `[models]` section pointing both models here.
    pub fn models_toml(&self) -> String {
        format!(
            "[models.embedder]\nprovider = \"openai\"\nbase_url = \"{0}\"\nmodel = \"counting-embedder\"\ndim = {DIM}\n\n\
             [models.judge]\nprovider = \"openai\"\nbase_url = \"{0}\"\nmodel = \"counting-judge\"\n",
            self.base_url
        )
    }
}

fn tokens(chars: usize) -> u64 {
    (chars as u64).div_ceil(4)
}

/// Answers requests on one connection until the client closes it (keep-alive).
fn serve(stream: TcpStream, counts: &Mutex<BTreeMap<String, Count>>) -> std::io::Result<()> {
    let mut reader = BufReader::new(stream.try_clone()?);
    let mut out = stream;
    loop {
        let mut line = String::new();
        if reader.read_line(&mut line)? == 0 {
            return Ok(());
        }
        let path = line.split_whitespace().nth(1).unwrap_or("").to_owned();
        let mut length = 0usize;
        loop {
            let mut header = String::new();
            reader.read_line(&mut header)?;
            let header = header.trim_end();
            if header.is_empty() {
                break;
            }
            if let Some((k, v)) = header.split_once(':') {
                if k.eq_ignore_ascii_case("content-length") {
                    length = v.trim().parse().unwrap_or(0);
                }
            }
        }
        let mut body = vec![0u8; length];
        reader.read_exact(&mut body)?;
        let request: Value = serde_json::from_slice(&body).unwrap_or(Value::Null);
        let (key, reply, count) = answer(&path, &request);
        {
            let mut g = counts.lock().unwrap_or_else(|e| e.into_inner());
            let c = g.entry(key).or_default();
            c.calls += 1;
            c.prompt_tokens += count.prompt_tokens;
            c.completion_tokens += count.completion_tokens;
        }
        let text = reply.to_string();
        write!(
            out,
            "HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nContent-Length: {}\r\n\r\n{text}",
            text.len()
        )?;
        out.flush()?;
    }
}

/// The reply to one request, what it is counted under, and its tokens.
fn answer(path: &str, request: &Value) -> (String, Value, Count) {
    if path.ends_with("/embeddings") {
        let inputs: Vec<String> = match &request["input"] {
            Value::String(s) => vec![s.clone()],
            Value::Array(a) => a.iter().map(|v| v.as_str().unwrap_or("").to_owned()).collect(),
            _ => Vec::new(),
        };
        let prompt = inputs.iter().map(|t| tokens(t.len())).sum();
        let data: Vec<Value> = inputs
            .iter()
            .enumerate()
            .map(|(i, t)| json!({"object": "embedding", "index": i, "embedding": word_vector(t)}))
            .collect();
        let reply = json!({"object": "list", "data": data, "model": "counting-embedder",
            "usage": {"prompt_tokens": prompt, "total_tokens": prompt}});
        return (
            "embeddings".into(),
            reply,
            Count {
                calls: 1,
                prompt_tokens: prompt,
                completion_tokens: 0,
            },
        );
    }
    let task = request["response_format"]["json_schema"]["name"]
        .as_str()
        .unwrap_or("unnamed")
        .to_owned();
    let prompt_chars: usize = request["messages"]
        .as_array()
        .into_iter()
        .flatten()
        .map(|m| m["content"].as_str().map_or(0, str::len))
        .sum();
    let user = request["messages"]
        .as_array()
        .and_then(|m| m.last())
        .and_then(|m| m["content"].as_str())
        .unwrap_or("");
    let content = verdict(&task, user).to_string();
    let (prompt, completion) = (tokens(prompt_chars), tokens(content.len()));
    let reply = json!({"id": "counting", "object": "chat.completion", "model": "counting-judge",
        "choices": [{"index": 0, "finish_reason": "stop", "message": {"role": "assistant", "content": content}}],
        "usage": {"prompt_tokens": prompt, "completion_tokens": completion, "total_tokens": prompt + completion}});
    (
        format!("chat/completions {task}"),
        reply,
        Count {
            calls: 1,
            prompt_tokens: prompt,
            completion_tokens: completion,
        },
    )
}

/// A neutral, valid answer to one of the judge's tasks; per-item tasks answer as many items as
/// the prompt's closing line says ("… for each of the N units"; the last such phrase: the
/// units' own text may hold the words).
fn verdict(task: &str, user: &str) -> Value {
    let n = user
        .rsplit_once("for each of the ")
        .and_then(|(_, rest)| rest.split_whitespace().next())
        .and_then(|n| n.parse::<usize>().ok())
        .unwrap_or(0);
    match task {
        "boundaries" => {
            json!({"scores": (0..n).map(|i| json!({"unit": i, "first": 0.5, "last": 0.5})).collect::<Vec<_>>()})
        }
        "about" => json!({"score": 0.5, "about": true}),
        "about_each" => {
            json!({"episodes": (0..n).map(|i| json!({"episode": i, "score": 0.5, "about": true})).collect::<Vec<_>>()})
        }
        "walk_levels" => json!({"levels": (0..n).map(|i| json!({"fact": i, "level": 1})).collect::<Vec<_>>()}),
        "distill" => json!({"keep": []}),
        "extract" => json!({"facts": []}),
        "relation" => json!({"relation": "unrelated"}),
        "relation_each" => {
            json!({"relations": (0..n).map(|i| json!({"fact": i, "relation": "unrelated"})).collect::<Vec<_>>()})
        }
        "same_entity_each" => json!({"pairs": (0..n).map(|i| json!({"pair": i, "same": false})).collect::<Vec<_>>()}),
        _ => json!({}),
    }
}

/// A unit vector from the text's words (alike texts alike), [`DIM`] wide.
fn word_vector(text: &str) -> Vec<f32> {
    let mut v = vec![0f32; DIM];
    for w in text.split(|c: char| !c.is_alphanumeric()).filter(|w| !w.is_empty()) {
        let h = w
            .to_lowercase()
            .bytes()
            .fold(2_166_136_261u32, |h, b| (h ^ u32::from(b)).wrapping_mul(16_777_619));
        v[h as usize % DIM] += 1.0;
    }
    let norm = v.iter().map(|x| x * x).sum::<f32>().sqrt();
    if norm > 0.0 {
        v.iter_mut().for_each(|x| *x /= norm);
    } else {
        v[0] = 1.0;
    }
    v
}
