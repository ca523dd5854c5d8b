"""SDK objects to plain data (what the socket carries) and back."""

from __future__ import annotations

from typing import Any, Dict, Mapping, Tuple

#: Keyword arguments of SDK methods that shape the HTTP call, not the request body: they are
#: kept out of decorate and given back to the SDK as they came.
TRANSPORT_KEYS = ("extra_headers", "extra_query", "extra_body", "timeout", "stream")


def is_omitted(value: Any) -> bool:
    """The SDKs' "argument not given" sentinels (`Omit`, `NotGiven`)."""
    return type(value).__name__ in ("Omit", "NotGiven", "NotGivenOr")


def plain(value: Any) -> Any:
    """`value` as maps, lists and scalars: pydantic models dumped, iterables listed."""
    if isinstance(value, (str, bytes, int, float, bool)) or value is None:
        return value
    if hasattr(value, "model_dump"):
        return value.model_dump(mode="json", exclude_unset=True)
    if isinstance(value, Mapping):
        return {str(k): plain(v) for k, v in value.items() if not is_omitted(v)}
    if isinstance(value, (list, tuple)) or hasattr(value, "__iter__"):
        return [plain(v) for v in value]
    return value


def split_call(kwargs: Dict[str, Any]) -> Tuple[Dict[str, Any], Dict[str, Any]]:
    """An SDK call's keyword arguments as (request body for decorate, transport arguments)."""
    request: Dict[str, Any] = {}
    transport: Dict[str, Any] = {}
    for key, value in kwargs.items():
        if is_omitted(value):
            continue
        if key in TRANSPORT_KEYS or isinstance(value, type):
            # (a class, e.g. `.parse(response_format=Model)`, is for the SDK, not the wire)
            transport[key] = value
        else:
            request[key] = plain(value)
    return request, transport


def dump(obj: Any) -> Dict[str, Any]:
    """An SDK reply or event as the JSON the API sent. (Without serializer warnings: a
    `.parse()` reply's type declares its parsed fields `None` and holds the parsed object.)"""
    if isinstance(obj, dict):
        return obj
    return obj.model_dump(mode="json", exclude_unset=True, warnings=False)


def rebuild_like(obj: Any, data: Dict[str, Any]) -> Any:
    """`data` as an object of `obj`'s SDK type, built as the SDK builds replies: without
    validation (the SDKs' `construct` is recursive), so a reply the SDK took is never refused
    here, and a `.parse()` reply's type (`ParsedChatCompletion[~T]`) takes its parsed fields."""
    if isinstance(obj, dict):
        return data
    return type(obj).construct(**data)
