"""`recalld.wrap(client, memory=...)`: the OpenAI and Anthropic SDK clients with memory.

The client's own methods are replaced on the instance (`client.chat.completions.create`, …),
so the SDK's helpers that call them (`.stream()`) go through memory too, and every reply is
the SDK's own type. See `wrap` for the options.
"""

from __future__ import annotations

import asyncio
import functools
import threading
from typing import Any, Callable, Dict, Optional, Tuple

from .._args import Now, SocketPath, resolve_socket
from .._async import AsyncClient
from .._client import Client
from .._errors import RecalldConnectionError
from ._flow import AsyncIO, SyncIO, adrive, adrive_stream, call_flow, drive, drive_stream, stream_flow
from ._openai import ChatCompletions, Responses
from ._options import Options
from ._plain import is_omitted, split_call
from ._streams import async_stream_like, stream_like

__all__ = ["wrap", "Options"]

# (attribute path on the client, API adapter, whether the method can stream)
_OPENAI_METHODS = (
    (("chat", "completions", "create"), ChatCompletions(), True),
    (("chat", "completions", "parse"), ChatCompletions(), False),
    (("responses", "create"), Responses(), True),
    (("responses", "parse"), Responses(), False),
)


def _anthropic_methods() -> Tuple[Tuple[Tuple[str, ...], Any, bool], ...]:
    from ._anthropic import Messages

    return ((("messages", "create"), Messages(), True),)


def wrap(
    client: Any,
    memory: Optional[str] = None,
    *,
    socket: Optional[SocketPath] = None,
    ceiling: Optional[int] = None,
    agent: Optional[str] = None,
    user: Optional[str] = None,
    now: Optional[Now] = None,
    dry_run: bool = False,
    history: Optional[str] = None,
    pass_through: bool = False,
    timeout: Optional[float] = 30.0,
) -> Any:
    """Gives an `openai.OpenAI`, `openai.AsyncOpenAI`, `anthropic.Anthropic` or
    `anthropic.AsyncAnthropic` client memory, and returns it.

    Each `create` (and `.parse`, and the `.stream()` helpers) then decorates the request with
    recalld, calls the model, reports the reply, calls the model again while report says
    `again` (the reply held only the note call), and returns the SDK's own reply without the
    note call. With `stream=True` events pass through as they arrive; the note call's are held
    back and, when it was all the stream held, the second call is streamed instead.

    Options (see `recalld.wrap.Options`) apply to every call; a call overrides them with
    `recalld={"memory": "conv-2", "now": t, ...}`. With no `memory` a call goes to the model
    untouched. `socket` is found as `recalld.Client` finds it. A daemon that cannot be reached
    raises `RecalldConnectionError` at once; with `pass_through=True` the call goes to the
    model unchanged and a warning is logged on the `recalld` logger. Other daemon errors are
    `RecalldError`s with a `.code`, never the SDK's errors.
    """
    opts = Options(memory, ceiling, agent, user, now, dry_run, history, pass_through)
    kind = _kind(client)
    methods = _anthropic_methods() if kind[0] == "anthropic" else _OPENAI_METHODS
    path = resolve_socket(socket)
    if kind[1]:
        connect: Any = _AsyncConnector(path, timeout)
        patch = _patch_async
    else:
        connect = _SyncConnector(path, timeout)
        patch = _patch_sync
    for names, api, streams in methods:
        owner = client
        for name in names[:-1]:
            owner = getattr(owner, name, None)
        if owner is None or not hasattr(owner, names[-1]):
            continue  # an older SDK without this API
        original = getattr(owner, names[-1])
        original = getattr(original, "__recalld_original__", original)  # wrapping twice re-wraps
        setattr(owner, names[-1], patch(original, api, streams, opts, connect))
    if kind[0] == "anthropic":
        _patch_anthropic_stream(client.messages, kind[1])
    return client


def _patch_anthropic_stream(messages: Any, is_async: bool) -> None:
    """`client.messages.stream(...)`: the Python SDK posts there directly, not through `create`,
    so it is rebuilt on the wrapped `create(stream=True)` with the SDK's own stream manager.
    With `output_format` (structured output, parsed by the helper) it stays the SDK's own."""
    from anthropic import NOT_GIVEN
    from anthropic.lib.streaming import AsyncMessageStreamManager, MessageStreamManager

    original = getattr(messages.stream, "__recalld_original__", messages.stream)

    @functools.wraps(original)
    def stream(*args: Any, **kwargs: Any) -> Any:
        output_format = kwargs.get("output_format")
        if args or (output_format is not None and not is_omitted(output_format)):
            return original(*args, **kwargs)
        kwargs.pop("output_format", None)
        create = messages.create
        if is_async:
            return AsyncMessageStreamManager(create(**kwargs, stream=True), output_format=NOT_GIVEN)
        return MessageStreamManager(lambda: create(**kwargs, stream=True), output_format=NOT_GIVEN)

    stream.__recalld_original__ = original  # type: ignore[attr-defined]
    messages.stream = stream


def _kind(client: Any) -> Tuple[str, bool]:
    """("openai" | "anthropic", is async) by the client's class and its bases."""
    for cls in type(client).__mro__:
        top = cls.__module__.split(".")[0]
        if top in ("openai", "anthropic") and cls.__name__.endswith(("OpenAI", "Anthropic")):
            return top, cls.__name__.startswith("Async")
    raise TypeError(
        f"recalld.wrap takes an openai.OpenAI, openai.AsyncOpenAI, anthropic.Anthropic or "
        f"anthropic.AsyncAnthropic client, not {type(client).__module__}.{type(client).__name__}"
    )


def _per_call(kwargs: Dict[str, Any], opts: Options) -> Options:
    return opts.merged(kwargs.pop("recalld", None))


def _patch_sync(original: Callable[..., Any], api: Any, streams: bool, opts: Options, connect: Any) -> Any:
    @functools.wraps(original)
    def method(*args: Any, **kwargs: Any) -> Any:
        if args:
            raise TypeError("the wrapped SDK method takes keyword arguments only")
        call_opts = _per_call(kwargs, opts)
        request, transport = split_call(kwargs)
        io = SyncIO(connect, original)
        if streams and transport.get("stream"):
            events = drive_stream(stream_flow(api, request, transport, call_opts), io)
            _, first = next(events)
            return stream_like(first, events)
        return drive(call_flow(api, request, transport, call_opts), io)

    method.__recalld_original__ = original  # type: ignore[attr-defined]
    return method


def _patch_async(original: Callable[..., Any], api: Any, streams: bool, opts: Options, connect: Any) -> Any:
    @functools.wraps(original)
    async def method(*args: Any, **kwargs: Any) -> Any:
        if args:
            raise TypeError("the wrapped SDK method takes keyword arguments only")
        call_opts = _per_call(kwargs, opts)
        request, transport = split_call(kwargs)
        io = AsyncIO(connect, original)
        if streams and transport.get("stream"):
            events = adrive_stream(stream_flow(api, request, transport, call_opts), io)
            _, first = await events.__anext__()
            return async_stream_like(first, events)
        return await adrive(call_flow(api, request, transport, call_opts), io)

    method.__recalld_original__ = original  # type: ignore[attr-defined]
    return method


def _unreachable(path: str, error: Exception) -> RecalldConnectionError:
    return RecalldConnectionError(
        f"recalld is not reachable at {path} ({error}); start it with `recalld serve`, "
        f"or wrap the client with pass_through=True to call the model without memory"
    )


class _SyncConnector:
    """One blocking client shared by the wrapped methods; reconnects after a failure."""

    def __init__(self, path: str, timeout: Optional[float]) -> None:
        self.path = path
        self.timeout = timeout
        self._client: Optional[Client] = None
        self._lock = threading.Lock()

    def __call__(self) -> Client:
        with self._lock:
            if self._client is None or self._client.closed:
                try:
                    self._client = Client(self.path, timeout=self.timeout)
                except RecalldConnectionError as e:
                    raise _unreachable(self.path, e) from None
            return self._client


class _AsyncConnector:
    """One asyncio client per event loop; reconnects after a failure."""

    def __init__(self, path: str, timeout: Optional[float]) -> None:
        self.path = path
        self.timeout = timeout
        self._clients: Dict[int, AsyncClient] = {}

    async def __call__(self) -> AsyncClient:
        loop = id(asyncio.get_running_loop())
        client = self._clients.get(loop)
        if client is None or client.closed:
            try:
                client = await AsyncClient.connect(self.path, timeout=self.timeout)
            except RecalldConnectionError as e:
                raise _unreachable(self.path, e) from None
            self._clients[loop] = client
        return client


