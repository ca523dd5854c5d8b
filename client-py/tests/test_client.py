"""`Client` and `AsyncClient` against a real daemon (see conftest.py)."""

from __future__ import annotations

import asyncio
import threading
import time
from datetime import datetime, timezone
from typing import Any, List

import pytest

import recalld
from conftest import Daemon, chat_completion, chat_request

NESTED = {
    "text": "héllo wörld ✓ 日本語 😀",
    "neg": -42,
    "big": 2**63 - 1,
    "f": 0.25,
    "one": 1.0,
    "none": None,
    "flags": [True, False, None],
    "nested": {"a": [], "b": {}, "c": [[1, [2, [3.5, {"d": "e"}]]]]},
}


def test_hello(client: recalld.Client) -> None:
    for hello in (client.server, client.hello()):
        assert hello["protocol_version"] == recalld.PROTOCOL_VERSION
        assert hello["server"] == "recalld"
        assert isinstance(hello["server_version"], str)
        assert hello["limits"]["max_memory_id_bytes"] == 256
        assert {"hello", "ping", "decorate", "report", "export"} <= set(hello["capabilities"])


def test_ping_echoes_a_nested_payload_with_its_types(client: recalld.Client) -> None:
    echoed = client.ping(NESTED)["payload"]
    assert echoed == NESTED
    assert type(echoed["one"]) is float and type(echoed["neg"]) is int
    assert list(echoed) == list(NESTED)


def test_health_and_stats_are_maps(client: recalld.Client) -> None:
    assert isinstance(client.health(), dict)
    assert isinstance(client.stats(), dict)


def test_decorate_returns_request_and_info(client: recalld.Client, memory_id: str) -> None:
    request = chat_request("Remember: the deploy key rotates every Friday.")
    out = client.decorate(memory_id, request)
    assert set(out) == {"request", "info"}
    assert isinstance(out["info"], dict)
    sent = out["request"]
    assert sent["model"] == request["model"]
    assert sent["temperature"] == request["temperature"]
    texts = [m.get("content") for m in sent["messages"]]
    assert "Remember: the deploy key rotates every Friday." in texts


def test_report_returns_response_and_again(client: recalld.Client, memory_id: str) -> None:
    client.decorate(memory_id, chat_request("Who owns checkout?"))
    out = client.report(memory_id, chat_completion("Dana owns checkout."))
    assert set(out) == {"response", "again"}
    assert out["again"] is False
    assert out["response"]["choices"][0]["message"]["content"] == "Dana owns checkout."


def test_export_has_the_messages(client: recalld.Client, memory_id: str) -> None:
    client.decorate(memory_id, chat_request("The staging database is called orchid."))
    client.report(memory_id, chat_completion("Noted: staging is orchid."))
    exported = client.export(memory_id)
    assert exported["memory"] == memory_id
    messages = exported["messages"]
    assert len(messages) >= 2
    assert all("role" in m for m in messages)
    roles = [m["role"] for m in messages]
    assert "user" in roles and "assistant" in roles


def test_inspect_shows_the_memory_and_the_messages_of_a_turn(client: recalld.Client, memory_id: str) -> None:
    client.decorate(memory_id, chat_request("The staging database is called orchid."), now=1767225600.0)
    client.report(memory_id, chat_completion("Noted: staging is orchid."), now=1767225601.0)
    out = client.inspect(memory_id, at=datetime(2026, 1, 2, tzinfo=timezone.utc), turns=(1, 1), decisions=1)
    assert out["memory"] == memory_id
    assert out["at"] == 1767312000.0
    assert out["record"]["turns"] == 1
    assert [d["turn"] for d in out["decisions"]] == [1]
    texts = [m["text"] for m in out["messages"]]
    assert texts == ["The staging database is called orchid.", "Noted: staging is orchid."]
    with pytest.raises(recalld.NotFoundError):
        client.inspect(memory_id + "-never")


def test_memories_lists_this_users_own(client: recalld.Client, memory_id: str) -> None:
    client.decorate(memory_id, chat_request("hello"))
    listed = {m["memory"]: m for m in client.memories()["memories"]}
    assert listed[memory_id]["turns"] == 1, "named as the caller names it"


def test_dry_run_stores_nothing(client: recalld.Client, memory_id: str) -> None:
    client.decorate(memory_id, chat_request("first"))
    before = len(client.export(memory_id)["messages"])
    client.decorate(memory_id, chat_request("first", "second, dry"), dry_run=True)
    assert len(client.export(memory_id)["messages"]) == before


def test_now_as_datetime_is_accepted(client: recalld.Client, memory_id: str) -> None:
    out = client.decorate(memory_id, chat_request("hello"), now=datetime(2026, 1, 1, 12, 0))
    assert set(out) == {"request", "info"}
    aware = datetime(2026, 1, 1, 12, 1, tzinfo=timezone.utc)
    assert set(client.report(memory_id, chat_completion("hi"), now=aware)) == {"response", "again"}
    out = client.decorate(memory_id, chat_request("hello", "again"), now=1767269000.5)
    assert set(out) == {"request", "info"}


@pytest.mark.parametrize("memory", ["", "x" * 300], ids=["empty", "300-bytes"])
def test_invalid_memory_id(client: recalld.Client, memory: str) -> None:
    with pytest.raises(recalld.RecalldError) as info:
        client.decorate(memory, chat_request("hi"))
    assert info.value.code == "invalid_argument"
    assert isinstance(info.value, recalld.InvalidArgumentError)
    assert info.value.retryable is False
    with pytest.raises(recalld.InvalidArgumentError):
        client.export(memory)
    assert client.ping({"still": "alive"})["payload"] == {"still": "alive"}


def test_unknown_op(client: recalld.Client) -> None:
    with pytest.raises(recalld.RecalldError) as info:
        client.call("no_such_op", {})
    assert info.value.code == "unknown_op"
    assert info.value.retryable is False
    assert client.ping()["payload"] is None


def test_async_client_200_concurrent_pings(daemon: Daemon) -> None:
    async def main() -> List[Any]:
        async with recalld.AsyncClient.connect(daemon.socket) as c:
            assert c.server["protocol_version"] == recalld.PROTOCOL_VERSION
            return await asyncio.gather(*(c.ping({"i": i, "s": "x" * (i % 7)}) for i in range(200)))

    results = asyncio.run(main())
    assert [r["payload"] for r in results] == [{"i": i, "s": "x" * (i % 7)} for i in range(200)]


def test_async_client_full_api(daemon: Daemon, memory_id: str) -> None:
    async def main() -> None:
        c = await recalld.AsyncClient.connect(daemon.socket)
        try:
            assert (await c.hello())["server"] == "recalld"
            out = await c.decorate(memory_id, chat_request("async hello"), now=datetime(2026, 1, 2))
            assert set(out) == {"request", "info"}
            rep = await c.report(memory_id, chat_completion("async hi"))
            assert set(rep) == {"response", "again"}
            assert all("role" in m for m in (await c.export(memory_id))["messages"])
            assert (await c.inspect(memory_id, curve=0))["record"]["turns"] == 1
            assert memory_id in [m["memory"] for m in (await c.memories())["memories"]]
            with pytest.raises(recalld.ProtocolError) as info:
                await c.call("no_such_op")
            assert info.value.code == "unknown_op"
            with pytest.raises(recalld.InvalidArgumentError):
                await c.decorate("", chat_request("x"))
            assert isinstance(await c.stats(), dict)
        finally:
            await c.close()
        with pytest.raises(recalld.RecalldConnectionError):
            await c.ping()

    asyncio.run(main())


def test_sync_client_shared_by_four_threads(client: recalld.Client) -> None:
    errors: List[BaseException] = []
    barrier = threading.Barrier(4)

    def work(t: int) -> None:
        try:
            barrier.wait()
            for i in range(100):
                payload = {"t": t, "i": i}
                assert client.ping(payload)["payload"] == payload
        except BaseException as e:  # noqa: BLE001 - reported below
            errors.append(e)

    threads = [threading.Thread(target=work, args=(t,)) for t in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(60)
    assert not errors, errors


def test_calls_from_threads_overlap(daemon: Daemon) -> None:
    """Two threads with their own clients both make progress in the same window: neither
    call holds the GIL while it waits for the daemon."""
    stop = time.monotonic() + 1.0
    counts = [0, 0]
    windows: List[List[float]] = [[], []]

    def work(k: int) -> None:
        with recalld.Client(daemon.socket) as c:
            while time.monotonic() < stop:
                c.ping({"k": k})
                counts[k] += 1
                windows[k].append(time.monotonic())

    threads = [threading.Thread(target=work, args=(k,)) for k in range(2)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(30)
    assert min(counts) > 10, counts
    # Each thread finished calls throughout the other's run, not one after the other.
    assert windows[0][0] < windows[1][-1] and windows[1][0] < windows[0][-1]


def test_daemon_killed_raises_connection_error(own_daemon: Daemon) -> None:
    c = recalld.Client(own_daemon.socket, timeout=10.0)
    assert c.ping(1)["payload"] == 1

    async def connect() -> recalld.AsyncClient:
        return await recalld.AsyncClient.connect(own_daemon.socket)

    loop = asyncio.new_event_loop()
    try:
        ac = loop.run_until_complete(connect())
        own_daemon.kill()
        with pytest.raises(recalld.RecalldConnectionError) as info:
            c.ping(2)
        assert info.value.code == "unavailable" and info.value.retryable
        assert c.closed
        with pytest.raises(recalld.RecalldConnectionError):
            c.ping(3)
        with pytest.raises(recalld.RecalldConnectionError):
            loop.run_until_complete(ac.ping(2))
        loop.run_until_complete(ac.close())
    finally:
        loop.close()
        c.close()
    with pytest.raises(recalld.RecalldConnectionError):
        recalld.Client(own_daemon.socket)


def test_client_is_a_context_manager(daemon: Daemon) -> None:
    with recalld.Client(daemon.socket) as c:
        assert not c.closed
    assert c.closed
    with pytest.raises(recalld.RecalldConnectionError):
        c.ping()


def test_socket_from_environment(daemon: Daemon, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("RECALLD_SOCKET", "unix://" + daemon.socket)
    with recalld.Client() as c:
        assert c.socket == daemon.socket
        assert c.ping("env")["payload"] == "env"
