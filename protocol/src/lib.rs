//! The recalld wire protocol: frames, request/reply envelopes, error codes and op arguments.
//!
//! This crate does no I/O. The daemon, the Rust benchmark client and the Python extension all
//! build on it, so every language agrees on one definition of the wire.

pub mod envelope;
pub mod error;
mod finite;
pub mod frame;
pub mod ops;
pub mod raw;

pub use envelope::{
    decode_request, decode_request_lean, encode_reply, encode_reply_into, encode_request, encode_request_into,
    encode_value, Passed, Reply, Request,
};
pub use error::{ErrorBody, ErrorCode};
pub use frame::{encode_frame, encode_frame_with, Frame, FrameDecoder, FrameError, DEFAULT_MAX_FRAME_BYTES};
pub use raw::Raw;

/// The protocol version this build speaks natively.
pub const PROTOCOL_VERSION: u32 = 1;
/// The oldest protocol version this build still accepts.
pub const MIN_PROTOCOL_VERSION: u32 = 1;
/// Memory ids are 1 to this many bytes of UTF-8.
pub const MAX_MEMORY_ID_BYTES: usize = 256;

/// Checks a memory id: non-empty, at most [`MAX_MEMORY_ID_BYTES`] bytes, no NUL.
pub fn validate_memory_id(id: &str) -> Result<(), String> {
    if id.is_empty() {
        return Err("memory id is empty".into());
    }
    if id.len() > MAX_MEMORY_ID_BYTES {
        return Err(format!(
            "memory id is {} bytes, the limit is {MAX_MEMORY_ID_BYTES}",
            id.len()
        ));
    }
    if id.contains('\0') {
        return Err("memory id contains a NUL byte".into());
    }
    Ok(())
}
