//! What the binary's admin commands do: ops sent to a running daemon over its socket (with the
//! caller's own peer credentials, so each user sees only their memories), and store copies.

use std::path::Path;

use serde_json::Value;

use crate::client::{Client, ClientError};

/// Sends one op and returns its `ok` value.
pub fn call(socket: &Path, op: &str, args: Value) -> Result<Value, ClientError> {
    let mut client = Client::connect(socket)?;
    client.call(op, args)
}

/// `recalld inspect`: the `inspect` op for `memory` (activation as of `at`, the last
/// `decisions`), as the op's JSON reply or as text for a terminal (without the curves, which
/// the text does not show).
pub fn inspect(
    socket: &Path,
    memory: &str,
    at: Option<f64>,
    decisions: u64,
    json: bool,
) -> Result<String, ClientError> {
    let mut args = serde_json::json!({"memory": memory, "decisions": decisions});
    if let Some(at) = at {
        args["at"] = at.into();
    }
    if !json {
        args["curve"] = 0.into();
    }
    let reply = call(socket, "inspect", args)?;
    Ok(if json {
        serde_json::to_string_pretty(&reply).unwrap_or_default() + "\n"
    } else {
        crate::inspect::render(&reply)
    })
}

/// Whether a daemon answers on `socket`.
pub fn is_serving(socket: &Path) -> bool {
    std::os::unix::net::UnixStream::connect(socket).is_ok()
}
