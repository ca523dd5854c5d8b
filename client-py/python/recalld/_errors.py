"""Exceptions. Every failure the client reports is a `RecalldError` with a stable `.code`.

Codes are the closed list of the wire protocol (`protocol/src/error.rs`). Each family has a
subclass, so callers can catch what they can handle; an unknown code from a newer daemon
still arrives as a plain `RecalldError`.
"""

from __future__ import annotations

from typing import Dict, Optional, Type

__all__ = [
    "ERROR_CODES",
    "RecalldError",
    "ProtocolError",
    "InvalidArgumentError",
    "NotFoundError",
    "ConflictError",
    "ResourceExhaustedError",
    "UnavailableError",
    "RecalldConnectionError",
    "RecalldTimeoutError",
    "InternalError",
    "error_from_wire",
    "connection_error",
]

#: The error codes a reply can carry, as `protocol/src/error.rs` lists them.
ERROR_CODES = (
    "malformed_frame",
    "frame_too_large",
    "unknown_op",
    "invalid_argument",
    "not_found",
    "conflict",
    "resource_exhausted",
    "unavailable",
    "timeout",
    "internal",
    "version_unsupported",
)

_RETRYABLE = frozenset({"resource_exhausted", "unavailable", "timeout"})


class RecalldError(Exception):
    """A request failed. `.code` is the stable wire code, `.message` is for people,
    `.retryable` says whether the same request may succeed later."""

    code: str
    message: str
    retryable: bool

    def __init__(self, message: str, code: str = "internal", retryable: Optional[bool] = None) -> None:
        super().__init__(message)
        self.message = message
        self.code = code
        self.retryable = code in _RETRYABLE if retryable is None else bool(retryable)

    def __str__(self) -> str:
        return f"{self.code}: {self.message}"

    def __repr__(self) -> str:
        return f"{type(self).__name__}(code={self.code!r}, message={self.message!r}, retryable={self.retryable!r})"


class ProtocolError(RecalldError):
    """The two sides do not understand each other: `malformed_frame`, `frame_too_large`,
    `unknown_op`, `version_unsupported`."""


class InvalidArgumentError(RecalldError):
    """`invalid_argument`: an argument is missing, of the wrong type, or out of range."""


class NotFoundError(RecalldError):
    """`not_found`: the named thing does not exist."""


class ConflictError(RecalldError):
    """`conflict`: the request conflicts with stored state."""


class ResourceExhaustedError(RecalldError):
    """`resource_exhausted`: a limit was reached; retry later."""


class UnavailableError(RecalldError):
    """`unavailable`: the daemon cannot serve now; retry later."""


class RecalldConnectionError(UnavailableError):
    """The socket failed: the daemon is not running, went away, or the connection was closed.
    Code `unavailable`. Open a new client to retry."""

    def __init__(self, message: str, code: str = "unavailable", retryable: Optional[bool] = True) -> None:
        super().__init__(message, code, retryable)


class RecalldTimeoutError(RecalldError):
    """`timeout`: no reply (or no result) within the deadline."""


class InternalError(RecalldError):
    """`internal`: a bug or unexpected failure inside the daemon."""


_BY_CODE: Dict[str, Type[RecalldError]] = {
    "malformed_frame": ProtocolError,
    "frame_too_large": ProtocolError,
    "unknown_op": ProtocolError,
    "version_unsupported": ProtocolError,
    "invalid_argument": InvalidArgumentError,
    "not_found": NotFoundError,
    "conflict": ConflictError,
    "resource_exhausted": ResourceExhaustedError,
    "unavailable": UnavailableError,
    "timeout": RecalldTimeoutError,
    "internal": InternalError,
}


def error_from_wire(code: str, message: str, retryable: Optional[bool] = None) -> RecalldError:
    """The exception for an `err` reply body."""
    return _BY_CODE.get(code, RecalldError)(message, code, retryable)


def connection_error(message: str) -> RecalldConnectionError:
    """The exception for a failed socket."""
    return RecalldConnectionError(message)
