"""examples/agent.py, the agent loop with a tool, run as a user would against the fake model
server and the real daemon."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import recalld
from conftest import Daemon
from fake_llm import FakeLLM

EXAMPLE = Path(__file__).resolve().parents[2] / "examples" / "agent.py"


def test_agent_example_calls_its_tool_and_remembers(daemon: Daemon, memory_id: str) -> None:
    fake = FakeLLM()
    try:
        env = {
            **os.environ,
            "OPENAI_BASE_URL": fake.url + "/v1",
            "OPENAI_API_KEY": "test",
            "MODEL": "test-model",
            "RECALLD_SOCKET": daemon.socket,
            "RECALLD_MEMORY": memory_id,
        }
        out = subprocess.run(
            [sys.executable, str(EXAMPLE)],
            input="run: (17 + 4) * 2\nthanks\n\n",
            capture_output=True,
            text=True,
            env=env,
            timeout=60,
        )
        assert out.returncode == 0, out.stderr
        assert "tool calculator({'expression': '(17 + 4) * 2'}) = 42" in out.stdout
        assert out.stdout.count("assistant: Answer") == 2
        bodies = fake.bodies("/chat/completions")
        assert len(bodies) == 3, "a tool call, the answer after its output, the second turn"
        assert {"role": "tool", "tool_call_id": "call_calculator_2", "content": "42"} in bodies[1]["messages"]
    finally:
        fake.close()
    roles = [m["role"] for m in recalld.Client(daemon.socket).export(memory_id)["messages"]]
    assert roles == ["user", "assistant", "tool", "assistant", "user", "assistant"]
