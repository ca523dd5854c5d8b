"""The stream a wrapped `create(stream=True)` returns: an instance of the SDK's own stream class
(`openai.Stream`, `anthropic.AsyncStream`, …) whose events come from the wrapper's flow, so
`isinstance` checks, `with`, iteration and the SDK's stream helpers work unchanged."""

from __future__ import annotations

from typing import Any, AsyncIterator, Dict, Iterator, Tuple

_TYPES: Dict[type, type] = {}


def _events(tagged: Iterator[Tuple[str, Any]]) -> Iterator[Any]:
    try:
        for _, event in tagged:
            yield event
    finally:
        tagged.close()  # type: ignore[attr-defined]


async def _aevents(tagged: AsyncIterator[Tuple[str, Any]]) -> AsyncIterator[Any]:
    try:
        async for _, event in tagged:
            yield event
    finally:
        await tagged.aclose()  # type: ignore[attr-defined]


def _subclass(base: type, is_async: bool) -> type:
    cls = _TYPES.get(base)
    if cls is not None:
        return cls

    def init(self: Any, first: Any, events: Any) -> None:
        # The SDK's __init__ is not called: the events do not come from one HTTP response.
        self.response = first.response
        self._recalld_first = first
        self._recalld_events = events

    namespace: Dict[str, Any] = {
        "__init__": init,
        "_iterator": property(lambda self: self._recalld_events),
        "__module__": __name__,
        "__doc__": f"A {base.__name__} whose events pass through recalld (note calls held back).",
    }
    if is_async:

        async def aclose(self: Any) -> None:
            await self._recalld_events.aclose()

        namespace["close"] = aclose
    else:

        def close(self: Any) -> None:
            self._recalld_events.close()

        namespace["close"] = close
    cls = type(f"Recalld{base.__name__}", (base,), namespace)
    _TYPES[base] = cls
    return cls


def stream_like(first: Any, tagged: Iterator[Tuple[str, Any]]) -> Any:
    """A stream of `first`'s class (the first model stream) yielding the flow's events."""
    return _subclass(type(first), False)(first, _events(tagged))


def async_stream_like(first: Any, tagged: AsyncIterator[Tuple[str, Any]]) -> Any:
    return _subclass(type(first), True)(first, _aevents(tagged))
