"""The wrapped call, written once for sync and async: decorate → model → report → again.

The flow is a generator that yields *effects* (`Decorate`, `Create`, `Next`, `Report`, `Emit`)
and receives their results; a driver performs them. `drive` / `drive_stream` perform them with
blocking calls, `adrive` / `adrive_stream` with awaits, so the protocol's logic (pass-through,
the again loop, holding back note deltas) lives in one place for both kinds of client.
A failed effect is thrown back into the flow at the `yield` that asked for it.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass
from typing import Any, AsyncIterator, Callable, Dict, Generator, Iterator, List, Optional, Tuple

from .._errors import RecalldConnectionError, RecalldError
from ._options import Options

log = logging.getLogger("recalld")

#: How many times one call goes back to the model on `again` before giving up and returning
#: the reply as it is (a model that keeps answering with only the note).
MAX_AGAIN = 3

_END = object()  # `Next` result: the model's stream is exhausted


@dataclass
class Decorate:
    args: Dict[str, Any]


@dataclass
class Report:
    args: Dict[str, Any]


@dataclass
class Create:
    """Call the SDK's own method with `request` (a dict of its keyword arguments)."""

    request: Dict[str, Any]


@dataclass
class Next:
    """The next event of an SDK stream, or `_END`."""

    stream: Any


@dataclass
class Close:
    stream: Any


@dataclass
class Emit:
    """Hand one event to the caller of a streamed call."""

    event: Any


@dataclass
class Opened:
    """The first model stream is open: the caller's stream object can be returned now."""

    stream: Any


Effect = Any
Flow = Generator[Effect, Any, Any]


def _recalld_failed(opts: Options, stage: str, error: RecalldError) -> None:
    """Re-raises `error` unless the wrapper passes through when the daemon is unreachable."""
    if opts.pass_through and isinstance(error, RecalldConnectionError):
        log.warning("recalld unreachable at %s, the call goes to the model without memory: %s", stage, error)
        return
    raise error


def _marked(api: Any, request: Dict[str, Any]) -> Dict[str, Any]:
    mark = getattr(api, "mark", None)
    return mark(request) if mark is not None else request


def call_flow(api: Any, request: Dict[str, Any], transport: Dict[str, Any], opts: Options) -> Flow:
    """One non-streamed call. Returns the SDK's reply object without the note call."""
    if opts.memory is None:
        return (yield Create({**request, **transport}))
    try:
        decorated = yield Decorate(opts.decorate_args(_marked(api, request)))
    except RecalldError as e:
        _recalld_failed(opts, "decorate", e)
        return (yield Create({**request, **transport}))
    for attempt in range(MAX_AGAIN + 1):
        reply = yield Create({**decorated["request"], **transport})
        if opts.dry_run:
            return reply
        dumped = api.dump(reply)
        try:
            result = yield Report(opts.report_args(dumped))
        except RecalldError as e:
            _recalld_failed(opts, "report", e)
            return reply
        if not result["again"] or attempt == MAX_AGAIN:
            return api.rebuild(reply, dumped, result["response"])
        try:
            decorated = yield Decorate(opts.decorate_args(_marked(api, request)))
        except RecalldError as e:
            _recalld_failed(opts, "decorate", e)
            decorated = {"request": request, "info": {}}
    raise AssertionError("unreachable")


def stream_flow(api: Any, request: Dict[str, Any], transport: Dict[str, Any], opts: Options) -> Flow:
    """One streamed call: yields `Opened` once, then `Emit`s. Events pass through as they come,
    except the note call's, which are held back; the assembled reply is reported at the end and,
    when the stream held only the note call, the second call is streamed in its place."""
    if opts.memory is None:
        yield from _pass_stream(api, {**request, **transport})
        return
    try:
        decorated = yield Decorate(opts.decorate_args(_marked(api, request)))
    except RecalldError as e:
        _recalld_failed(opts, "decorate", e)
        yield from _pass_stream(api, {**request, **transport})
        return
    opened = False
    for attempt in range(MAX_AGAIN + 1):
        sent = decorated["request"]
        note = api.note_tool(sent) if decorated["info"].get("note_ask") else None
        stream = yield Create({**sent, **transport})
        if not opened:
            yield Opened(stream)
            opened = True
        filt = api.stream_filter(note)
        try:
            while True:
                event = yield Next(stream)
                if event is _END:
                    break
                for out in filt.feed(event):
                    yield Emit(out)
        finally:
            yield Close(stream)
        if opts.dry_run:
            for out in filt.finish(None):
                yield Emit(out)
            return
        try:
            result = yield Report(opts.report_args(filt.reply()))
        except RecalldError as e:
            _recalld_failed(opts, "report", e)
            result = None
        if result is not None and result["again"] and not filt.visible and attempt < MAX_AGAIN:
            try:
                decorated = yield Decorate(opts.decorate_args(_marked(api, request)))
            except RecalldError as e:
                _recalld_failed(opts, "decorate", e)
                decorated = {"request": request, "info": {}}
            continue
        for out in filt.finish(result and result["response"]):
            yield Emit(out)
        return


def _pass_stream(api: Any, request: Dict[str, Any]) -> Flow:
    stream = yield Create(request)
    yield Opened(stream)
    try:
        while True:
            event = yield Next(stream)
            if event is _END:
                return
            yield Emit(event)
    finally:
        yield Close(stream)


# --- drivers -------------------------------------------------------------------------------


class SyncIO:
    """Performs effects with a blocking `recalld.Client` and the SDK's sync method."""

    def __init__(self, connect: Callable[[], Any], create: Callable[..., Any]) -> None:
        self._connect = connect
        self._create = create

    def perform(self, effect: Effect) -> Any:
        if isinstance(effect, Next):
            return next(iter_of(effect.stream), _END)
        if isinstance(effect, Create):
            return self._create(**effect.request)
        if isinstance(effect, Decorate):
            return self._connect().call("decorate", effect.args)
        if isinstance(effect, Report):
            return self._connect().call("report", effect.args)
        if isinstance(effect, Close):
            effect.stream.close()
            return None
        raise TypeError(f"unknown effect {effect!r}")


class AsyncIO:
    """Performs effects with a `recalld.AsyncClient` and the SDK's async method."""

    def __init__(self, connect: Callable[[], Any], create: Callable[..., Any]) -> None:
        self._connect = connect
        self._create = create

    async def perform(self, effect: Effect) -> Any:
        if isinstance(effect, Next):
            try:
                return await aiter_of(effect.stream).__anext__()
            except StopAsyncIteration:
                return _END
        if isinstance(effect, Create):
            return await self._create(**effect.request)
        if isinstance(effect, Decorate):
            return await (await self._connect()).call("decorate", effect.args)
        if isinstance(effect, Report):
            return await (await self._connect()).call("report", effect.args)
        if isinstance(effect, Close):
            await effect.stream.close()
            return None
        raise TypeError(f"unknown effect {effect!r}")


def iter_of(stream: Any) -> Iterator[Any]:
    """One iterator per SDK stream (iterating a stream twice would restart nothing)."""
    it = getattr(stream, "_recalld_iter", None)
    if it is None:
        it = iter(stream)
        stream._recalld_iter = it
    return it


def aiter_of(stream: Any) -> AsyncIterator[Any]:
    it = getattr(stream, "_recalld_iter", None)
    if it is None:
        it = stream.__aiter__()
        stream._recalld_iter = it
    return it


def _step(flow: Flow, value: Any, error: Optional[BaseException]) -> Tuple[bool, Any]:
    """Advances the flow; (True, result) when it returned."""
    try:
        return False, (flow.throw(error) if error is not None else flow.send(value))
    except StopIteration as stop:
        return True, stop.value


def drive(flow: Flow, io: SyncIO) -> Any:
    value: Any = None
    error: Optional[BaseException] = None
    while True:
        done, effect = _step(flow, value, error)
        if done:
            return effect
        value, error = None, None
        try:
            value = io.perform(effect)
        except Exception as e:
            error = e


async def adrive(flow: Flow, io: AsyncIO) -> Any:
    value: Any = None
    error: Optional[BaseException] = None
    while True:
        done, effect = _step(flow, value, error)
        if done:
            return effect
        value, error = None, None
        try:
            value = await io.perform(effect)
        except Exception as e:
            error = e


def drive_stream(flow: Flow, io: SyncIO) -> Iterator[Tuple[str, Any]]:
    """Yields ("opened", stream) once, then ("event", event) for each emitted event. Closing it
    early closes the model's stream (the flow's `finally` asks for `Close`)."""
    value: Any = None
    error: Optional[BaseException] = None
    try:
        while True:
            done, effect = _step(flow, value, error)
            if done:
                return
            value, error = None, None
            if isinstance(effect, Opened):
                yield "opened", effect.stream
            elif isinstance(effect, Emit):
                yield "event", effect.event
            else:
                try:
                    value = io.perform(effect)
                except Exception as e:
                    error = e
    finally:
        _close_flow(flow, io.perform)


async def adrive_stream(flow: Flow, io: AsyncIO) -> AsyncIterator[Tuple[str, Any]]:
    value: Any = None
    error: Optional[BaseException] = None
    try:
        while True:
            done, effect = _step(flow, value, error)
            if done:
                return
            value, error = None, None
            if isinstance(effect, Opened):
                yield "opened", effect.stream
            elif isinstance(effect, Emit):
                yield "event", effect.event
            else:
                try:
                    value = await io.perform(effect)
                except Exception as e:
                    error = e
    finally:
        pending = _closing_effects(flow)
        for effect in pending:
            try:
                await io.perform(effect)
            except Exception:
                pass


def _closing_effects(flow: Flow) -> List[Effect]:
    """Runs a flow that was abandoned mid-stream to its end, collecting the `Close` effects its
    `finally` blocks ask for (other effects are not performed)."""
    effects: List[Effect] = []
    try:
        effect = flow.throw(GeneratorExit)
        while True:
            if isinstance(effect, Close):
                effects.append(effect)
            effect = flow.send(None)
    except (StopIteration, GeneratorExit):
        pass
    except RuntimeError:
        pass
    return effects


def _close_flow(flow: Flow, perform: Callable[[Effect], Any]) -> None:
    for effect in _closing_effects(flow):
        try:
            perform(effect)
        except Exception:
            pass
