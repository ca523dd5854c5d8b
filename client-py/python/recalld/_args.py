"""What both clients share: the default socket path, `now` conversion and op arguments.

Arguments are plain dicts built here once, so `Client` and `AsyncClient` send the same wire.
"""

from __future__ import annotations

import os
from datetime import datetime, timezone
from typing import Any, Dict, Optional, Tuple, Union

from . import _native

__all__ = [
    "default_socket",
    "resolve_socket",
    "to_unix_seconds",
    "hello_args",
    "decorate_args",
    "report_args",
    "inspect_args",
]

Now = Union[float, int, datetime]
SocketPath = Union[str, "os.PathLike[str]"]

VERSION: str = _native.__version__
CLIENT_NAME = f"recalld-py/{VERSION}"


def _strip_scheme(path: str) -> str:
    if path.startswith("unix://"):
        return path[len("unix://") :]
    if path.startswith("unix:"):
        return path[len("unix:") :]
    return path


def default_socket() -> str:
    """The daemon's socket: `$RECALLD_SOCKET` (a path or a `unix://` URL), else
    `$XDG_RUNTIME_DIR/recalld/recalld.sock`, else `/tmp/recalld-<uid>/recalld.sock`."""
    env = os.environ.get("RECALLD_SOCKET")
    if env:
        return _strip_scheme(env)
    runtime = os.environ.get("XDG_RUNTIME_DIR")
    if runtime:
        return os.path.join(runtime, "recalld", "recalld.sock")
    return f"/tmp/recalld-{os.getuid()}/recalld.sock"


def resolve_socket(socket: Optional[SocketPath]) -> str:
    """`socket` as a filesystem path; None means `default_socket()`."""
    if socket is None:
        return default_socket()
    return _strip_scheme(os.fspath(socket))


def to_unix_seconds(now: Now) -> float:
    """`now` as float Unix seconds. A naive `datetime` is taken as UTC."""
    if isinstance(now, datetime):
        if now.tzinfo is None:
            now = now.replace(tzinfo=timezone.utc)
        return now.timestamp()
    if isinstance(now, bool) or not isinstance(now, (int, float)):
        raise TypeError(f"now must be a datetime or Unix seconds (float), not {type(now).__name__}")
    return float(now)


def hello_args() -> Dict[str, Any]:
    return {
        "min_version": _native.MIN_PROTOCOL_VERSION,
        "max_version": _native.PROTOCOL_VERSION,
        "client": CLIENT_NAME,
    }


def decorate_args(
    memory: str,
    request: Dict[str, Any],
    now: Optional[Now],
    dry_run: bool,
    ceiling: Optional[int],
    agent: Optional[str],
    user: Optional[str],
    history: Optional[str],
) -> Dict[str, Any]:
    args: Dict[str, Any] = {"memory": memory, "request": request, "dry_run": bool(dry_run)}
    if now is not None:
        args["now"] = to_unix_seconds(now)
    if ceiling is not None:
        args["ceiling"] = ceiling
    if agent is not None:
        args["agent"] = agent
    if user is not None:
        args["user"] = user
    if history is not None:
        args["history"] = history
    return args


def report_args(memory: str, response: Dict[str, Any], now: Optional[Now]) -> Dict[str, Any]:
    args: Dict[str, Any] = {"memory": memory, "response": response}
    if now is not None:
        args["now"] = to_unix_seconds(now)
    return args


def inspect_args(
    memory: str,
    at: Optional[Now],
    decisions: Optional[int],
    episodes: Optional[int],
    curve: Optional[int],
    turns: Optional[Tuple[int, int]],
) -> Dict[str, Any]:
    args: Dict[str, Any] = {"memory": memory}
    if at is not None:
        args["at"] = to_unix_seconds(at)
    for key, value in (("decisions", decisions), ("episodes", episodes), ("curve", curve)):
        if value is not None:
            args[key] = value
    if turns is not None:
        first, last = turns
        args["turns"] = [first, last]
    return args
