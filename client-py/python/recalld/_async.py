"""`AsyncClient`: the asyncio client. One Unix stream per client, many requests in flight.

Each call gets the next request id and a future; a reader task takes reply frames off the
stream and resolves the future with the same id. Frames are encoded and decoded by
`_native.encode`/`_native.decode`, so both clients share one definition of the wire.
If the stream fails, every pending call and every later call raises `RecalldConnectionError`.
"""

from __future__ import annotations

import asyncio
from types import TracebackType
from typing import Any, Coroutine, Dict, Generator, Optional, Tuple, Type

from . import _native
from ._args import Now, SocketPath, decorate_args, hello_args, inspect_args, report_args, resolve_socket
from ._errors import RecalldConnectionError, RecalldError, RecalldTimeoutError, error_from_wire

__all__ = ["AsyncClient"]

# Wait for the socket buffer to drain only when this much is queued.
_DRAIN_ABOVE = 256 * 1024


class AsyncClient:
    """An asyncio connection to the recalld daemon. Create it with
    `await AsyncClient.connect(socket)` (or `async with AsyncClient.connect(socket) as c`).

    `timeout` bounds each call, in seconds (None waits forever). Use it from one event loop.
    """

    server: Dict[str, Any]

    def __init__(
        self,
        reader: asyncio.StreamReader,
        writer: asyncio.StreamWriter,
        socket: str,
        timeout: Optional[float],
    ) -> None:
        """Internal: use `AsyncClient.connect`."""
        self.socket = socket
        self.timeout = timeout
        self.server = {}
        self._reader = reader
        self._writer = writer
        self._loop = asyncio.get_running_loop()
        self._next_id = 0
        self._pending: Dict[int, "asyncio.Future[Dict[str, Any]]"] = {}
        self._failure: Optional[RecalldConnectionError] = None
        self._drain_lock = asyncio.Lock()
        self._reader_task = self._loop.create_task(self._read_loop())

    @classmethod
    def connect(cls, socket: Optional[SocketPath] = None, timeout: Optional[float] = 30.0) -> "_Connecting":
        """Connects and performs `hello`. Await it, or use it as `async with`."""
        return _Connecting(cls._connect(resolve_socket(socket), timeout))

    @classmethod
    async def _connect(cls, path: str, timeout: Optional[float]) -> "AsyncClient":
        try:
            reader, writer = await asyncio.wait_for(asyncio.open_unix_connection(path), timeout)
        except asyncio.TimeoutError:
            raise RecalldConnectionError(f"cannot connect to {path}: timed out") from None
        except OSError as e:
            raise RecalldConnectionError(f"cannot connect to {path}: {e}") from None
        client = cls(reader, writer, path, timeout)
        try:
            client.server = await client.call("hello", hello_args())
        except BaseException:
            await client.close()
            raise
        return client

    async def call(self, op: str, args: Optional[Dict[str, Any]] = None) -> Dict[str, Any]:
        """Sends any op with `args`; returns the reply's `ok` map or raises `RecalldError`."""
        if self._failure is not None:
            raise RecalldConnectionError(self._failure.message)
        self._next_id += 1
        rid = self._next_id
        body = _native.encode({"id": rid, "op": op, "args": {} if args is None else args})
        if len(body) > _native.MAX_FRAME_BYTES:
            raise ValueError(f"request of {len(body)} bytes exceeds the frame limit of {_native.MAX_FRAME_BYTES}")
        fut: "asyncio.Future[Dict[str, Any]]" = self._loop.create_future()
        self._pending[rid] = fut
        timer = None
        try:
            self._writer.write(len(body).to_bytes(4, "big") + body)
            if self._writer.transport.get_write_buffer_size() > _DRAIN_ABOVE:
                async with self._drain_lock:
                    await self._writer.drain()
            if self.timeout is not None:
                timer = self._loop.call_later(self.timeout, self._expire, rid)
            return await fut
        except (ConnectionError, OSError) as e:
            raise RecalldConnectionError(f"cannot write to the daemon: {e}") from None
        finally:
            if timer is not None:
                timer.cancel()
            self._pending.pop(rid, None)

    def _expire(self, rid: int) -> None:
        fut = self._pending.pop(rid, None)
        if fut is not None and not fut.done():
            fut.set_exception(RecalldTimeoutError(f"no reply from the daemon within {self.timeout} s", "timeout", True))

    async def _read_loop(self) -> None:
        reader = self._reader
        try:
            while True:
                header = await reader.readexactly(4)
                size = int.from_bytes(header, "big")
                if size > _native.MAX_FRAME_BYTES:
                    raise ValueError(f"the daemon sent a frame of {size} bytes, over the limit")
                reply = _native.decode(await reader.readexactly(size))
                rid = reply.get("id") if isinstance(reply, dict) else None
                fut = self._pending.pop(rid, None) if isinstance(rid, int) else None
                if fut is None or fut.done():
                    continue  # a reply to a call that timed out or was cancelled
                err = reply.get("err")
                if err is not None:
                    fut.set_exception(
                        error_from_wire(
                            str(err.get("code", "internal")), str(err.get("message", "")), err.get("retryable")
                        )
                    )
                else:
                    fut.set_result(reply.get("ok"))
        except asyncio.IncompleteReadError:
            self._fail("the daemon closed the connection")
        except asyncio.CancelledError:
            self._fail("the client was closed")
            raise
        except OSError as e:
            self._fail(f"cannot read from the daemon: {e}")
        except Exception as e:  # undecodable reply: the stream is out of step
            self._fail(f"the daemon sent an unreadable reply: {e}")

    def _fail(self, message: str) -> None:
        if self._failure is None:
            self._failure = RecalldConnectionError(message)
        self._writer.close()
        pending, self._pending = self._pending, {}
        for fut in pending.values():
            if not fut.done():
                fut.set_exception(RecalldConnectionError(message))

    async def hello(self) -> Dict[str, Any]:
        """Protocol version, server version, limits and capabilities."""
        return await self.call("hello", hello_args())

    async def ping(self, payload: Any = None) -> Dict[str, Any]:
        """A round trip; the daemon echoes `payload`."""
        return await self.call("ping", {} if payload is None else {"payload": payload})

    async def health(self) -> Dict[str, Any]:
        return await self.call("health", {})

    async def stats(self) -> Dict[str, Any]:
        return await self.call("stats", {})

    async def decorate(
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
        """See `Client.decorate`."""
        args = decorate_args(memory, request, now, dry_run, ceiling, agent, user, history)
        return await self.call("decorate", args)

    async def report(self, memory: str, response: Dict[str, Any], *, now: Optional[Now] = None) -> Dict[str, Any]:
        """See `Client.report`."""
        return await self.call("report", report_args(memory, response, now))

    async def export(self, memory: str) -> Dict[str, Any]:
        """Everything stored for `memory`."""
        return await self.call("export", {"memory": memory})

    async def inspect(
        self,
        memory: str,
        *,
        at: Optional[Now] = None,
        decisions: Optional[int] = None,
        episodes: Optional[int] = None,
        curve: Optional[int] = None,
        turns: Optional[Tuple[int, int]] = None,
    ) -> Dict[str, Any]:
        """See `Client.inspect`."""
        return await self.call("inspect", inspect_args(memory, at, decisions, episodes, curve, turns))

    async def memories(self) -> Dict[str, Any]:
        """See `Client.memories`."""
        return await self.call("memories", {})

    @property
    def closed(self) -> bool:
        return self._failure is not None

    async def close(self) -> None:
        """Closes the stream; pending and later calls raise `RecalldConnectionError`."""
        if not self._reader_task.done():
            self._reader_task.cancel()
            try:
                await self._reader_task
            except asyncio.CancelledError:
                pass
        self._fail("the client was closed")
        try:
            await self._writer.wait_closed()
        except (OSError, RecalldError):
            pass

    async def __aenter__(self) -> "AsyncClient":
        return self

    async def __aexit__(
        self,
        exc_type: Optional[Type[BaseException]],
        exc: Optional[BaseException],
        tb: Optional[TracebackType],
    ) -> None:
        await self.close()

    def __repr__(self) -> str:
        return f"<recalld.AsyncClient {self.socket!r} {'closed' if self.closed else 'open'}>"


class _Connecting:
    """What `AsyncClient.connect` returns: awaitable, and usable as `async with`."""

    def __init__(self, coro: Coroutine[Any, Any, AsyncClient]) -> None:
        self._coro = coro
        self._client: Optional[AsyncClient] = None

    def __await__(self) -> Generator[Any, None, AsyncClient]:
        return self._coro.__await__()

    async def __aenter__(self) -> AsyncClient:
        self._client = await self._coro
        return self._client

    async def __aexit__(
        self,
        exc_type: Optional[Type[BaseException]],
        exc: Optional[BaseException],
        tb: Optional[TracebackType],
    ) -> None:
        if self._client is not None:
            await self._client.close()
