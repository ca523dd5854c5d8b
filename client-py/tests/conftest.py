"""Fixtures: a real recalld daemon on a temporary socket, and clients connected to it.

The binary is `$RECALLD_BIN`, else `<repo>/target/debug/recalld` (build it with
`cargo build -p recalld`). The daemon inherits the environment (e.g. `RECALLD_MODEL_DIR`).
"""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import time
from pathlib import Path
from typing import Iterator, List, Optional

import pytest

import recalld

REPO = Path(__file__).resolve().parents[2]
START_TIMEOUT = 15.0


def recalld_bin() -> Path:
    return Path(os.environ.get("RECALLD_BIN") or REPO / "target" / "debug" / "recalld")


class Daemon:
    """One `recalld serve` process on a socket under `root`."""

    def __init__(self, root: Path) -> None:
        self.root = root
        self.socket = str(root / "s.sock")
        self.data = root / "data"
        self.log_path = root / "daemon.log"
        self.proc: Optional[subprocess.Popen[bytes]] = None

    def start(self) -> "Daemon":
        binary = recalld_bin()
        if not binary.is_file():
            pytest.fail(f"no recalld binary at {binary}: run `cargo build -p recalld` or set RECALLD_BIN")
        log = open(self.log_path, "wb")
        self.proc = subprocess.Popen(
            [str(binary), "serve", "--socket", self.socket, "--data", str(self.data)],
            stdout=log,
            stderr=subprocess.STDOUT,
            stdin=subprocess.DEVNULL,
            env=os.environ.copy(),
        )
        log.close()
        deadline = time.monotonic() + START_TIMEOUT
        while True:
            if self.proc.poll() is not None:
                pytest.fail(f"recalld exited with {self.proc.returncode} before listening:\n{self.log()}")
            if self._accepts():
                return self
            if time.monotonic() > deadline:
                self.stop()
                pytest.fail(f"recalld did not accept on {self.socket} within {START_TIMEOUT} s:\n{self.log()}")
            time.sleep(0.05)

    def _accepts(self) -> bool:
        s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        try:
            s.connect(self.socket)
            return True
        except OSError:
            return False
        finally:
            s.close()

    def log(self) -> str:
        try:
            return self.log_path.read_text(errors="replace")[-4000:]
        except OSError:
            return "<no log>"

    def kill(self) -> None:
        """SIGKILL: the daemon vanishes without closing anything itself."""
        assert self.proc is not None
        self.proc.kill()
        self.proc.wait(10)

    def stop(self) -> None:
        if self.proc is None or self.proc.poll() is not None:
            return
        self.proc.send_signal(signal.SIGTERM)
        try:
            self.proc.wait(10)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait(10)


@pytest.fixture(scope="session")
def daemon(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Daemon]:
    d = Daemon(tmp_path_factory.mktemp("recalld")).start()
    yield d
    d.stop()


@pytest.fixture
def own_daemon(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Daemon]:
    """A daemon for one test (for tests that kill it)."""
    d = Daemon(tmp_path_factory.mktemp("own")).start()
    yield d
    d.stop()


@pytest.fixture
def client(daemon: Daemon) -> Iterator[recalld.Client]:
    with recalld.Client(daemon.socket, timeout=30.0) as c:
        yield c


@pytest.fixture
def memory_id(request: pytest.FixtureRequest) -> str:
    """A memory id unique to the test (the session daemon is shared)."""
    return f"py-{request.node.name}-{time.monotonic_ns()}"[:200]


def chat_request(*user_texts: str) -> dict:
    messages: List[dict] = [{"role": "system", "content": "You are a terse assistant for the web team."}]
    for text in user_texts:
        messages.append({"role": "user", "content": text})
    return {"model": "gpt-4o-mini", "temperature": 0.2, "messages": messages}


def chat_completion(text: str) -> dict:
    return {
        "id": "chatcmpl-test",
        "object": "chat.completion",
        "created": 1767225600,
        "model": "gpt-4o-mini",
        "choices": [
            {
                "index": 0,
                "finish_reason": "stop",
                "message": {"role": "assistant", "content": text, "refusal": None},
                "logprobs": None,
            }
        ],
        "usage": {"prompt_tokens": 40, "completion_tokens": 8, "total_tokens": 48},
    }
