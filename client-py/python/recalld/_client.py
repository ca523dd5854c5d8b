"""`Client`: the blocking client. One socket, thread-safe; the GIL is released while it waits."""

from __future__ import annotations

from types import TracebackType
from typing import Any, Dict, Optional, Tuple, Type

from . import _native
from ._args import Now, SocketPath, decorate_args, hello_args, inspect_args, report_args, resolve_socket

__all__ = ["Client"]


class Client:
    """A blocking connection to the recalld daemon.

    `socket` is a path or a `unix://` URL (default: `recalld.default_socket()`); `timeout` bounds
    each wait for the daemon, in seconds (None waits forever). Connecting performs `hello`; its
    reply is kept in `server`. Safe to share between threads (calls take turns on the socket).
    """

    server: Dict[str, Any]

    def __init__(self, socket: Optional[SocketPath] = None, timeout: Optional[float] = 30.0) -> None:
        self.socket = resolve_socket(socket)
        self.timeout = timeout
        self._conn = _native.Connection.connect(self.socket, timeout)
        try:
            self.server = self._conn.call("hello", hello_args())
        except BaseException:
            self._conn.close()
            raise

    def call(self, op: str, args: Optional[Dict[str, Any]] = None) -> Dict[str, Any]:
        """Sends any op with `args`; returns the reply's `ok` map or raises `RecalldError`."""
        return self._conn.call(op, args)

    def hello(self) -> Dict[str, Any]:
        """Protocol version, server version, limits and capabilities."""
        return self._conn.call("hello", hello_args())

    def ping(self, payload: Any = None) -> Dict[str, Any]:
        """A round trip; the daemon echoes `payload`."""
        return self._conn.call("ping", {} if payload is None else {"payload": payload})

    def health(self) -> Dict[str, Any]:
        return self._conn.call("health", {})

    def stats(self) -> Dict[str, Any]:
        return self._conn.call("stats", {})

    def decorate(
        self,
        memory: str,
        request: Dict[str, Any],
        *,
        now: Optional[Now] = None,
        dry_run: bool = False,
        ceiling: Optional[int] = None,
        agent: Optional[str] = None,
        user: Optional[str] = None,
        history: Optional[str] = None,
    ) -> Dict[str, Any]:
        """Stores what is new in `request` (a Chat Completions or Responses request dict) and
        returns `{"request": <what to send the model>, "info": {...}}`."""
        args = decorate_args(memory, request, now, dry_run, ceiling, agent, user, history)
        return self._conn.call("decorate", args)

    def report(self, memory: str, response: Dict[str, Any], *, now: Optional[Now] = None) -> Dict[str, Any]:
        """Stores the model's reply; returns `{"response": <reply without the note call>,
        "again": bool}` (`again`: the reply was only the note call; call the model once more)."""
        return self._conn.call("report", report_args(memory, response, now))

    def export(self, memory: str) -> Dict[str, Any]:
        """Everything stored for `memory`."""
        return self._conn.call("export", {"memory": memory})

    def inspect(
        self,
        memory: str,
        *,
        at: Optional[Now] = None,
        decisions: Optional[int] = None,
        episodes: Optional[int] = None,
        curve: Optional[int] = None,
        turns: Optional[Tuple[int, int]] = None,
    ) -> Dict[str, Any]:
        """`memory` as it stands, read-only: its episodes with their activation as of `at` (a
        datetime or Unix seconds; default now) and its curve, facts, entities, the last
        `decisions` decorates' decisions (8; at most 32), the lane, and with `turns=(first,
        last)` the messages of those turns. `episodes` (200) bounds the episodes out of view
        listed; `curve` (48) is the points of each curve (0: none)."""
        return self._conn.call("inspect", inspect_args(memory, at, decisions, episodes, curve, turns))

    def memories(self) -> Dict[str, Any]:
        """`{"memories": [...]}`: this user's own memories, from their records."""
        return self._conn.call("memories", {})

    def close(self) -> None:
        """Closes the socket; later calls raise `RecalldConnectionError`."""
        self._conn.close()

    @property
    def closed(self) -> bool:
        return self._conn.closed

    def __enter__(self) -> "Client":
        return self

    def __exit__(
        self,
        exc_type: Optional[Type[BaseException]],
        exc: Optional[BaseException],
        tb: Optional[TracebackType],
    ) -> None:
        self.close()

    def __repr__(self) -> str:
        return f"<recalld.Client {self.socket!r} {'closed' if self.closed else 'open'}>"
