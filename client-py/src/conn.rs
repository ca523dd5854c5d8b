//! `Connection`: one Unix socket to the daemon, used by the sync `Client`.
//!
//! A call takes the connection's lock, writes one request frame and reads frames until the
//! reply with its id arrives (replies to earlier calls that timed out are skipped). All socket
//! work runs with the GIL released, so other Python threads keep running while one waits.
//! Any I/O failure other than a read timeout closes the connection: the next call raises
//! `RecalldConnectionError` instead of reading a stream that may be out of step.

use std::io::{ErrorKind, Read, Write};
use std::os::unix::net::UnixStream;
use std::path::PathBuf;
use std::sync::Mutex;
use std::time::Duration;

use bytes::BytesMut;
use pyo3::exceptions::PyValueError;
use pyo3::prelude::*;
use pyo3::types::PyString;
use recalld_protocol::{encode_frame, encode_request, Frame, FrameDecoder, Request};
use serde_json::{Map, Value};

use crate::convert;
use crate::errors;

const READ_CHUNK: usize = 64 * 1024;

/// Why a call failed, decided without the GIL and turned into a Python exception with it.
enum CallError {
    /// The daemon answered with an `err` body.
    Remote(errors::WireError),
    /// The socket is gone or the stream is out of step; the connection is now closed.
    Connection(String),
    /// No reply within the timeout; the connection stays usable.
    Timeout(String),
    /// The request could not be encoded (too large).
    Local(String),
}

struct Stream {
    sock: UnixStream,
    buf: BytesMut,
    decoder: FrameDecoder,
    next_id: u64,
}

impl Stream {
    fn call(&mut self, op: String, args: Map<String, Value>) -> Result<Value, CallError> {
        self.next_id += 1;
        let id = self.next_id;
        let body = encode_request(&Request { id, op, args });
        let mut out = BytesMut::new();
        encode_frame(&body, self.decoder.max_frame_bytes(), &mut out).map_err(|e| CallError::Local(e.to_string()))?;
        self.sock
            .write_all(&out)
            .map_err(|e| CallError::Connection(format!("cannot write to the daemon: {e}")))?;
        loop {
            let body = self.read_frame()?;
            let reply: Value = rmp_serde::from_slice(&body)
                .map_err(|e| CallError::Connection(format!("the daemon sent an undecodable reply: {e}")))?;
            let Value::Object(mut reply) = reply else {
                return Err(CallError::Connection(
                    "the daemon sent a reply that is not a map".into(),
                ));
            };
            if reply.get("id").and_then(Value::as_u64) != Some(id) {
                // A late reply to a call that timed out earlier.
                continue;
            }
            // Read leniently: an error code this build does not know still reaches the caller.
            return match reply.remove("err") {
                Some(err) if !err.is_null() => Err(CallError::Remote(errors::WireError::from_value(err))),
                _ => Ok(reply.remove("ok").unwrap_or(Value::Null)),
            };
        }
    }

    fn read_frame(&mut self) -> Result<bytes::Bytes, CallError> {
        loop {
            match self.decoder.decode(&mut self.buf) {
                Some(Frame::Body(body)) => return Ok(body),
                Some(Frame::TooLarge { len }) => {
                    return Err(CallError::Connection(format!(
                        "the daemon sent a frame of {len} bytes, over the limit of {}",
                        self.decoder.max_frame_bytes()
                    )))
                }
                None => {}
            }
            let start = self.buf.len();
            self.buf.resize(start + READ_CHUNK, 0);
            let got = self.sock.read(&mut self.buf[start..]);
            self.buf.truncate(start + *got.as_ref().unwrap_or(&0));
            match got {
                Ok(0) => return Err(CallError::Connection("the daemon closed the connection".into())),
                Ok(_) => {}
                Err(e) if e.kind() == ErrorKind::Interrupted => {}
                Err(e) if matches!(e.kind(), ErrorKind::WouldBlock | ErrorKind::TimedOut) => {
                    return Err(CallError::Timeout("no reply from the daemon within the timeout".into()))
                }
                Err(e) => return Err(CallError::Connection(format!("cannot read from the daemon: {e}"))),
            }
        }
    }
}

/// A blocking connection to the daemon. Thread-safe: calls from several threads take turns.
#[pyclass(module = "recalld._native", frozen)]
pub struct Connection {
    path: PathBuf,
    stream: Mutex<Option<Stream>>,
}

fn timeout_duration(timeout: Option<f64>) -> PyResult<Option<Duration>> {
    match timeout {
        None => Ok(None),
        Some(t) if t.is_finite() && t > 0.0 => Ok(Some(Duration::from_secs_f64(t))),
        Some(t) => Err(PyValueError::new_err(format!(
            "timeout must be a positive number of seconds or None, not {t}"
        ))),
    }
}

#[pymethods]
impl Connection {
    /// Connects to the daemon's socket at `path`. `timeout` (seconds, None = wait forever)
    /// bounds each read and write.
    #[staticmethod]
    #[pyo3(signature = (path, timeout = None))]
    fn connect(py: Python<'_>, path: PathBuf, timeout: Option<f64>) -> PyResult<Connection> {
        let timeout = timeout_duration(timeout)?;
        let result = py.detach(|| -> std::io::Result<UnixStream> {
            let sock = UnixStream::connect(&path)?;
            sock.set_read_timeout(timeout)?;
            sock.set_write_timeout(timeout)?;
            Ok(sock)
        });
        let sock =
            result.map_err(|e| errors::connection_error(py, format!("cannot connect to {}: {e}", path.display())))?;
        Ok(Connection {
            path,
            stream: Mutex::new(Some(Stream {
                sock,
                buf: BytesMut::with_capacity(READ_CHUNK),
                decoder: FrameDecoder::new(recalld_protocol::DEFAULT_MAX_FRAME_BYTES),
                next_id: 0,
            })),
        })
    }

    /// Sends `op` with `args` and returns the reply's `ok` value; raises `RecalldError`.
    #[pyo3(signature = (op, args = None))]
    fn call<'py>(&self, py: Python<'py>, op: String, args: Option<&Bound<'py, PyAny>>) -> PyResult<Bound<'py, PyAny>> {
        let args = match args {
            None => Map::new(),
            Some(a) if a.is_none() => Map::new(),
            Some(a) => convert::to_map(a)?,
        };
        let result = py.detach(|| {
            let mut guard = self.stream.lock().unwrap_or_else(|p| p.into_inner());
            let Some(stream) = guard.as_mut() else {
                return Err(CallError::Connection("the connection is closed".into()));
            };
            let result = stream.call(op, args);
            if matches!(result, Err(CallError::Connection(_))) {
                if let Some(stream) = guard.take() {
                    let _ = stream.sock.shutdown(std::net::Shutdown::Both);
                }
            }
            result
        });
        match result {
            Ok(value) => convert::to_py(py, &value),
            Err(CallError::Remote(err)) => Err(errors::from_wire(py, err)),
            Err(CallError::Connection(msg)) => Err(errors::connection_error(py, msg)),
            Err(CallError::Timeout(msg)) => Err(errors::timeout_error(py, msg)),
            Err(CallError::Local(msg)) => Err(PyValueError::new_err(msg)),
        }
    }

    /// Closes the socket. Later calls raise `RecalldConnectionError`. Closing twice is fine.
    fn close(&self, py: Python<'_>) {
        py.detach(|| {
            let mut guard = self.stream.lock().unwrap_or_else(|p| p.into_inner());
            if let Some(stream) = guard.take() {
                let _ = stream.sock.shutdown(std::net::Shutdown::Both);
            }
        })
    }

    /// Whether `close()` was called or the connection failed.
    #[getter]
    fn closed(&self) -> bool {
        self.stream.lock().map(|g| g.is_none()).unwrap_or(true)
    }

    /// The socket path this connection was opened on.
    #[getter]
    fn path<'py>(&self, py: Python<'py>) -> Bound<'py, PyString> {
        PyString::new(py, &self.path.to_string_lossy())
    }

    fn __repr__(&self) -> String {
        let state = if self.closed() { "closed" } else { "open" };
        format!("<recalld._native.Connection {} {state}>", self.path.display())
    }
}
