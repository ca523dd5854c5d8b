//! Dispatch: one request in, one reply out. Arguments are checked here (types, memory ids);
//! the work runs in the engine on a blocking thread, since the store and the models block.

use std::sync::atomic::Ordering;
use std::sync::Arc;

use recalld_protocol::ops::{
    AgentArgs, DecorateArgs, EndArgs, ExportArgs, ForgetMemoryArgs, ForgetMemoryReply, HelloArgs, HelloReply,
    ImportArgs, InspectArgs, Limits, MemoriesUsedArgs, MetricsArgs, QuietArgs, ReportArgs, ScopeArgs, OPS,
};
use recalld_protocol::{
    encode_value, validate_memory_id, ErrorBody, ErrorCode, Passed, Reply, Request, MAX_MEMORY_ID_BYTES,
    MIN_PROTOCOL_VERSION, PROTOCOL_VERSION,
};
use serde::de::DeserializeOwned;
use serde_json::{json, Map, Value};
use tracing::Instrument;

use super::peer::Peer;
use super::{metrics, AppState, Counters};
use crate::engine::scopes::ops::{AgentChanges, Correction, ListFilter};
use crate::engine::scopes::policy::PolicyName;
use crate::engine::scopes::records::Sharing;
use crate::engine::EngineError;

/// `passed`: what of a decorate's body the decoder kept as bytes (its tools, its messages' bytes;
/// see `recalld_protocol::decode_request_lean`), handed to the engine to write back as they came.
pub async fn handle(state: &Arc<AppState>, peer: &Peer, request: Request, passed: Passed, bytes: usize) -> Reply {
    let memory = request
        .args
        .get("memory")
        .and_then(Value::as_str)
        .unwrap_or("")
        .to_owned();
    let span = tracing::debug_span!("req", id = request.id, op = %request.op, memory = %memory, bytes);
    async move {
        Counters::bump(&state.counters.requests_total);
        let id = request.id;
        let op = request.op.clone();
        let started = std::time::Instant::now();
        let mut encoded = Vec::new();
        let result = in_namespace(state, peer, request, passed, &mut encoded).await;
        let elapsed = started.elapsed();
        let micros = elapsed.as_micros() as u64;
        state
            .metrics
            .observe(&op, elapsed.as_secs_f64(), result.as_ref().err().map(|e| e.code));
        match result {
            Ok(value) => {
                tracing::debug!(micros, "ok");
                match value {
                    Value::Object(fields) if !encoded.is_empty() => Reply::ok_with(id, fields, encoded),
                    value => Reply::ok(id, value),
                }
            }
            Err(err) => {
                Counters::bump(&state.counters.errors_total);
                tracing::debug!(micros, code = %err.code, message = %err.message, "error");
                if err.code == ErrorCode::Internal {
                    tracing::error!(op = %op, message = %err.message, "internal error");
                }
                Reply::err(id, err)
            }
        }
    }
    .instrument(span)
    .await
}

/// Runs the request inside the peer's namespace: the memory id and agent it names are
/// checked, then qualified for the engine; replies and errors name them as the caller did.
/// Fields of the reply encoded ahead (decorate's `request`) go to `encoded`.
async fn in_namespace(
    state: &Arc<AppState>,
    peer: &Peer,
    mut request: Request,
    passed: Passed,
    encoded: &mut Vec<(String, Vec<u8>)>,
) -> Result<Value, ErrorBody> {
    let mut names = Vec::new();
    for field in ["memory", "agent"] {
        if let Some(Value::String(m)) = request.args.get(field) {
            memory_id(m).map_err(|mut e| {
                if field == "agent" {
                    e.message = e.message.replace("memory id", "agent");
                }
                e
            })?;
            let qualified = peer.qualify(m);
            names.push((m.clone(), qualified.clone()));
            request.args.insert(field.into(), Value::String(qualified));
        }
    }
    if names.is_empty() {
        return run(state, peer, request, passed, encoded).await;
    }
    match run(state, peer, request, passed, encoded).await {
        Ok(mut value) => {
            // The engine names memories and agents in replies (export's record, audit
            // entries, a scope fact's origin): give them back as the caller said them.
            unqualify(&mut value, peer);
            Ok(value)
        }
        Err(mut err) => {
            for (named, qualified) in &names {
                err.message = err.message.replace(qualified.as_str(), named);
            }
            Err(err)
        }
    }
}

/// Strips the caller's namespace from every id the reply names (`memory`, `agent`, a record's
/// `id`), at any depth, except in the provider payloads (decorate's `request`, report's
/// `response`): the engine names nothing there, a tool call's `id` must reach the caller as the
/// model wrote it, and walking a request of many messages was 1% of the daemon's CPU under load.
fn unqualify(value: &mut Value, peer: &Peer) {
    let Some(ns) = peer.namespace() else { return };
    let prefix = format!("{ns}/");
    if let Value::Object(top) = value {
        for (k, child) in top.iter_mut() {
            if !matches!(k.as_str(), "request" | "response") {
                walk(child, &prefix, Some(k.as_str()));
            }
        }
        return;
    }
    fn walk(v: &mut Value, prefix: &str, key: Option<&str>) {
        match v {
            Value::Object(map) => {
                for (k, child) in map.iter_mut() {
                    walk(child, prefix, Some(k.as_str()));
                }
            }
            Value::Array(items) => {
                for child in items {
                    walk(child, prefix, key);
                }
            }
            Value::String(s) if matches!(key, Some("memory" | "agent" | "id")) => {
                if let Some(rest) = s.strip_prefix(prefix) {
                    *s = rest.to_owned();
                }
            }
            _ => {}
        }
    }
    walk(value, &prefix, None);
}

/// One op's reply: a JSON value, and fields encoded ahead in `encoded` (decorate's request is
/// encoded by the engine from the messages it holds, which a JSON value would have copied).
async fn run(
    state: &Arc<AppState>,
    peer: &Peer,
    request: Request,
    passed: Passed,
    encoded: &mut Vec<(String, Vec<u8>)>,
) -> Result<Value, ErrorBody> {
    match request.op.as_str() {
        "hello" => hello(state, args(request.args)?),
        "ping" => {
            let mut args = request.args;
            Ok(object([("payload", args.remove("payload").unwrap_or(Value::Null))]))
        }
        "health" => Ok(health(state)),
        "stats" => {
            let engine = state.engine.clone();
            let mut stats = blocking(move || engine.stats()).await?;
            stats["server"] = server_stats(state);
            own_memories_only(&mut stats, peer);
            Ok(stats)
        }
        "decorate" => {
            let a = args_with_payload(request.args, "request", |a: &mut DecorateArgs, v| a.request = v)?;
            let engine = state.engine.clone();
            let (request, mut info) = blocking(move || engine.decorate_as(a, passed, |r| r.to_msgpack())).await?;
            // Encoded ahead too, its episodes straight from their records; what names memories
            // is in its other fields.
            unqualify(&mut info.fields, peer);
            encoded.push(("info".into(), encode_value(&info)));
            encoded.push(("request".into(), request));
            Ok(Value::Object(Map::new()))
        }
        "report" => {
            let a = args_with_payload(request.args, "response", |a: &mut ReportArgs, v| a.response = v)?;
            let engine = state.engine.clone();
            let reply = blocking(move || engine.report(a)).await?;
            Ok(object([
                ("response", reply.response),
                ("again", Value::Bool(reply.again)),
            ]))
        }
        "export" => {
            let a: ExportArgs = args(request.args)?;
            let engine = state.engine.clone();
            blocking(move || engine.export(&a.memory)).await
        }
        "forget_memory" => {
            let a: ForgetMemoryArgs = args(request.args)?;
            let engine = state.engine.clone();
            let memory = a.memory.clone();
            let removed = blocking(move || engine.forget(&a.memory)).await?;
            to_value(ForgetMemoryReply {
                memory,
                total: removed.iter().map(|(_, n)| n).sum(),
                removed: removed.into_iter().map(|(t, n)| (t.to_string(), n)).collect(),
            })
        }
        "import" => {
            let a: ImportArgs = args(request.args)?;
            let engine = state.engine.clone();
            blocking(move || engine.import(&a.memory, &a.export)).await
        }
        "metrics" => {
            let a: MetricsArgs = args(request.args)?;
            let m = metrics_of(state).await?;
            match a.format.as_deref() {
                None | Some("json") => Ok(m),
                Some("prometheus") => Ok(json!({ "text": metrics::prometheus(&m) })),
                Some(other) => Err(ErrorBody::new(
                    ErrorCode::InvalidArgument,
                    format!("format must be json or prometheus, got {other:?}"),
                )),
            }
        }
        "inspect" => {
            let a: InspectArgs = args(request.args)?;
            let engine = state.engine.clone();
            blocking(move || engine.inspect(&a)).await
        }
        "memories" => {
            // The caller's own namespace only; the ids come back as the caller names them.
            let prefix = peer.namespace().map(|ns| format!("{ns}/")).unwrap_or_default();
            let engine = state.engine.clone();
            let mut list = blocking(move || engine.memories(&prefix)).await?;
            unqualify(&mut list, peer);
            Ok(list)
        }
        "quiet" => {
            let a: QuietArgs = args(request.args)?;
            let engine = state.engine.clone();
            blocking(move || engine.quiet(&a.memory, a.timeout_ms)).await
        }
        "end" => {
            let a: EndArgs = args(request.args)?;
            let engine = state.engine.clone();
            blocking(move || engine.end(&a.memory, a.now)).await
        }
        "agent" => {
            let a: AgentArgs = args(request.args)?;
            let changes = agent_changes(&a)?;
            let engine = state.engine.clone();
            blocking(move || engine.agent_settings(&a.agent, changes, a.now)).await
        }
        "memories_used" => {
            let a: MemoriesUsedArgs = args(request.args)?;
            let engine = state.engine.clone();
            blocking(move || engine.memories_used(&a.memory)).await
        }
        "list_memories" | "search_memories" | "observe_memory" | "delete_memory" | "restore" | "consolidate"
        | "sweep" | "audit" | "clear_memories" | "update_memory" | "doctor" | "core_block" | "hot" | "add_document"
        | "list_documents" | "remove_document" => {
            let a: ScopeArgs = args(request.args)?;
            let op = request.op.clone();
            let engine = state.engine.clone();
            blocking(move || scope_op(&engine, &op, a)).await
        }
        other => Err(ErrorBody::new(
            ErrorCode::UnknownOp,
            format!("unknown op {other:?}; known ops: {}", OPS.join(", ")),
        )),
    }
}

fn agent_changes(a: &AgentArgs) -> Result<AgentChanges, ErrorBody> {
    let bad = |what: &str, allowed: &str, got: &str| {
        ErrorBody::new(
            ErrorCode::InvalidArgument,
            format!("{what} must be one of {allowed}, got {got:?}"),
        )
    };
    let policy = match a.policy.as_deref() {
        None => None,
        Some(p) => Some(
            serde_json::from_value::<PolicyName>(json!(p))
                .map_err(|_| bad("policy", "off, conversational, knowledge_worker, compliance", p))?,
        ),
    };
    let sharing = match a.sharing.as_deref() {
        None => None,
        Some("private") => Some(Sharing::Private),
        Some("shared") => Some(Sharing::Shared),
        Some(other) => return Err(bad("sharing", "private, shared", other)),
    };
    let sweep_live = match a.sweep.as_deref() {
        None => None,
        Some("report") => Some(false),
        Some("live") => Some(true),
        Some(other) => return Err(bad("sweep", "report, live", other)),
    };
    let schedule = a
        .decay_days
        .as_ref()
        .map(|d| serde_json::from_value::<crate::engine::scopes::decay::Schedule>(d.clone()))
        .transpose()
        .map_err(|e| {
            ErrorBody::new(
                ErrorCode::InvalidArgument,
                format!("decay_days must be {{general, emotional, educational}} in days: {e}"),
            )
        })?;
    let keep_weights = a
        .keep_weights
        .as_ref()
        .map(|d| serde_json::from_value::<crate::engine::scopes::decay::KeepWeights>(d.clone()))
        .transpose()
        .map_err(|e| {
            ErrorBody::new(
                ErrorCode::InvalidArgument,
                format!("keep_weights must be {{age, access, confidence}}: {e}"),
            )
        })?;
    Ok(AgentChanges {
        policy,
        sharing,
        retention_days: a.retention_days,
        sweep_live,
        schedule,
        keep_weights,
    })
}

/// The scope ops, each with the arguments it needs.
fn scope_op(engine: &crate::engine::Engine, op: &str, a: ScopeArgs) -> Result<Value, EngineError> {
    let need_id = || {
        a.id.ok_or_else(|| EngineError::InvalidArgument(format!("{op} needs `id`, the memory's number")))
    };
    let user = a.user.as_deref();
    match op {
        "list_memories" => engine.list_scope(
            &a.agent,
            user,
            ListFilter {
                tier: a.tier.clone(),
                kind: a.kind.clone(),
                status: a.status.clone(),
                limit: a.limit.map(|l| l as usize),
                as_of: a.as_of,
            },
            a.now,
        ),
        "search_memories" => {
            let q = a
                .query
                .as_deref()
                .ok_or_else(|| EngineError::InvalidArgument("search_memories needs `query`".into()))?;
            engine.search_scope(&a.agent, user, q, a.limit.unwrap_or(10) as usize, a.as_of, a.now)
        }
        "observe_memory" => engine.observe_scope(&a.agent, user, need_id()?, a.now),
        "delete_memory" => engine.delete_scope_fact(&a.agent, user, need_id()?, a.now),
        "restore" => engine.restore_scope_fact(&a.agent, user, need_id()?, a.now),
        "consolidate" => engine.consolidate(&a.agent, user, a.now),
        "sweep" => engine.sweep(&a.agent, crate::engine::now_or(a.now)?),
        "audit" => engine.audit_log(&a.agent, user, a.since, a.limit.map(|l| l as usize)),
        "clear_memories" => engine.clear_scope(&a.agent, user, a.tier.as_deref(), a.now),
        "update_memory" => {
            let kind = match a.kind.as_deref() {
                None => None,
                Some(k) => Some(serde_json::from_value(json!(k)).map_err(|_| {
                    EngineError::InvalidArgument(format!(
                        "kind must be one of preference, decision, environment, outcome, open_question, fact, got {k:?}"
                    ))
                })?),
            };
            let change = Correction {
                text: a.text.as_deref(),
                kind,
                importance: a.importance,
            };
            engine.update_scope_fact(&a.agent, user, need_id()?, change, a.now)
        }
        "doctor" => engine.doctor(&a.agent, a.now),
        "core_block" => {
            let name = a
                .name
                .as_deref()
                .ok_or_else(|| EngineError::InvalidArgument("core_block needs `name`".into()))?;
            engine.set_core_block(&a.agent, user, name, a.text.as_deref().unwrap_or(""), a.now)
        }
        "hot" => engine.hot_state(&a.agent, user),
        "add_document" => {
            let name = a
                .name
                .as_deref()
                .ok_or_else(|| EngineError::InvalidArgument("add_document needs `name`".into()))?;
            let text = a
                .text
                .as_deref()
                .ok_or_else(|| EngineError::InvalidArgument("add_document needs `text`".into()))?;
            engine.add_document(&a.agent, name, text, a.now)
        }
        "list_documents" => engine.list_documents(&a.agent),
        "remove_document" => engine.remove_document(&a.agent, need_id()?, a.now),
        other => Err(EngineError::InvalidArgument(format!("not a scope op: {other}"))),
    }
}

/// Request metrics plus the gauges the engine and the server know.
async fn metrics_of(state: &Arc<AppState>) -> Result<Value, ErrorBody> {
    let engine = state.engine.clone();
    let stats = blocking(move || engine.stats()).await?;
    let c = &state.counters;
    let mut m = state.metrics.snapshot();
    m["connections_open"] = json!(c.connections_open.load(Ordering::Relaxed));
    m["connections_total"] = json!(c.connections_total.load(Ordering::Relaxed));
    m["bad_frames_total"] = json!(c.bad_frames_total.load(Ordering::Relaxed));
    m["uptime_seconds"] = json!(state.started.elapsed().as_secs_f64());
    m["lane_jobs"] = stats["jobs_pending"].clone();
    m["store_bytes"] = stats["store_bytes"].clone();
    m["store_map_bytes"] = stats["store_map_bytes"].clone();
    m["memories"] = stats["memories"].clone();
    m["models"] = stats["models"]["total"].clone();
    Ok(m)
}

/// `stats` lists model usage per memory: keep the caller's own, named as it names them.
fn own_memories_only(stats: &mut Value, peer: &Peer) {
    let Some(per_memory) = stats.pointer_mut("/models/memories").and_then(Value::as_object_mut) else {
        return;
    };
    let own = std::mem::take(per_memory)
        .into_iter()
        .filter_map(|(k, v)| match peer.namespace() {
            Some(ns) => k
                .strip_prefix(ns)
                .and_then(|r| r.strip_prefix('/'))
                .map(|m| (m.to_owned(), v)),
            None => Some((k, v)),
        })
        .collect();
    *per_memory = own;
}

fn hello(state: &AppState, a: HelloArgs) -> Result<Value, ErrorBody> {
    let version = a.max_version.min(PROTOCOL_VERSION);
    if a.min_version > a.max_version || version < a.min_version.max(MIN_PROTOCOL_VERSION) {
        return Err(ErrorBody::new(
            ErrorCode::VersionUnsupported,
            format!(
                "client speaks protocol {}..={}, this server speaks {MIN_PROTOCOL_VERSION}..={PROTOCOL_VERSION}",
                a.min_version, a.max_version
            ),
        ));
    }
    if let Some(client) = &a.client {
        tracing::debug!(client = %client, version, "hello");
    }
    to_value(HelloReply {
        protocol_version: version,
        min_version: MIN_PROTOCOL_VERSION,
        max_version: PROTOCOL_VERSION,
        server: "recalld".into(),
        server_version: env!("CARGO_PKG_VERSION").into(),
        limits: Limits {
            max_frame_bytes: state.max_frame_bytes as u64,
            max_memory_id_bytes: MAX_MEMORY_ID_BYTES as u64,
            max_in_flight: state.max_in_flight as u64,
        },
        capabilities: OPS
            .iter()
            .map(|s| s.to_string())
            .chain(["format:chat_completions".into(), "format:responses".into()])
            .chain(["format:anthropic_messages".into()])
            .collect(),
    })
}

fn health(state: &AppState) -> Value {
    json!({
        "status": "ok",
        "uptime_s": state.started.elapsed().as_secs_f64(),
        "version": env!("CARGO_PKG_VERSION"),
    })
}

fn server_stats(state: &AppState) -> Value {
    let c = &state.counters;
    json!({
        "uptime_s": state.started.elapsed().as_secs_f64(),
        "connections_open": c.connections_open.load(Ordering::Relaxed),
        "connections_total": c.connections_total.load(Ordering::Relaxed),
        "requests_total": c.requests_total.load(Ordering::Relaxed),
        "errors_total": c.errors_total.load(Ordering::Relaxed),
        "bad_frames_total": c.bad_frames_total.load(Ordering::Relaxed),
    })
}

fn args<T: DeserializeOwned>(args: Map<String, Value>) -> Result<T, ErrorBody> {
    serde_json::from_value(Value::Object(args))
        .map_err(|e| ErrorBody::new(ErrorCode::InvalidArgument, format!("bad arguments: {e}")))
}

/// Arguments whose provider payload (`field`: the request or response, the largest value a
/// client sends) is moved into place afterwards: deserializing a `Value` from a `Value` builds
/// every map and array of it again. The field stays present (as null) while the rest is read,
/// so a missing one is still refused.
fn args_with_payload<T: DeserializeOwned>(
    mut map: Map<String, Value>,
    field: &str,
    put: impl FnOnce(&mut T, Value),
) -> Result<T, ErrorBody> {
    let payload = map.get_mut(field).map(Value::take);
    let mut a: T = args(map)?;
    if let Some(p) = payload {
        put(&mut a, p);
    }
    Ok(a)
}

fn memory_id(id: &str) -> Result<(), ErrorBody> {
    validate_memory_id(id).map_err(|m| ErrorBody::new(ErrorCode::InvalidArgument, m))
}

/// A reply object of values moved in: `json!` would serialise its arguments into copies, and
/// decorate's request and info are the largest values the daemon sends (a copy cost 0.14 ms
/// of a 1.5 ms decorate at 3k messages).
fn object<const N: usize>(fields: [(&str, Value); N]) -> Value {
    Value::Object(fields.into_iter().map(|(k, v)| (k.to_owned(), v)).collect())
}

fn to_value<T: serde::Serialize>(v: T) -> Result<Value, ErrorBody> {
    serde_json::to_value(v).map_err(|e| ErrorBody::new(ErrorCode::Internal, format!("cannot encode reply: {e}")))
}

/// Runs an engine op (blocking: locks, LMDB's flush) from a request's task. On the daemon's
/// multi-threaded runtime it runs right here, the worker handing its other tasks to another
/// thread meanwhile (`block_in_place`): handed to the blocking pool, the op waited for a thread
/// there to wake, and its task for a worker to wake again, each a core woken when the machine
/// was idle.
async fn blocking<T: Send + 'static>(
    f: impl FnOnce() -> Result<T, EngineError> + Send + 'static,
) -> Result<T, ErrorBody> {
    let failed = |why: String| ErrorBody::new(ErrorCode::Internal, format!("request task failed: {why}"));
    let result = if tokio::runtime::Handle::current().runtime_flavor() == tokio::runtime::RuntimeFlavor::MultiThread {
        tokio::task::block_in_place(|| std::panic::catch_unwind(std::panic::AssertUnwindSafe(f)))
            .map_err(|panic| failed(panic_message(&*panic)))?
    } else {
        tokio::task::spawn_blocking(f)
            .await
            .map_err(|join| failed(join.to_string()))?
    };
    result.map_err(|e| e.to_wire())
}

fn panic_message(panic: &(dyn std::any::Any + Send)) -> String {
    match (panic.downcast_ref::<&str>(), panic.downcast_ref::<String>()) {
        (Some(s), _) => format!("panicked: {s}"),
        (_, Some(s)) => format!("panicked: {s}"),
        _ => "panicked".into(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::server::peer::{Namespaces, PeersConfig};

    /// An op's result, its error, and a panic (an error reply, never a request left unanswered),
    /// from a task on a worker of the daemon's runtime and on a single-threaded one.
    #[test]
    fn an_op_that_panics_is_answered_with_an_internal_error_on_either_runtime() {
        let multi = tokio::runtime::Builder::new_multi_thread()
            .worker_threads(2)
            .build()
            .unwrap();
        let single = tokio::runtime::Builder::new_current_thread().build().unwrap();
        for rt in [multi, single] {
            let task = rt.spawn(async {
                assert_eq!(blocking(|| Ok(5)).await.unwrap(), 5);
                let refused = blocking(|| Err::<(), _>(EngineError::NotFound("no memory".into()))).await;
                assert_eq!(refused.unwrap_err().code, ErrorCode::NotFound);
                let panicked = blocking(|| -> Result<(), EngineError> { panic!("boom") })
                    .await
                    .unwrap_err();
                assert_eq!(panicked.code, ErrorCode::Internal);
                assert!(panicked.message.contains("boom"), "{}", panicked.message);
            });
            rt.block_on(task).expect("the task's checks hold");
        }
    }

    #[test]
    fn replies_name_the_callers_ids_but_provider_payloads_pass_unchanged() {
        let ns = Namespaces::resolve(&PeersConfig {
            isolate: true,
            share: vec![],
        })
        .unwrap();
        let peer = ns.peer(4002, 4002, None);
        let call = json!({"id": "u4002/call", "type": "function"});
        let mut reply = json!({
            "request": {"messages": [{"role": "assistant", "tool_calls": [call.clone()]}]},
            "response": {"id": "u4002/resp"},
            "info": {"recall": {"across": [{"memory": "u4002/other", "id": "u4002/m"}]}},
            "memory": "u4002/m",
        });
        unqualify(&mut reply, &peer);
        assert_eq!(reply["request"]["messages"][0]["tool_calls"][0], call);
        assert_eq!(reply["response"]["id"], "u4002/resp");
        assert_eq!(
            reply["info"]["recall"]["across"][0],
            json!({"memory": "other", "id": "m"})
        );
        assert_eq!(reply["memory"], "m");
        let mut list = json!([{"memory": "u4002/a"}]);
        unqualify(&mut list, &peer);
        assert_eq!(list, json!([{"memory": "a"}]));
    }
}
