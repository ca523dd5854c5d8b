"""Conformance vectors shared with the Rust and TypeScript suites: `NAME.json` encodes to
`NAME.msgpack` byte for byte, and the MessagePack decodes to the JSON value."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from recalld import _native

VECTORS = Path(__file__).resolve().parents[2] / "protocol" / "vectors"
NAMES = sorted(p.stem for p in VECTORS.glob("*.json"))


def test_vectors_are_present() -> None:
    assert len(NAMES) >= 7, f"vectors missing from {VECTORS}"


@pytest.mark.parametrize("name", NAMES)
def test_encode_matches_bytes(name: str) -> None:
    value = json.loads((VECTORS / f"{name}.json").read_text())
    assert _native.encode(value) == (VECTORS / f"{name}.msgpack").read_bytes()


@pytest.mark.parametrize("name", NAMES)
def test_decode_matches_json(name: str) -> None:
    value = json.loads((VECTORS / f"{name}.json").read_text())
    decoded = _native.decode((VECTORS / f"{name}.msgpack").read_bytes())
    assert decoded == value
    # == says 1 == 1.0; the types must survive too.
    assert _types(decoded) == _types(value)


def _types(v: object) -> object:
    if isinstance(v, dict):
        return {k: _types(x) for k, x in v.items()}
    if isinstance(v, list):
        return [_types(x) for x in v]
    return type(v).__name__
