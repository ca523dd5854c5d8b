//! Dispatch: one request in, one reply out. Arguments are checked here (types, memory ids);
//! the work runs in the engine on a blocking thread, since the store and the models block.

use std::sync::atomic::Ordering;
use std::sync::Arc;

use recalld_protocol::ops::{DecorateArgs, ExportArgs, HelloArgs, HelloReply, Limits, QuietArgs, ReportArgs, OPS};
use recalld_protocol::{
    validate_memory_id, ErrorBody, ErrorCode, Reply, Request, MAX_MEMORY_ID_BYTES, MIN_PROTOCOL_VERSION,
    PROTOCOL_VERSION,
};
use serde::de::DeserializeOwned;
use serde_json::{json, Map, Value};
use tracing::Instrument;

use super::{AppState, Counters};
use crate::engine::EngineError;

pub async fn handle(state: &Arc<AppState>, request: Request, bytes: usize) -> Reply {
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
        let result = run(state, request).await;
        let micros = started.elapsed().as_micros() as u64;
        match result {
            Ok(value) => {
                tracing::debug!(micros, "ok");
                Reply::ok(id, value)
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

async fn run(state: &Arc<AppState>, request: Request) -> Result<Value, ErrorBody> {
    match request.op.as_str() {
        "hello" => hello(state, args(request.args)?),
        "ping" => Ok(json!({ "payload": request.args.get("payload").cloned().unwrap_or(Value::Null) })),
        "health" => Ok(health(state)),
        "stats" => {
            let engine = state.engine.clone();
            let mut stats = blocking(move || engine.stats()).await?;
            stats["server"] = server_stats(state);
            Ok(stats)
        }
        "decorate" => {
            let a: DecorateArgs = args(request.args)?;
            memory_id(&a.memory)?;
            let engine = state.engine.clone();
            let reply = blocking(move || engine.decorate(a)).await?;
            to_value(reply)
        }
        "report" => {
            let a: ReportArgs = args(request.args)?;
            memory_id(&a.memory)?;
            let engine = state.engine.clone();
            let reply = blocking(move || engine.report(a)).await?;
            to_value(reply)
        }
        "export" => {
            let a: ExportArgs = args(request.args)?;
            memory_id(&a.memory)?;
            let engine = state.engine.clone();
            blocking(move || engine.export(&a.memory)).await
        }
        "quiet" => {
            let a: QuietArgs = args(request.args)?;
            memory_id(&a.memory)?;
            let engine = state.engine.clone();
            blocking(move || engine.quiet(&a.memory, a.timeout_ms)).await
        }
        other => Err(ErrorBody::new(
            ErrorCode::UnknownOp,
            format!("unknown op {other:?}; known ops: {}", OPS.join(", ")),
        )),
    }
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

fn memory_id(id: &str) -> Result<(), ErrorBody> {
    validate_memory_id(id).map_err(|m| ErrorBody::new(ErrorCode::InvalidArgument, m))
}

fn to_value<T: serde::Serialize>(v: T) -> Result<Value, ErrorBody> {
    serde_json::to_value(v).map_err(|e| ErrorBody::new(ErrorCode::Internal, format!("cannot encode reply: {e}")))
}

async fn blocking<T: Send + 'static>(
    f: impl FnOnce() -> Result<T, EngineError> + Send + 'static,
) -> Result<T, ErrorBody> {
    match tokio::task::spawn_blocking(f).await {
        Ok(result) => result.map_err(|e| e.to_wire()),
        Err(join) => Err(ErrorBody::new(
            ErrorCode::Internal,
            format!("request task failed: {join}"),
        )),
    }
}
