//! The OpenAI-compatible providers: embeddings via `POST {base_url}/embeddings`, judgments via
//! `POST {base_url}/chat/completions` with JSON output. Works with OpenAI, vLLM, llama.cpp
//! server, Ollama and other servers speaking the same API.
//!
//! Blocking (ureq); no async runtime. Each provider owns:
//! - a concurrency gate (at most `max_concurrency` requests in flight);
//! - a per-request timeout (a timeout is returned at once, not retried: callers have deadlines);
//! - retries with exponential backoff on 429, 5xx and transport errors, honouring
//!   `Retry-After`, with the total wait capped by `max_retry_wait_ms`;
//! - for judgments, one repair round: output that is not valid JSON of the right shape is sent
//!   back to the model with the parse error; a second failure is [`ModelError::Malformed`].
//!   Nothing is ever made up.
//!
//! The API key is read from the environment variable named by `api_key_env` at each request;
//! it is never logged, stored or put in an error message.

use std::sync::{Arc, Condvar, Mutex};
use std::time::{Duration, Instant};

use serde_json::{json, Value};

use super::config::{EmbedderConfig, JudgeConfig, ResponseFormat};
use super::usage::{Kind, Usage};
use super::{BoundaryScore, CallCtx, Embedder, Judge, ModelError, ModelId, NamePair, Relation, WalkLevel};

/// Unit, passage and dialogue texts are cut to this many characters in prompts.
const MAX_ITEM_CHARS: usize = 2_000;
const MAX_DIALOGUE_CHARS: usize = 12_000;
/// The first backoff step; doubled each retry, at most `MAX_BACKOFF`.
const BASE_BACKOFF: Duration = Duration::from_millis(200);
const MAX_BACKOFF: Duration = Duration::from_secs(5);

// ---------------------------------------------------------------------------------------------
// HTTP with a gate, timeouts and retries

/// At most `max` holders at a time (a counting semaphore).
struct Gate {
    max: usize,
    used: Mutex<usize>,
    cv: Condvar,
}

struct Permit<'a>(&'a Gate);

impl Gate {
    fn new(max: usize) -> Gate {
        Gate {
            max: max.max(1),
            used: Mutex::new(0),
            cv: Condvar::new(),
        }
    }

    fn acquire(&self) -> Permit<'_> {
        let mut used = self.used.lock().unwrap_or_else(|e| e.into_inner());
        while *used >= self.max {
            used = self.cv.wait(used).unwrap_or_else(|e| e.into_inner());
        }
        *used += 1;
        Permit(self)
    }
}

impl Drop for Permit<'_> {
    fn drop(&mut self) {
        let mut used = self.0.used.lock().unwrap_or_else(|e| e.into_inner());
        *used -= 1;
        self.0.cv.notify_one();
    }
}

struct HttpSettings<'a> {
    base_url: &'a str,
    api_key_env: &'a Option<String>,
    timeout_ms: u64,
    max_concurrency: usize,
    retries: u32,
    max_retry_wait_ms: u64,
}

struct Http {
    agent: ureq::Agent,
    base_url: String,
    api_key_env: Option<String>,
    timeout: Duration,
    retries: u32,
    max_retry_wait: Duration,
    gate: Gate,
}

impl Http {
    fn new(s: HttpSettings) -> Result<Http, ModelError> {
        if s.base_url.trim().is_empty() {
            return Err(ModelError::Config("base_url is empty".into()));
        }
        if let Some(name) = s.api_key_env {
            if std::env::var_os(name).filter(|v| !v.is_empty()).is_none() {
                return Err(ModelError::Config(format!(
                    "environment variable {name} (api_key_env) is not set"
                )));
            }
        }
        let timeout = Duration::from_millis(s.timeout_ms.max(1));
        let agent = ureq::AgentBuilder::new()
            .timeout(timeout)
            .user_agent(concat!("recalld/", env!("CARGO_PKG_VERSION")))
            .build();
        Ok(Http {
            agent,
            base_url: s.base_url.trim_end_matches('/').to_string(),
            api_key_env: s.api_key_env.clone(),
            timeout,
            retries: s.retries,
            max_retry_wait: Duration::from_millis(s.max_retry_wait_ms),
            gate: Gate::new(s.max_concurrency),
        })
    }

    /// POST a JSON body; the parsed JSON reply. Retries as described in the module docs.
    fn post_json(&self, path: &str, body: &Value) -> Result<Value, ModelError> {
        let url = format!("{}{}", self.base_url, path);
        let payload = body.to_string();
        let mut waited = Duration::ZERO;
        let mut attempt: u32 = 0;
        loop {
            let mut req = self.agent.post(&url).set("Content-Type", "application/json");
            if let Some(name) = &self.api_key_env {
                let key = std::env::var(name)
                    .map_err(|_| ModelError::Config(format!("environment variable {name} (api_key_env) is not set")))?;
                req = req.set("Authorization", &format!("Bearer {key}"));
            }
            let started = Instant::now();
            let outcome = {
                let _permit = self.gate.acquire();
                req.send_string(&payload).map(|resp| resp.into_string())
            };
            let (retry_after, failure) = match outcome {
                Ok(Ok(text)) => {
                    return serde_json::from_str(&text)
                        .map_err(|e| ModelError::Malformed(format!("reply from {url} is not JSON: {e}")));
                }
                Ok(Err(io)) => {
                    if io.kind() == std::io::ErrorKind::TimedOut || io.kind() == std::io::ErrorKind::WouldBlock {
                        return Err(self.timeout_error(&url));
                    }
                    (
                        None,
                        ModelError::Transport {
                            url: url.clone(),
                            message: format!("reading the reply: {io}"),
                        },
                    )
                }
                Err(ureq::Error::Status(status, resp)) => {
                    let retry_after = resp.header("retry-after").and_then(parse_retry_after);
                    let message = snippet(&resp.into_string().unwrap_or_default(), 300);
                    let err = ModelError::Http {
                        status,
                        url: url.clone(),
                        message,
                    };
                    if status == 429 || status >= 500 {
                        (retry_after, err)
                    } else {
                        return Err(err);
                    }
                }
                Err(ureq::Error::Transport(t)) => {
                    if is_timeout(&t) || started.elapsed() >= self.timeout {
                        return Err(self.timeout_error(&url));
                    }
                    (
                        None,
                        ModelError::Transport {
                            url: url.clone(),
                            message: t.to_string(),
                        },
                    )
                }
            };
            if attempt >= self.retries {
                return Err(failure);
            }
            let backoff = BASE_BACKOFF.saturating_mul(1 << attempt.min(16)).min(MAX_BACKOFF);
            let wait = retry_after.unwrap_or(backoff);
            if waited + wait > self.max_retry_wait {
                return Err(failure);
            }
            tracing::debug!(url = %url, attempt, wait_ms = wait.as_millis() as u64, error = %failure, "model request retry");
            std::thread::sleep(wait);
            waited += wait;
            attempt += 1;
        }
    }

    fn timeout_error(&self, url: &str) -> ModelError {
        ModelError::Timeout {
            url: url.to_string(),
            after_ms: self.timeout.as_millis() as u64,
        }
    }
}

fn is_timeout(t: &ureq::Transport) -> bool {
    let mut src: Option<&(dyn std::error::Error + 'static)> = std::error::Error::source(t);
    while let Some(e) = src {
        if let Some(io) = e.downcast_ref::<std::io::Error>() {
            if matches!(io.kind(), std::io::ErrorKind::TimedOut | std::io::ErrorKind::WouldBlock) {
                return true;
            }
        }
        src = e.source();
    }
    t.to_string().contains("timed out")
}

/// `Retry-After` in seconds (integer or decimal); HTTP dates fall back to the backoff.
fn parse_retry_after(v: &str) -> Option<Duration> {
    let secs: f64 = v.trim().parse().ok()?;
    (secs.is_finite() && secs >= 0.0).then(|| Duration::from_secs_f64(secs.min(3600.0)))
}

/// At most `max` characters of `s`, on a char boundary, with `…` when cut.
fn snippet(s: &str, max: usize) -> String {
    match s.char_indices().nth(max) {
        Some((i, _)) => format!("{}…", &s[..i]),
        None => s.to_string(),
    }
}

fn usage_tokens(reply: &Value) -> u64 {
    let u = &reply["usage"];
    u["total_tokens"]
        .as_u64()
        .unwrap_or_else(|| u["prompt_tokens"].as_u64().unwrap_or(0) + u["completion_tokens"].as_u64().unwrap_or(0))
}

// ---------------------------------------------------------------------------------------------
// Embedder

/// Embeddings from an OpenAI-compatible `/embeddings` endpoint, L2-normalised here.
pub struct OpenAiEmbedder {
    http: Http,
    model: String,
    dim: usize,
    send_dimensions: bool,
    batch_size: usize,
    usage: Arc<Usage>,
}

impl OpenAiEmbedder {
    /// Build from `[models.embedder]`. Without `dim`, one probe call learns the dimension.
    pub fn new(cfg: &EmbedderConfig, usage: Arc<Usage>) -> Result<OpenAiEmbedder, ModelError> {
        if cfg.model.trim().is_empty() {
            return Err(ModelError::Config("embedder model is empty".into()));
        }
        let http = Http::new(HttpSettings {
            base_url: &cfg.base_url,
            api_key_env: &cfg.api_key_env,
            timeout_ms: cfg.timeout_ms,
            max_concurrency: cfg.max_concurrency,
            retries: cfg.retries,
            max_retry_wait_ms: cfg.max_retry_wait_ms,
        })?;
        let mut me = OpenAiEmbedder {
            http,
            model: cfg.model.clone(),
            dim: cfg.dim.unwrap_or(0),
            send_dimensions: cfg.send_dimensions && cfg.dim.is_some(),
            batch_size: cfg.batch_size.max(1),
            usage,
        };
        if me.dim == 0 {
            let v = me.embed(&CallCtx::new(""), &["recalld dimension probe"])?;
            me.dim = v[0].len();
        }
        Ok(me)
    }

    fn embed_chunk(&self, texts: &[&str]) -> Result<(Vec<Vec<f32>>, u64), ModelError> {
        // Some servers reject empty strings: send a single space instead.
        let input: Vec<&str> = texts.iter().map(|t| if t.is_empty() { " " } else { *t }).collect();
        let mut body = json!({ "model": self.model, "input": input, "encoding_format": "float" });
        if self.send_dimensions {
            body["dimensions"] = json!(self.dim);
        }
        let reply = self.http.post_json("/embeddings", &body)?;
        let data = reply["data"]
            .as_array()
            .ok_or_else(|| ModelError::Malformed("embeddings reply has no data array".into()))?;
        if data.len() != texts.len() {
            return Err(ModelError::Malformed(format!(
                "{} embeddings for {} inputs",
                data.len(),
                texts.len()
            )));
        }
        let mut out: Vec<Option<Vec<f32>>> = vec![None; texts.len()];
        for (pos, item) in data.iter().enumerate() {
            let i = item["index"].as_u64().map_or(pos, |i| i as usize);
            let v: Vec<f32> = item["embedding"]
                .as_array()
                .ok_or_else(|| ModelError::Malformed("embedding is not an array of numbers".into()))?
                .iter()
                .map(|x| x.as_f64().map(|f| f as f32))
                .collect::<Option<_>>()
                .ok_or_else(|| ModelError::Malformed("embedding is not an array of numbers".into()))?;
            if v.is_empty() || (self.dim != 0 && v.len() != self.dim) || v.iter().any(|x| !x.is_finite()) {
                return Err(ModelError::Malformed(format!(
                    "embedding of {} values, expected {}",
                    v.len(),
                    self.dim
                )));
            }
            let norm = v.iter().map(|x| x * x).sum::<f32>().sqrt();
            if norm == 0.0 {
                return Err(ModelError::Malformed("zero embedding".into()));
            }
            match out.get_mut(i) {
                Some(slot @ None) => *slot = Some(v.into_iter().map(|x| x / norm).collect()),
                _ => return Err(ModelError::Malformed(format!("bad or repeated embedding index {i}"))),
            }
        }
        Ok((
            out.into_iter().map(|v| v.expect("every index filled")).collect(),
            usage_tokens(&reply),
        ))
    }
}

impl Embedder for OpenAiEmbedder {
    fn id(&self) -> ModelId {
        ModelId {
            name: self.model.clone(),
            dim: self.dim,
        }
    }

    fn embed(&self, ctx: &CallCtx, texts: &[&str]) -> Result<Vec<Vec<f32>>, ModelError> {
        let mut out = Vec::with_capacity(texts.len());
        for chunk in texts.chunks(self.batch_size) {
            match self.embed_chunk(chunk) {
                Ok((v, tokens)) => {
                    self.usage.record(ctx.memory, Kind::Embed, tokens);
                    out.extend(v);
                }
                Err(e) => {
                    self.usage.record_error(ctx.memory);
                    return Err(e);
                }
            }
        }
        Ok(out)
    }
}

// ---------------------------------------------------------------------------------------------
// Judge

/// Judgments from an OpenAI-compatible chat model with JSON output.
pub struct OpenAiJudge {
    http: Http,
    model: String,
    response_format: ResponseFormat,
    temperature: f32,
    usage: Arc<Usage>,
}

/// One judgment task: its instructions, its JSON schema, and the check of the answer.
struct Task<'a> {
    name: &'a str,
    system: &'a str,
    user: String,
    schema: Value,
}

impl OpenAiJudge {
    pub fn new(cfg: &JudgeConfig, usage: Arc<Usage>) -> Result<OpenAiJudge, ModelError> {
        if cfg.model.trim().is_empty() {
            return Err(ModelError::Config("judge model is empty".into()));
        }
        let http = Http::new(HttpSettings {
            base_url: &cfg.base_url,
            api_key_env: &cfg.api_key_env,
            timeout_ms: cfg.timeout_ms,
            max_concurrency: cfg.max_concurrency,
            retries: cfg.retries,
            max_retry_wait_ms: cfg.max_retry_wait_ms,
        })?;
        Ok(OpenAiJudge {
            http,
            model: cfg.model.clone(),
            response_format: cfg.response_format,
            temperature: cfg.temperature,
            usage,
        })
    }

    fn body(&self, task: &Task, messages: &[Value]) -> Value {
        let mut body = json!({ "model": self.model, "messages": messages, "temperature": self.temperature });
        match self.response_format {
            ResponseFormat::JsonSchema => {
                body["response_format"] = json!({
                    "type": "json_schema",
                    "json_schema": { "name": task.name, "strict": true, "schema": task.schema },
                });
            }
            ResponseFormat::JsonObject => body["response_format"] = json!({ "type": "json_object" }),
            ResponseFormat::None => {}
        }
        body
    }

    /// One chat call; the text the model answered with (content, or a tool call's arguments).
    fn chat(&self, ctx: &CallCtx, task: &Task, messages: &[Value]) -> Result<String, ModelError> {
        let reply = match self.http.post_json("/chat/completions", &self.body(task, messages)) {
            Ok(r) => r,
            Err(e) => {
                self.usage.record_error(ctx.memory);
                return Err(e);
            }
        };
        self.usage.record(ctx.memory, Kind::Judge, usage_tokens(&reply));
        let msg = &reply["choices"][0]["message"];
        if let Some(s) = msg["content"].as_str().filter(|s| !s.trim().is_empty()) {
            return Ok(s.to_string());
        }
        if let Some(args) = msg["tool_calls"][0]["function"]["arguments"].as_str() {
            return Ok(args.to_string());
        }
        if let Some(refusal) = msg["refusal"].as_str() {
            return Ok(format!("(refused: {refusal})"));
        }
        Ok(String::new())
    }

    /// Ask, check, and on a bad answer ask once more with the error shown to the model.
    fn ask<T>(&self, ctx: &CallCtx, task: Task, check: impl Fn(&Value) -> Result<T, String>) -> Result<T, ModelError> {
        let mut messages = vec![
            json!({ "role": "system", "content": task.system }),
            json!({ "role": "user", "content": task.user }),
        ];
        let parse = |text: &str| -> Result<T, String> {
            let v: Value = serde_json::from_str(strip_fences(text)).map_err(|e| format!("not valid JSON: {e}"))?;
            check(&v)
        };
        let first = self.chat(ctx, &task, &messages)?;
        let err = match parse(&first) {
            Ok(t) => return Ok(t),
            Err(e) => e,
        };
        tracing::debug!(task = task.name, error = %err, "judge answer unusable, asking again");
        messages.push(json!({ "role": "assistant", "content": first }));
        messages.push(json!({
            "role": "user",
            "content": format!("That answer could not be used ({err}). Answer again with only the JSON object described, nothing else."),
        }));
        let second = self.chat(ctx, &task, &messages)?;
        parse(&second).map_err(|e2| {
            self.usage.record_error(ctx.memory);
            ModelError::Malformed(format!("{}: {e2} (after one retry)", task.name))
        })
    }
}

/// Remove a Markdown code fence around a JSON answer, if any.
fn strip_fences(s: &str) -> &str {
    let t = s.trim();
    if let Some(rest) = t.strip_prefix("```") {
        let rest = rest.trim_start_matches(|c: char| c.is_ascii_alphabetic());
        return rest.trim_end().trim_end_matches("```").trim();
    }
    t
}

fn numbered(items: &[&str], max_chars: usize) -> String {
    items
        .iter()
        .enumerate()
        .map(|(i, t)| format!("[{i}] {}\n", snippet(t, max_chars)))
        .collect()
}

fn score_in_unit(v: &Value, what: &str) -> Result<f32, String> {
    let x = v.as_f64().ok_or_else(|| format!("{what} is not a number"))?;
    if !x.is_finite() || !(-0.01..=1.01).contains(&x) {
        return Err(format!("{what} must be a number from 0 to 1"));
    }
    Ok(x.clamp(0.0, 1.0) as f32)
}

/// Read `[{"<idx_key>": i, ...}, ...]` covering every index `0..n` exactly once.
fn per_item<T>(
    arr: &Value,
    n: usize,
    idx_key: &str,
    f: impl Fn(&Value) -> Result<T, String>,
) -> Result<Vec<T>, String> {
    let arr = arr.as_array().ok_or("expected an array")?;
    if arr.len() != n {
        return Err(format!("expected {n} entries, got {}", arr.len()));
    }
    let mut out: Vec<Option<T>> = (0..n).map(|_| None).collect();
    for (pos, item) in arr.iter().enumerate() {
        let i = item[idx_key].as_u64().map_or(pos, |i| i as usize);
        let value = f(item)?;
        match out.get_mut(i) {
            Some(slot @ None) => *slot = Some(value),
            Some(Some(_)) => return Err(format!("{idx_key} {i} appears twice")),
            None => return Err(format!("{idx_key} {i} is out of range 0..{n}")),
        }
    }
    Ok(out.into_iter().map(|v| v.expect("all filled")).collect())
}

const BOUNDARIES_SYSTEM: &str = "You split a conversation into concepts: stretches about one subject or one task. \
You are given its units in order; a unit is a user message, or an assistant step together with the tool calls and tool outputs that follow it. \
Score every unit twice, from 0 to 1: `first` is how likely a new concept begins at this unit, `last` is how likely a concept ends with this unit. \
Answer with a JSON object only.";

const ABOUT_SYSTEM: &str = "You decide whether a fact is about an episode of a conversation: whether the episode is where the fact comes from, or what it describes or depends on. \
Give a score from 0 (clearly not) to 1 (clearly yes) and a yes/no decision. Answer with a JSON object only.";

const ABOUT_EACH_SYSTEM: &str = "You decide whether a fact is about each of several episodes of a conversation: whether the episode is where the fact comes from, or what it describes or depends on. \
For every episode give a score from 0 (clearly not) to 1 (clearly yes) and a yes/no decision. Answer with a JSON object only.";

const WALK_SYSTEM: &str = "You rate how much each remembered fact matters to the recent dialogue, on four levels: \
0 unrelated; 1 related (same people, things or subjects, worth following further, but not needed now); \
2 keep (useful for the assistant to see for its next reply); 3 central (directly answers or decides what is being discussed). \
Answer with a JSON object only.";

const DISTILL_SYSTEM: &str = "A block of recalled facts was shown to an assistant just before a user's message. \
Given the conversation around it, decide which facts mattered: relevant to what was discussed, and not already said in the conversation itself. \
Answer with a JSON object only.";

const RELATION_SYSTEM: &str = "You compare a new fact with a fact already held about the same world. \
`restates`: the new fact says the same thing, possibly in other words. \
`contradicts`: both cannot be true at the same time (for example a changed number, place or status); choose it only on clear evidence. \
`unrelated`: anything else, including facts that merely share a subject, add detail, or when you are unsure. \
Answer with a JSON object only.";

const RELATION_EACH_SYSTEM: &str = "You compare a new fact with each of several facts already held about the same world, one by one. \
`restates`: the new fact says the same thing as that held fact, possibly in other words. \
`contradicts`: the new fact and that held fact cannot both be true at the same time (for example a changed number, place or status); choose it only on clear evidence. \
`unrelated`: anything else, including facts that merely share a subject, add detail, or when you are unsure. \
Answer with a JSON object only.";

const SAME_ENTITY_SYSTEM: &str = "You keep a knowledge graph of one conversation. For each pair, decide whether a new name refers to the same person, place, thing or project as a held entity (known by the names listed). \
`true` only when they are clearly one: another spelling, a short form, an abbreviation, a singular or plural of the same thing. \
`false` for different people (even with one name in common), different ids, versions or dates, a part or a group of the other, something owned by the other, or when you are unsure. \
Answer with a JSON object only.";

const EXTRACT_SYSTEM: &str = "You read the end of a conversation between a user and an assistant that is over. \
List the facts worth remembering in later conversations with the same user: preferences, decisions, facts about their environment, outcomes, open questions. \
Each fact is one short sentence in the third person that stands on its own, naming its subject. \
Leave out small talk, what the assistant said it would do, and anything only true during this conversation. \
Return an empty list when nothing is worth keeping. Answer with a JSON object only.";

/// Characters of a transcript the extraction reads at most (the latest kept).
const MAX_TRANSCRIPT_CHARS: usize = 24_000;
/// A fact longer than this is not a fact.
const MAX_FACT_CHARS: usize = 4_000;

impl Judge for OpenAiJudge {
    fn name(&self) -> String {
        self.model.clone()
    }

    fn boundaries(&self, ctx: &CallCtx, units: &[&str]) -> Result<Vec<BoundaryScore>, ModelError> {
        if units.is_empty() {
            return Ok(Vec::new());
        }
        let n = units.len();
        let task = Task {
            name: "boundaries",
            system: BOUNDARIES_SYSTEM,
            user: format!(
                "Units:\n{}\nReturn {{\"scores\": [{{\"unit\": 0, \"first\": 0.0, \"last\": 0.0}}, ...]}} with exactly one entry for each of the {n} units.",
                numbered(units, MAX_ITEM_CHARS)
            ),
            schema: json!({
                "type": "object", "additionalProperties": false, "required": ["scores"],
                "properties": { "scores": { "type": "array", "items": {
                    "type": "object", "additionalProperties": false, "required": ["unit", "first", "last"],
                    "properties": { "unit": { "type": "integer" }, "first": { "type": "number" }, "last": { "type": "number" } },
                } } },
            }),
        };
        self.ask(ctx, task, |v| {
            per_item(&v["scores"], n, "unit", |item| {
                Ok(BoundaryScore {
                    first: score_in_unit(&item["first"], "first")?,
                    last: score_in_unit(&item["last"], "last")?,
                })
            })
        })
    }

    fn about(&self, ctx: &CallCtx, fact: &str, episode_passages: &[&str]) -> Result<(f32, bool), ModelError> {
        if episode_passages.is_empty() {
            return Ok((0.0, false));
        }
        let passages = dashed(episode_passages);
        let task = Task {
            name: "about",
            system: ABOUT_SYSTEM,
            user: format!(
                "Episode passages:\n{passages}---\nFact: {}\n\nReturn {{\"score\": <0..1>, \"about\": <true|false>}}.",
                snippet(fact, MAX_ITEM_CHARS)
            ),
            schema: json!({
                "type": "object", "additionalProperties": false, "required": ["score", "about"],
                "properties": { "score": { "type": "number" }, "about": { "type": "boolean" } },
            }),
        };
        self.ask(ctx, task, |v| {
            let score = score_in_unit(&v["score"], "score")?;
            let yes = v["about"].as_bool().ok_or("about must be true or false")?;
            Ok((score, yes))
        })
    }

    /// One call for all the episodes: the fact is the same, so asking per episode would send
    /// it and the instructions again each time (the load run's judge calls were mostly these).
    fn about_each(&self, ctx: &CallCtx, fact: &str, episodes: &[Vec<&str>]) -> Result<Vec<(f32, bool)>, ModelError> {
        // An episode without passages is about nothing: it is not asked.
        let asked: Vec<usize> = (0..episodes.len()).filter(|&i| !episodes[i].is_empty()).collect();
        let mut out = vec![(0.0, false); episodes.len()];
        let n = asked.len();
        if n == 0 {
            return Ok(out);
        }
        let listed: String = asked
            .iter()
            .enumerate()
            .map(|(k, &i)| format!("Episode {k}:\n{}", dashed(&episodes[i])))
            .collect();
        let task = Task {
            name: "about_each",
            system: ABOUT_EACH_SYSTEM,
            user: format!(
                "{listed}===\nFact: {}\n\nReturn {{\"episodes\": [{{\"episode\": 0, \"score\": <0..1>, \"about\": <true|false>}}, ...]}} with exactly one entry for each of the {n} episodes.",
                snippet(fact, MAX_ITEM_CHARS)
            ),
            schema: json!({
                "type": "object", "additionalProperties": false, "required": ["episodes"],
                "properties": { "episodes": { "type": "array", "items": {
                    "type": "object", "additionalProperties": false, "required": ["episode", "score", "about"],
                    "properties": { "episode": { "type": "integer" }, "score": { "type": "number" }, "about": { "type": "boolean" } },
                } } },
            }),
        };
        let answers = self.ask(ctx, task, |v| {
            per_item(&v["episodes"], n, "episode", |item| {
                let score = score_in_unit(&item["score"], "score")?;
                let yes = item["about"].as_bool().ok_or("about must be true or false")?;
                Ok((score, yes))
            })
        })?;
        for (&i, answer) in asked.iter().zip(answers) {
            out[i] = answer;
        }
        Ok(out)
    }

    fn walk_levels(&self, ctx: &CallCtx, dialogue: &str, facts: &[&str]) -> Result<Vec<WalkLevel>, ModelError> {
        if facts.is_empty() {
            return Ok(Vec::new());
        }
        let n = facts.len();
        let task = Task {
            name: "walk_levels",
            system: WALK_SYSTEM,
            user: format!(
                "Recent dialogue:\n{}\n\nFacts:\n{}\nReturn {{\"levels\": [{{\"fact\": 0, \"level\": <0..3>}}, ...]}} with exactly one entry for each of the {n} facts.",
                tail(dialogue, MAX_DIALOGUE_CHARS),
                numbered(facts, MAX_ITEM_CHARS)
            ),
            schema: json!({
                "type": "object", "additionalProperties": false, "required": ["levels"],
                "properties": { "levels": { "type": "array", "items": {
                    "type": "object", "additionalProperties": false, "required": ["fact", "level"],
                    "properties": { "fact": { "type": "integer" }, "level": { "type": "integer", "enum": [0, 1, 2, 3] } },
                } } },
            }),
        };
        self.ask(ctx, task, |v| {
            per_item(&v["levels"], n, "fact", |item| {
                item["level"]
                    .as_u64()
                    .and_then(|l| WalkLevel::from_u8(l as u8))
                    .ok_or_else(|| "level must be 0, 1, 2 or 3".to_string())
            })
        })
    }

    fn distill(&self, ctx: &CallCtx, facts: &[&str], conversation: &str) -> Result<Vec<usize>, ModelError> {
        if facts.is_empty() {
            return Ok(Vec::new());
        }
        let n = facts.len();
        let task = Task {
            name: "distill",
            system: DISTILL_SYSTEM,
            user: format!(
                "Recalled facts:\n{}\nConversation:\n{}\n\nReturn {{\"keep\": [<indices of the facts that mattered>]}} (an empty list when none did).",
                numbered(facts, MAX_ITEM_CHARS),
                tail(conversation, MAX_DIALOGUE_CHARS)
            ),
            schema: json!({
                "type": "object", "additionalProperties": false, "required": ["keep"],
                "properties": { "keep": { "type": "array", "items": { "type": "integer" } } },
            }),
        };
        self.ask(ctx, task, |v| {
            let arr = v["keep"].as_array().ok_or("keep must be an array of indices")?;
            let mut keep = Vec::with_capacity(arr.len());
            for x in arr {
                let i = x.as_u64().ok_or("keep must hold integers")? as usize;
                if i >= n {
                    return Err(format!("index {i} is out of range 0..{n}"));
                }
                keep.push(i);
            }
            keep.sort_unstable();
            keep.dedup();
            Ok(keep)
        })
    }

    fn extract(&self, ctx: &CallCtx, transcript: &str) -> Result<Vec<super::Extracted>, ModelError> {
        if transcript.trim().is_empty() {
            return Ok(Vec::new());
        }
        let task = Task {
            name: "extract",
            system: EXTRACT_SYSTEM,
            user: format!(
                "Conversation:\n{}\n\nReturn {{\"facts\": [{{\"note\": ..., \"subject\": ..., \"object\": ..., \"kind\": \"preference\" | \"decision\" | \"environment\" | \"outcome\" | \"open_question\" | \"fact\"}}]}}.",
                tail(transcript, MAX_TRANSCRIPT_CHARS)
            ),
            schema: json!({
                "type": "object", "additionalProperties": false, "required": ["facts"],
                "properties": { "facts": { "type": "array", "items": {
                    "type": "object", "additionalProperties": false,
                    "required": ["note", "subject", "object", "kind"],
                    "properties": {
                        "note": { "type": "string" }, "subject": { "type": "string" }, "object": { "type": "string" },
                        "kind": { "type": "string", "enum": super::FACT_KINDS },
                    },
                } } },
            }),
        };
        self.ask(ctx, task, |v| {
            let arr = v["facts"].as_array().ok_or("facts must be an array")?;
            let mut out = Vec::with_capacity(arr.len());
            for f in arr {
                let text = |k: &str| {
                    f[k].as_str()
                        .map(|s| s.trim().to_owned())
                        .ok_or(format!("each fact needs a string {k}"))
                };
                let (note, subject, object, kind) = (text("note")?, text("subject")?, text("object")?, text("kind")?);
                if note.is_empty() || note.chars().count() > MAX_FACT_CHARS {
                    return Err(format!("a fact's note must hold 1 to {MAX_FACT_CHARS} characters"));
                }
                if !super::FACT_KINDS.contains(&kind.as_str()) {
                    return Err(format!("kind {kind:?} is not one of {}", super::FACT_KINDS.join(", ")));
                }
                out.push(super::Extracted {
                    note,
                    subject,
                    object,
                    kind,
                });
            }
            Ok(out)
        })
    }

    fn relation(&self, ctx: &CallCtx, new_fact: &str, held_fact: &str) -> Result<Relation, ModelError> {
        let task = Task {
            name: "relation",
            system: RELATION_SYSTEM,
            user: format!(
                "Held fact: {}\nNew fact: {}\n\nReturn {{\"relation\": \"unrelated\" | \"restates\" | \"contradicts\"}}.",
                snippet(held_fact, MAX_ITEM_CHARS),
                snippet(new_fact, MAX_ITEM_CHARS)
            ),
            schema: json!({
                "type": "object", "additionalProperties": false, "required": ["relation"],
                "properties": { "relation": { "type": "string", "enum": ["unrelated", "restates", "contradicts"] } },
            }),
        };
        self.ask(ctx, task, |v| relation_of(&v["relation"]))
    }

    /// One call for all the held facts a new fact is compared with (#8: contradiction asked in
    /// one batched call).
    fn relation_each(&self, ctx: &CallCtx, new_fact: &str, held_facts: &[&str]) -> Result<Vec<Relation>, ModelError> {
        let n = held_facts.len();
        if n == 0 {
            return Ok(Vec::new());
        }
        let task = Task {
            name: "relation_each",
            system: RELATION_EACH_SYSTEM,
            user: format!(
                "Held facts:\n{}\nNew fact: {}\n\nReturn {{\"relations\": [{{\"fact\": 0, \"relation\": \"unrelated\" | \"restates\" | \"contradicts\"}}, ...]}} with exactly one entry for each of the {n} held facts.",
                numbered(held_facts, MAX_ITEM_CHARS),
                snippet(new_fact, MAX_ITEM_CHARS)
            ),
            schema: json!({
                "type": "object", "additionalProperties": false, "required": ["relations"],
                "properties": { "relations": { "type": "array", "items": {
                    "type": "object", "additionalProperties": false, "required": ["fact", "relation"],
                    "properties": {
                        "fact": { "type": "integer" },
                        "relation": { "type": "string", "enum": ["unrelated", "restates", "contradicts"] },
                    },
                } } },
            }),
        };
        self.ask(ctx, task, |v| {
            per_item(&v["relations"], n, "fact", |item| relation_of(&item["relation"]))
        })
    }

    /// One call for every name a `Graph` job could not settle by its embedding alone (#8:
    /// "then the judge when it is a model").
    fn same_entity_each(&self, ctx: &CallCtx, pairs: &[NamePair<'_>]) -> Result<Vec<bool>, ModelError> {
        let n = pairs.len();
        if n == 0 {
            return Ok(Vec::new());
        }
        let listed: String = pairs
            .iter()
            .enumerate()
            .map(|(i, p)| {
                format!(
                    "Pair {i}: new name {:?}, in the fact: {}\n  held entity, known as: {}\n",
                    snippet(p.name, MAX_ITEM_CHARS),
                    snippet(p.fact, MAX_ITEM_CHARS),
                    p.held
                        .iter()
                        .map(|h| format!("{:?}", snippet(h, MAX_ITEM_CHARS)))
                        .collect::<Vec<_>>()
                        .join(", ")
                )
            })
            .collect();
        let task = Task {
            name: "same_entity_each",
            system: SAME_ENTITY_SYSTEM,
            user: format!(
                "{listed}\nReturn {{\"pairs\": [{{\"pair\": 0, \"same\": true | false}}, ...]}} with exactly one entry for each of the {n} pairs."
            ),
            schema: json!({
                "type": "object", "additionalProperties": false, "required": ["pairs"],
                "properties": { "pairs": { "type": "array", "items": {
                    "type": "object", "additionalProperties": false, "required": ["pair", "same"],
                    "properties": { "pair": { "type": "integer" }, "same": { "type": "boolean" } },
                } } },
            }),
        };
        self.ask(ctx, task, |v| {
            per_item(&v["pairs"], n, "pair", |item| {
                item["same"]
                    .as_bool()
                    .ok_or_else(|| "same must be true or false".to_string())
            })
        })
    }
}

/// An episode's passages as the about prompts list them: each after a `---` line, cut.
fn dashed(passages: &[&str]) -> String {
    passages
        .iter()
        .map(|p| format!("---\n{}\n", snippet(p, MAX_ITEM_CHARS)))
        .collect()
}

fn relation_of(v: &Value) -> Result<Relation, String> {
    match v.as_str() {
        Some("unrelated") => Ok(Relation::Unrelated),
        Some("restates") => Ok(Relation::Restates),
        Some("contradicts") => Ok(Relation::Contradicts),
        _ => Err("relation must be \"unrelated\", \"restates\" or \"contradicts\"".into()),
    }
}

/// The last `max` characters of `s` (the recent end of a dialogue), on a char boundary.
fn tail(s: &str, max: usize) -> &str {
    let n = s.chars().count();
    if n <= max {
        return s;
    }
    let skip = s.char_indices().nth(n - max).map_or(0, |(i, _)| i);
    &s[skip..]
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn fences_and_snippets() {
        assert_eq!(strip_fences("```json\n{\"a\":1}\n```"), "{\"a\":1}");
        assert_eq!(strip_fences(" {\"a\":1} "), "{\"a\":1}");
        assert_eq!(snippet("héllo", 2), "hé…");
        assert_eq!(tail("héllo", 3), "llo");
        assert_eq!(parse_retry_after("2"), Some(Duration::from_secs(2)));
        assert_eq!(parse_retry_after("Wed, 21 Oct 2015 07:28:00 GMT"), None);
    }

    #[test]
    fn per_item_checks_coverage() {
        let ok = json!([{"i": 1, "v": 5}, {"i": 0, "v": 4}]);
        assert_eq!(
            per_item(&ok, 2, "i", |x| Ok(x["v"].as_u64().unwrap())).unwrap(),
            vec![4, 5]
        );
        assert!(per_item(&json!([{"i": 0}, {"i": 0}]), 2, "i", |_| Ok(())).is_err());
        assert!(per_item(&json!([{"i": 0}]), 2, "i", |_| Ok(())).is_err());
        assert!(per_item(&json!([{"i": 0}, {"i": 7}]), 2, "i", |_| Ok(())).is_err());
    }
}
