"""The compiled module on its own: value conversion, the stub, and the blocking connection
against a scripted fake server (no daemon needed)."""

from __future__ import annotations

import ast
import socket
import threading
import time
from pathlib import Path
from typing import Any, Callable, Dict, Iterator, Optional

import pytest

import recalld
from recalld import _native

STUB = Path(recalld.__file__).with_name("_native.pyi")


# --- values -------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "value",
    [
        None,
        True,
        False,
        0,
        -1,
        2**63 - 1,
        -(2**63),
        2**64 - 1,
        1.0,
        -0.5,
        1e300,
        "",
        "héllo wörld ✓ 😀",
        [],
        {},
        {"a": [1, 2.5, None, {"b": [True]}], "ü": {"": ""}},
    ],
)
def test_round_trip_keeps_value_and_type(value: Any) -> None:
    back = _native.decode(_native.encode(value))
    assert back == value
    assert type(back) is type(value)


def test_floats_stay_floats_on_the_wire() -> None:
    assert _native.encode(1.0) == b"\xcb" + (1.0).hex().encode() * 0 + bytes.fromhex("3ff0000000000000")
    assert _native.encode(1) == b"\x01"


def test_tuples_become_lists_and_key_order_is_kept() -> None:
    assert _native.decode(_native.encode((1, (2, 3)))) == [1, [2, 3]]
    keys = ["z", "a", "m", "b"]
    assert list(_native.decode(_native.encode({k: 0 for k in keys}))) == keys


@pytest.mark.parametrize(
    "value, type_name",
    [({1: "x"}, "int"), ({(1, 2): "x"}, "tuple"), (b"raw", "bytes"), ({"s": {1, 2}}, "set"), ([object()], "object")],
)
def test_unsupported_types_raise_type_error_naming_them(value: Any, type_name: str) -> None:
    with pytest.raises(TypeError, match=type_name):
        _native.encode(value)


def test_out_of_range_and_non_finite_numbers_are_refused() -> None:
    with pytest.raises(OverflowError):
        _native.encode(2**64)
    with pytest.raises(ValueError):
        _native.encode(float("nan"))


def test_self_referencing_list_is_refused() -> None:
    loop: list = []
    loop.append(loop)
    with pytest.raises(ValueError, match="nested"):
        _native.encode(loop)


def test_decode_rejects_garbage() -> None:
    with pytest.raises(ValueError):
        _native.decode(b"\xc1")


# --- the stub -------------------------------------------------------------------------------


def _stub_names() -> Dict[str, set]:
    tree = ast.parse(STUB.read_text())
    top: set = set()
    members: Dict[str, set] = {}
    for node in tree.body:
        if isinstance(node, ast.FunctionDef):
            top.add(node.name)
        elif isinstance(node, ast.AnnAssign) and isinstance(node.target, ast.Name):
            top.add(node.target.id)
        elif isinstance(node, ast.ClassDef):
            top.add(node.name)
            members[node.name] = {n.name for n in node.body if isinstance(n, ast.FunctionDef)}
    return {"": top, **members}


def test_stub_matches_the_built_module() -> None:
    names = _stub_names()
    public = {n for n in dir(_native) if not n.startswith("_") or n == "__version__"}
    assert names[""] == public
    conn_public = {n for n in dir(_native.Connection) if not n.startswith("_")}
    assert names["Connection"] == conn_public


# --- the connection, against a fake server ---------------------------------------------------

Handler = Callable[[Dict[str, Any], socket.socket], None]


def _send(sock: socket.socket, reply: Dict[str, Any]) -> None:
    body = _native.encode(reply)
    sock.sendall(len(body).to_bytes(4, "big") + body)


def _recv_exact(sock: socket.socket, n: int) -> Optional[bytes]:
    data = b""
    while len(data) < n:
        chunk = sock.recv(n - len(data))
        if not chunk:
            return None
        data += chunk
    return data


@pytest.fixture
def fake_server(tmp_path: Path) -> Iterator[Callable[[Handler], str]]:
    """Starts a one-connection server whose replies a test scripts; returns its socket path."""
    threads = []
    listeners = []

    def start(handler: Handler) -> str:
        path = str(tmp_path / f"fake{len(listeners)}.sock")
        listener = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        listener.bind(path)
        listener.listen(1)
        listeners.append(listener)

        def run() -> None:
            try:
                conn, _ = listener.accept()
            except OSError:
                return
            with conn:
                while True:
                    header = _recv_exact(conn, 4)
                    if header is None:
                        return
                    body = _recv_exact(conn, int.from_bytes(header, "big"))
                    if body is None:
                        return
                    handler(_native.decode(body), conn)

        t = threading.Thread(target=run, daemon=True)
        t.start()
        threads.append(t)
        return path

    yield start
    for listener in listeners:
        listener.close()
    for t in threads:
        t.join(5)


def test_call_releases_the_gil_while_waiting(fake_server: Callable[[Handler], str]) -> None:
    """While one thread waits in `call`, a counting thread keeps running. If the wait held the
    GIL, the server thread could not answer either and the call would time out."""

    def slow(req: Dict[str, Any], sock: socket.socket) -> None:
        deadline = time.monotonic() + 0.5
        while time.monotonic() < deadline:  # busy, so this thread needs the GIL throughout
            pass
        _send(sock, {"id": req["id"], "ok": {"payload": req["args"].get("payload")}})

    conn = _native.Connection.connect(fake_server(slow), 5.0)
    count = 0
    stop = threading.Event()

    def counter() -> None:
        nonlocal count
        while not stop.is_set():
            count += 1

    t = threading.Thread(target=counter)
    t.start()
    try:
        started = time.monotonic()
        assert conn.call("ping", {"payload": 7}) == {"payload": 7}
        elapsed = time.monotonic() - started
    finally:
        stop.set()
        t.join()
        conn.close()
    assert elapsed >= 0.45
    assert count > 1000, f"the counting thread barely ran ({count}) while a call waited"


def test_late_replies_are_skipped_after_a_timeout(fake_server: Callable[[Handler], str]) -> None:
    def handler(req: Dict[str, Any], sock: socket.socket) -> None:
        if req["args"].get("slow"):
            time.sleep(0.4)
        _send(sock, {"id": req["id"], "ok": {"n": req["args"]["n"]}})

    conn = _native.Connection.connect(fake_server(handler), 0.2)
    with pytest.raises(recalld.RecalldTimeoutError) as info:
        conn.call("ping", {"n": 1, "slow": True})
    assert info.value.code == "timeout" and info.value.retryable
    assert not conn.closed
    time.sleep(0.3)  # the late reply to n=1 arrives first and must be skipped
    assert conn.call("ping", {"n": 2}) == {"n": 2}
    conn.close()


def test_err_reply_becomes_the_family_exception(fake_server: Callable[[Handler], str]) -> None:
    def handler(req: Dict[str, Any], sock: socket.socket) -> None:
        _send(sock, {"id": req["id"], "err": {"code": req["args"]["code"], "message": "nope", "retryable": False}})

    conn = _native.Connection.connect(fake_server(handler), 5.0)
    for code, cls in [
        ("invalid_argument", recalld.InvalidArgumentError),
        ("unknown_op", recalld.ProtocolError),
        ("not_found", recalld.NotFoundError),
        ("some_future_code", recalld.RecalldError),
    ]:
        with pytest.raises(cls) as info:
            conn.call("x", {"code": code})
        assert type(info.value) is cls
        assert (info.value.code, info.value.message, info.value.retryable) == (code, "nope", False)
    conn.close()


def test_peer_closing_closes_the_connection(fake_server: Callable[[Handler], str]) -> None:
    def handler(req: Dict[str, Any], sock: socket.socket) -> None:
        sock.shutdown(socket.SHUT_RDWR)

    conn = _native.Connection.connect(fake_server(handler), 5.0)
    with pytest.raises(recalld.RecalldConnectionError) as info:
        conn.call("ping")
    assert info.value.code == "unavailable"
    assert conn.closed
    with pytest.raises(recalld.RecalldConnectionError, match="closed"):
        conn.call("ping")


def test_connect_to_nothing_raises_connection_error(tmp_path: Path) -> None:
    with pytest.raises(recalld.RecalldConnectionError) as info:
        recalld.Client(tmp_path / "absent.sock")
    assert info.value.code == "unavailable" and info.value.retryable


def test_bad_args_raise_before_sending(fake_server: Callable[[Handler], str]) -> None:
    def handler(req: Dict[str, Any], sock: socket.socket) -> None:
        _send(sock, {"id": req["id"], "ok": {}})

    conn = _native.Connection.connect(fake_server(handler), 5.0)
    with pytest.raises(TypeError, match="dict"):
        conn.call("ping", [1, 2])  # type: ignore[arg-type]
    with pytest.raises(TypeError, match="set"):
        conn.call("ping", {"payload": {1}})
    assert conn.call("ping", {}) == {}
    conn.close()
