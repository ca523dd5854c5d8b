"""Argument building shared by both clients: `now`, the default socket, decorate's fields."""

from __future__ import annotations

from datetime import datetime, timedelta, timezone

import pytest

import recalld
from recalld._args import decorate_args, default_socket, hello_args, report_args, resolve_socket


def test_now_accepts_seconds_and_datetimes() -> None:
    assert recalld.to_unix_seconds(1767225600) == 1767225600.0
    assert isinstance(recalld.to_unix_seconds(1767225600), float)
    naive = datetime(2026, 1, 1, 0, 0, 0, 500000)
    assert recalld.to_unix_seconds(naive) == 1767225600.5  # naive is UTC
    aware = datetime(2026, 1, 1, 1, 0, tzinfo=timezone(timedelta(hours=1)))
    assert recalld.to_unix_seconds(aware) == 1767225600.0
    with pytest.raises(TypeError):
        recalld.to_unix_seconds("2026-01-01")  # type: ignore[arg-type]
    with pytest.raises(TypeError):
        recalld.to_unix_seconds(True)


def test_default_socket(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("RECALLD_SOCKET", "unix:///run/x/recalld.sock")
    assert default_socket() == "/run/x/recalld.sock"
    monkeypatch.setenv("RECALLD_SOCKET", "/srv/r.sock")
    assert default_socket() == "/srv/r.sock"
    monkeypatch.delenv("RECALLD_SOCKET")
    monkeypatch.setenv("XDG_RUNTIME_DIR", "/run/user/1000")
    assert default_socket() == "/run/user/1000/recalld/recalld.sock"
    monkeypatch.delenv("XDG_RUNTIME_DIR")
    import os

    assert default_socket() == f"/tmp/recalld-{os.getuid()}/recalld.sock"
    assert resolve_socket("unix:///a/b.sock") == "/a/b.sock"


def test_hello_names_this_client() -> None:
    assert hello_args() == {"min_version": 1, "max_version": 1, "client": f"recalld-py/{recalld.__version__}"}


def test_decorate_args_leave_out_what_is_not_given() -> None:
    req = {"model": "m", "messages": []}
    assert decorate_args("m1", req, None, False, None, None, None, None) == {
        "memory": "m1",
        "request": req,
        "dry_run": False,
    }
    full = decorate_args("m1", req, datetime(2026, 1, 1), True, 50_000, "bot", "ada", "delta")
    assert full == {
        "memory": "m1",
        "request": req,
        "dry_run": True,
        "now": 1767225600.0,
        "ceiling": 50_000,
        "agent": "bot",
        "user": "ada",
        "history": "delta",
    }
    assert report_args("m1", {"x": 1}, 5) == {"memory": "m1", "response": {"x": 1}, "now": 5.0}
