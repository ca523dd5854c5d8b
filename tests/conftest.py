"""End-to-end fixtures: one real recalld daemon, driven from Python and TypeScript."""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import time
from pathlib import Path
from typing import Iterator

import pytest

REPO = Path(__file__).resolve().parents[1]


@pytest.fixture()
def daemon(tmp_path: Path) -> Iterator[str]:
    binary = os.environ.get("RECALLD_BIN") or str(REPO / "target" / "debug" / "recalld")
    sock = str(tmp_path / "e2e.sock")
    proc = subprocess.Popen(
        [binary, "serve", "--socket", sock, "--data", str(tmp_path / "data")],
        stdout=subprocess.DEVNULL,
        stdin=subprocess.DEVNULL,
    )
    deadline = time.monotonic() + 30
    while True:
        if proc.poll() is not None:
            pytest.fail(f"recalld exited with {proc.returncode}")
        try:
            with socket.socket(socket.AF_UNIX) as s:
                s.connect(sock)
            break
        except OSError:
            if time.monotonic() > deadline:
                proc.kill()
                pytest.fail("recalld did not listen within 30 s")
            time.sleep(0.05)
    yield sock
    proc.send_signal(signal.SIGTERM)
    assert proc.wait(timeout=30) == 0, "recalld did not exit cleanly on SIGTERM"
