//! The inspector's server: loopback only, one request per connection. A request whose Host is
//! not this server's own address is refused (DNS rebinding); `/api/<op>` needs the token and an
//! allow-listed op, and is forwarded to the daemon as that op with the body as its arguments.

use std::future::Future;
use std::net::{Ipv4Addr, SocketAddr};
use std::path::PathBuf;
use std::sync::Arc;
use std::time::{Duration, Instant};

use serde_json::{json, Value};
use tokio::net::{TcpListener, TcpStream};

use super::http::{read_request, Request, Response};
use super::{assets, check_token, random_token, url, Options, UiError};
use crate::client::ClientError;
use recalld_protocol::ErrorCode;

/// The ops the page may send: reads of the caller's own memories, and the Memory tab's scope
/// ops (each audited by the daemon). Writes to conversations (decorate, report, import,
/// forget_memory) and the daemon's own controls are not among them.
pub const ALLOWED_OPS: &[&str] = &[
    "health",
    "stats",
    "memories",
    "inspect",
    "export",
    "agent",
    "doctor",
    "audit",
    "list_memories",
    "search_memories",
    "observe_memory",
    "memories_used",
    "delete_memory",
    "restore",
    "update_memory",
    "clear_memories",
    "consolidate",
    "list_documents",
];

/// How long a client has to send its request.
const READ_TIMEOUT: Duration = Duration::from_secs(10);

pub struct Server {
    listener: TcpListener,
    addr: SocketAddr,
    ctx: Arc<Ctx>,
}

struct Ctx {
    token: String,
    socket: PathBuf,
    /// The Host values accepted: `127.0.0.1:PORT` and `localhost:PORT`.
    hosts: [String; 2],
}

impl Server {
    /// Binds 127.0.0.1 (never another interface) and settles the token.
    pub async fn bind(opts: &Options) -> Result<Server, UiError> {
        let token = match &opts.token {
            Some(t) => {
                check_token(t)?;
                t.clone()
            }
            None => random_token()?,
        };
        let listener = TcpListener::bind((Ipv4Addr::LOCALHOST, opts.port))
            .await
            .map_err(|source| UiError::Bind {
                port: opts.port,
                source,
            })?;
        let addr = listener.local_addr().map_err(|source| UiError::Bind {
            port: opts.port,
            source,
        })?;
        let port = addr.port();
        Ok(Server {
            listener,
            addr,
            ctx: Arc::new(Ctx {
                token,
                socket: opts.socket.clone(),
                hosts: [format!("127.0.0.1:{port}"), format!("localhost:{port}")],
            }),
        })
    }

    pub fn addr(&self) -> SocketAddr {
        self.addr
    }

    pub fn token(&self) -> &str {
        &self.ctx.token
    }

    /// The page's address with its token: what `recalld ui` prints.
    pub fn url(&self) -> String {
        url(self.addr, &self.ctx.token)
    }

    /// Serves until `stop` resolves. Each connection is its own task; a bad request ends only
    /// its own connection.
    pub async fn serve(self, stop: impl Future<Output = ()>) {
        tracing::info!(addr = %self.addr, socket = %self.ctx.socket.display(), "inspector listening");
        tokio::pin!(stop);
        loop {
            tokio::select! {
                _ = &mut stop => break,
                accepted = self.listener.accept() => match accepted {
                    Ok((stream, peer)) => {
                        let ctx = self.ctx.clone();
                        tokio::spawn(async move { connection(stream, peer, ctx).await });
                    }
                    Err(e) => {
                        tracing::warn!(error = %e, "accept failed");
                        tokio::time::sleep(Duration::from_millis(50)).await;
                    }
                },
            }
        }
        tracing::info!("inspector stopped");
    }
}

async fn connection(mut stream: TcpStream, peer: SocketAddr, ctx: Arc<Ctx>) {
    let started = Instant::now();
    let response = match tokio::time::timeout(READ_TIMEOUT, read_request(&mut stream)).await {
        Err(_) => Response::error(408, "timeout", "the request did not arrive in time"),
        Ok(Err(e)) => match e.status() {
            Some(status) => Response::error(status, "bad_request", &e.to_string()),
            None => {
                tracing::debug!(%peer, error = %e, "connection ended before a request");
                return;
            }
        },
        Ok(Ok(req)) => {
            let response = route(&ctx, &req).await;
            tracing::debug!(
                method = %req.method,
                path = %req.path,
                status = response.status,
                bytes = response.body.len(),
                ms = started.elapsed().as_millis() as u64,
                "request"
            );
            response
        }
    };
    if let Err(e) = response.write_to(&mut stream).await {
        tracing::debug!(%peer, error = %e, "cannot write the response");
    }
}

async fn route(ctx: &Ctx, req: &Request) -> Response {
    if !host_ok(ctx, req.header("host")) {
        tracing::warn!(host = ?req.header("host"), "request refused: not addressed to this server");
        return Response::error(
            403,
            "forbidden_host",
            "the Host header must name this server (127.0.0.1 or localhost)",
        );
    }
    let Some(op) = req.path.strip_prefix("/api/") else {
        if req.method != "GET" {
            return Response::error(405, "method_not_allowed", "pages are read with GET");
        }
        return match assets::get(&req.path) {
            Some((content_type, body)) => Response {
                status: 200,
                content_type,
                body: body.as_bytes().to_vec(),
                page_headers: true,
            },
            None => Response::error(404, "not_found", "no such page"),
        };
    };
    if !authorized(ctx, req) {
        return Response::error(
            401,
            "unauthorized",
            "a valid token is required (open the address recalld ui printed)",
        );
    }
    if req.method != "POST" {
        return Response::error(405, "method_not_allowed", "ops are sent with POST");
    }
    if !ALLOWED_OPS.contains(&op) {
        return Response::error(403, "op_not_allowed", &format!("the inspector does not send {op:?}"));
    }
    let args: Value = if req.body.iter().all(u8::is_ascii_whitespace) {
        json!({})
    } else {
        match serde_json::from_slice(&req.body) {
            Ok(v @ Value::Object(_)) => v,
            Ok(_) => {
                return Response::error(
                    400,
                    "bad_request",
                    "the body must be a JSON object of the op's arguments",
                )
            }
            Err(e) => return Response::error(400, "bad_request", &format!("the body is not JSON: {e}")),
        }
    };
    forward(ctx, op, args).await
}

/// Sends one op to the daemon over its socket, on a blocking thread (the admin client is
/// blocking), and turns its reply into a response.
async fn forward(ctx: &Ctx, op: &str, args: Value) -> Response {
    let socket = ctx.socket.clone();
    let name = op.to_owned();
    let result = tokio::task::spawn_blocking(move || crate::admin::call(&socket, &name, args)).await;
    match result {
        Err(_) => Response::error(500, "internal", "the forwarding task failed"),
        Ok(Ok(ok)) => Response::json(200, &ok),
        Ok(Err(ClientError::Server(e))) => Response::json(
            status_of(e.code),
            &json!({"error": {"code": e.code.as_str(), "message": e.message, "retryable": e.retryable}}),
        ),
        Ok(Err(e)) => {
            tracing::warn!(op, error = %e, socket = %ctx.socket.display(), "cannot reach the daemon");
            Response::error(
                502,
                "daemon_unreachable",
                &format!("no daemon answers on {}: {e}", ctx.socket.display()),
            )
        }
    }
}

/// The HTTP status of a daemon error code.
pub fn status_of(code: ErrorCode) -> u16 {
    match code {
        ErrorCode::InvalidArgument
        | ErrorCode::MalformedFrame
        | ErrorCode::UnknownOp
        | ErrorCode::VersionUnsupported => 400,
        ErrorCode::NotFound => 404,
        ErrorCode::Conflict => 409,
        ErrorCode::FrameTooLarge => 413,
        ErrorCode::ResourceExhausted => 429,
        ErrorCode::Unavailable => 503,
        ErrorCode::Timeout => 504,
        ErrorCode::Internal => 500,
    }
}

fn host_ok(ctx: &Ctx, host: Option<&str>) -> bool {
    host.is_some_and(|h| ctx.hosts.iter().any(|ok| ok.eq_ignore_ascii_case(h)))
}

/// `Authorization: Bearer T` or `X-Recalld-Token: T`, compared in constant time.
fn authorized(ctx: &Ctx, req: &Request) -> bool {
    let given = req
        .header("x-recalld-token")
        .or_else(|| req.header("authorization").and_then(|v| v.strip_prefix("Bearer ")));
    given.is_some_and(|t| same(t.trim().as_bytes(), ctx.token.as_bytes()))
}

fn same(a: &[u8], b: &[u8]) -> bool {
    a.len() == b.len() && a.iter().zip(b).fold(0u8, |acc, (x, y)| acc | (x ^ y)) == 0
}
