//! The closed list of error codes a reply can carry. Codes are stable wire strings; messages
//! are for people and may change.

use serde::{Deserialize, Serialize};

#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum ErrorCode {
    /// The frame body is not a MessagePack map of the envelope's shape.
    MalformedFrame,
    /// The frame's declared length is over the limit; its body was skipped.
    FrameTooLarge,
    /// The op name is not one this server knows.
    UnknownOp,
    /// An argument is missing, of the wrong type, or out of range.
    InvalidArgument,
    /// The named thing does not exist.
    NotFound,
    /// The request conflicts with stored state.
    Conflict,
    /// A limit was reached (storage, memory, queue); retry later.
    ResourceExhausted,
    /// The server cannot serve now (shutting down, model unreachable); retry later.
    Unavailable,
    /// A deadline passed before the work finished.
    Timeout,
    /// A bug or an unexpected failure inside the server.
    Internal,
    /// The client's protocol version range does not meet the server's.
    VersionUnsupported,
}

impl ErrorCode {
    pub const ALL: [ErrorCode; 11] = [
        ErrorCode::MalformedFrame,
        ErrorCode::FrameTooLarge,
        ErrorCode::UnknownOp,
        ErrorCode::InvalidArgument,
        ErrorCode::NotFound,
        ErrorCode::Conflict,
        ErrorCode::ResourceExhausted,
        ErrorCode::Unavailable,
        ErrorCode::Timeout,
        ErrorCode::Internal,
        ErrorCode::VersionUnsupported,
    ];

    pub fn as_str(self) -> &'static str {
        match self {
            ErrorCode::MalformedFrame => "malformed_frame",
            ErrorCode::FrameTooLarge => "frame_too_large",
            ErrorCode::UnknownOp => "unknown_op",
            ErrorCode::InvalidArgument => "invalid_argument",
            ErrorCode::NotFound => "not_found",
            ErrorCode::Conflict => "conflict",
            ErrorCode::ResourceExhausted => "resource_exhausted",
            ErrorCode::Unavailable => "unavailable",
            ErrorCode::Timeout => "timeout",
            ErrorCode::Internal => "internal",
            ErrorCode::VersionUnsupported => "version_unsupported",
        }
    }

    /// Whether the same request may succeed if sent again later.
    pub fn retryable(self) -> bool {
        matches!(
            self,
            ErrorCode::ResourceExhausted | ErrorCode::Unavailable | ErrorCode::Timeout
        )
    }
}

impl std::fmt::Display for ErrorCode {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.as_str())
    }
}

/// The `err` member of a failed reply.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ErrorBody {
    pub code: ErrorCode,
    pub message: String,
    pub retryable: bool,
}

impl ErrorBody {
    pub fn new(code: ErrorCode, message: impl Into<String>) -> Self {
        ErrorBody {
            code,
            message: message.into(),
            retryable: code.retryable(),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn wire_names_match_as_str() {
        for code in ErrorCode::ALL {
            let json = serde_json::to_value(code).unwrap();
            assert_eq!(json, serde_json::Value::String(code.as_str().into()));
        }
    }
}
