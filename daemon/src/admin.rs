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

/// Whether a daemon answers on `socket`.
pub fn is_serving(socket: &Path) -> bool {
    std::os::unix::net::UnixStream::connect(socket).is_ok()
}
