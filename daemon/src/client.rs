//! A small blocking Rust client: used by the end-to-end tests and the latency benchmark.
//! Python and TypeScript have their own clients (client-py, client-ts).

use std::io::{Read, Write};
use std::os::unix::net::UnixStream;
use std::path::Path;
use std::time::Duration;

use bytes::{BufMut, BytesMut};
use recalld_protocol::envelope::decode_reply;
use recalld_protocol::{
    encode_frame, encode_frame_with, encode_request_into, ErrorBody, Frame, FrameDecoder, Reply, Request,
};
use serde::de::DeserializeOwned;
use serde::{Deserialize, Serialize};
use serde_json::{Map, Value};

pub struct Client {
    stream: UnixStream,
    decoder: FrameDecoder,
    buf: BytesMut,
    /// The frame being sent, kept so its buffer is reused.
    out: BytesMut,
    next_id: u64,
    sent_bytes: usize,
}

#[derive(Debug, thiserror::Error)]
pub enum ClientError {
    #[error("io: {0}")]
    Io(#[from] std::io::Error),
    #[error("server error {}: {}", .0.code, .0.message)]
    Server(ErrorBody),
    #[error("bad reply: {0}")]
    BadReply(String),
}

impl ClientError {
    pub fn code(&self) -> Option<&'static str> {
        match self {
            ClientError::Server(e) => Some(e.code.as_str()),
            _ => None,
        }
    }
}

impl Client {
    pub fn connect(path: &Path) -> Result<Client, ClientError> {
        let stream = UnixStream::connect(path)?;
        stream.set_read_timeout(Some(Duration::from_secs(60)))?;
        Ok(Client {
            stream,
            decoder: FrameDecoder::new(usize::MAX),
            buf: BytesMut::new(),
            out: BytesMut::new(),
            next_id: 1,
            sent_bytes: 0,
        })
    }

    /// Sends a request without waiting; returns its id.
    pub fn send(&mut self, op: &str, args: Value) -> Result<u64, ClientError> {
        let id = self.next_id;
        self.next_id += 1;
        let args = match args {
            Value::Object(m) => m,
            Value::Null => Map::new(),
            other => return Err(ClientError::BadReply(format!("args must be a map, got {other}"))),
        };
        let req = Request {
            id,
            op: op.into(),
            args,
        };
        self.send_frame(|b| {
            encode_request_into(&req, b);
            Ok(())
        })?;
        Ok(id)
    }

    /// Sends a request whose arguments (a map) are encoded straight from `args`, without a
    /// JSON copy of them; returns its id.
    pub fn send_as<A: Serialize>(&mut self, op: &str, args: &A) -> Result<u64, ClientError> {
        self.send_with(op, |b| {
            rmp_serde::encode::write_named(&mut b.writer(), args).map_err(|e| e.to_string())
        })
    }

    /// Sends a request whose arguments (a map) `write_args` writes as MessagePack itself (parts
    /// of them encoded once and sent again as bytes, say); returns its id. Nothing is sent when
    /// it fails.
    pub fn send_with(
        &mut self,
        op: &str,
        write_args: impl FnOnce(&mut BytesMut) -> Result<(), String>,
    ) -> Result<u64, ClientError> {
        use rmp::encode::{write_map_len, write_str, write_uint};
        let id = self.next_id;
        self.next_id += 1;
        self.send_frame(|b| {
            let mut w = b.writer();
            let envelope = write_map_len(&mut w, 3)
                .and_then(|_| write_str(&mut w, "id"))
                .and_then(|_| write_uint(&mut w, id).map(|_| ()))
                .and_then(|_| write_str(&mut w, "op"))
                .and_then(|_| write_str(&mut w, op))
                .and_then(|_| write_str(&mut w, "args"));
            envelope.map_err(|e| e.to_string())?;
            write_args(b)
        })?;
        Ok(id)
    }

    /// Encodes one frame with `write` and sends it; nothing is sent when `write` fails.
    fn send_frame(&mut self, write: impl FnOnce(&mut BytesMut) -> Result<(), String>) -> Result<(), ClientError> {
        let mut out = std::mem::take(&mut self.out);
        out.clear();
        let mut written = Ok(());
        let framed = encode_frame_with(&mut out, usize::MAX, |b| written = write(b));
        let sent = match (framed, written) {
            (Err(e), _) => Err(ClientError::BadReply(e.to_string())),
            (_, Err(e)) => Err(ClientError::BadReply(format!("arguments do not encode: {e}"))),
            (Ok(()), Ok(())) => {
                self.sent_bytes = out.len() - 4;
                self.send_raw(&out)
            }
        };
        self.out = out;
        sent
    }

    /// The body length of the last request `send` or `send_as` encoded (the frame without its
    /// header).
    pub fn sent_bytes(&self) -> usize {
        self.sent_bytes
    }

    /// Sends one frame with an arbitrary body.
    pub fn send_raw_body(&mut self, body: &[u8]) -> Result<(), ClientError> {
        let mut out = BytesMut::new();
        encode_frame(body, usize::MAX, &mut out).map_err(|e| ClientError::BadReply(e.to_string()))?;
        self.send_raw(&out)
    }

    /// Writes raw bytes to the socket.
    pub fn send_raw(&mut self, bytes: &[u8]) -> Result<(), ClientError> {
        self.stream.write_all(bytes)?;
        Ok(())
    }

    /// Reads the next reply, whatever its id.
    pub fn recv(&mut self) -> Result<Reply, ClientError> {
        let body = self.recv_body()?;
        decode_reply(&body).map_err(|e| ClientError::BadReply(e.to_string()))
    }

    /// The next reply's frame body.
    fn recv_body(&mut self) -> Result<bytes::Bytes, ClientError> {
        loop {
            if let Some(frame) = self.decoder.decode(&mut self.buf) {
                let Frame::Body(body) = frame else {
                    unreachable!("no limit on the client side")
                };
                return Ok(body);
            }
            let mut chunk = [0u8; 64 * 1024];
            let n = self.stream.read(&mut chunk)?;
            if n == 0 {
                return Err(ClientError::Io(std::io::ErrorKind::UnexpectedEof.into()));
            }
            self.buf.extend_from_slice(&chunk[..n]);
        }
    }

    /// Sends a request and waits for its reply.
    pub fn call(&mut self, op: &str, args: Value) -> Result<Value, ClientError> {
        let id = self.send(op, args)?;
        let reply = self.recv()?;
        if reply.id != id {
            return Err(ClientError::BadReply(format!("reply id {} for request {id}", reply.id)));
        }
        into_result(reply)
    }

    /// Sends a request (see [`Client::send_as`]) and reads its reply's `ok` as a `T`: the
    /// fields `T` does not name are skipped, never built (a decorate's `request` is most of its
    /// reply).
    pub fn call_as<A: Serialize, T: DeserializeOwned>(&mut self, op: &str, args: &A) -> Result<T, ClientError> {
        let id = self.send_as(op, args)?;
        let body = self.recv_body()?;
        read_as(id, &body)
    }

    /// Reads the reply to request `id` (the next one) as [`Client::call_as`] does, its
    /// `ok.<skip>` cut out unread: not decoded even to be skipped
    /// ([`recalld_protocol::raw::reply_without`]).
    pub fn recv_without<T: DeserializeOwned>(&mut self, id: u64, skip: &str) -> Result<T, ClientError> {
        let body = self.recv_body()?;
        match recalld_protocol::raw::reply_without(&body, skip) {
            Some(cut) => read_as(id, &cut),
            None => read_as(id, &body),
        }
    }
}

/// A reply's body read as the reply to request `id`, its `ok` as a `T`: the fields `T` does
/// not name are skipped.
fn read_as<T: DeserializeOwned>(id: u64, body: &[u8]) -> Result<T, ClientError> {
    #[derive(Deserialize)]
    struct Incoming<T> {
        id: u64,
        #[serde(default = "none")]
        ok: Option<T>,
        #[serde(default)]
        err: Option<ErrorBody>,
    }
    fn none<T>() -> Option<T> {
        None
    }
    let reply: Incoming<T> = rmp_serde::from_slice(body).map_err(|e| ClientError::BadReply(e.to_string()))?;
    if reply.id != id {
        return Err(ClientError::BadReply(format!("reply id {} for request {id}", reply.id)));
    }
    outcome(reply.ok, reply.err)
}

impl Client {
    /// Waits up to `timeout_ms` until `memory`'s background jobs are done; returns how many
    /// are left (0 when the lane is quiet).
    pub fn quiet(&mut self, memory: &str, timeout_ms: u64) -> Result<u64, ClientError> {
        let ok = self.call("quiet", serde_json::json!({"memory": memory, "timeout_ms": timeout_ms}))?;
        ok.get("jobs")
            .and_then(Value::as_u64)
            .ok_or_else(|| ClientError::BadReply(format!("quiet reply without jobs: {ok}")))
    }
}

pub fn into_result(reply: Reply) -> Result<Value, ClientError> {
    outcome(reply.ok, reply.err)
}

fn outcome<T>(ok: Option<T>, err: Option<ErrorBody>) -> Result<T, ClientError> {
    match (ok, err) {
        (_, Some(err)) => Err(ClientError::Server(err)),
        (Some(ok), None) => Ok(ok),
        (None, None) => Err(ClientError::BadReply("reply has neither ok nor err".into())),
    }
}
