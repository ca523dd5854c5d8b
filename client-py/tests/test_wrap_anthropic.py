"""`recalld.wrap` around the real `anthropic` package (sync and async), pointed at the fake
model server (fake_llm.py) and the real daemon: the Anthropic Messages format end to end."""

from __future__ import annotations

import asyncio
import queue
from typing import Any, Dict, Iterator, List

import anthropic
import pytest
from anthropic.types import Message

import recalld
from conftest import Daemon
from fake_llm import FakeLLM
from test_wrap_openai import CEILING, SYSTEM, T0, check_conversation, facts_block, has_note, user_text


@pytest.fixture
def fake() -> Iterator[FakeLLM]:
    f = FakeLLM()
    yield f
    f.close()


def test_messages_conversation_sync_and_streamed(daemon: Daemon, fake: FakeLLM, memory_id: str) -> None:
    client = recalld.wrap(
        anthropic.Anthropic(base_url=fake.url, api_key="test", max_retries=0),
        memory=memory_id,
        socket=daemon.socket,
        ceiling=CEILING,
    )
    history: List[Dict[str, Any]] = []
    lengths = []
    turns = 14
    for i in range(turns):
        history.append({"role": "user", "content": user_text(i)})
        call = dict(model="claude-test", max_tokens=300, system=SYSTEM, messages=history)
        if i % 2:
            events = list(client.messages.create(**call, stream=True, recalld={"now": T0 + 60 * i}))
            assert not any(e.type == "content_block_start" and e.content_block.type == "tool_use" for e in events)
            text = "".join(e.delta.text for e in events if e.type == "content_block_delta")
            assert [e.delta.stop_reason for e in events if e.type == "message_delta"] == ["end_turn"]
            assert {e.index for e in events if hasattr(e, "index")} == {0}
        else:
            reply = client.messages.create(**call, recalld={"now": T0 + 60 * i})
            assert isinstance(reply, Message)
            assert all(b.type == "text" for b in reply.content), "no note call shown"
            text = "".join(b.text for b in reply.content)
        assert text.startswith("Answer"), text
        history.append({"role": "assistant", "content": text})
        lengths.append(len(history) + 1)
    check_conversation(fake, "/messages", turns, lengths)


def test_async_messages_stream_chunk_by_chunk_and_tools(daemon: Daemon, fake: FakeLLM, memory_id: str) -> None:
    tools = [
        {
            "name": "shell",
            "description": "Run a shell command.",
            "input_schema": {"type": "object", "properties": {"command": {"type": "string"}}, "required": ["command"]},
        }
    ]

    async def run() -> List[str]:
        client = recalld.wrap(
            anthropic.AsyncAnthropic(base_url=fake.url, api_key="test", max_retries=0),
            memory=memory_id,
            socket=daemon.socket,
        )
        history: List[Dict[str, Any]] = [{"role": "user", "content": "run: make test"}]
        first = await client.messages.create(model="m", max_tokens=100, messages=history, tools=tools)
        use = next(b for b in first.content if b.type == "tool_use")
        assert use.name == "shell" and use.input == {"command": "make test"}
        history.append({"role": "assistant", "content": [b.model_dump(exclude_none=True) for b in first.content]})
        history.append({"role": "user", "content": [{"type": "tool_result", "tool_use_id": use.id, "content": "42 passed"}]})
        fake.gate = queue.Queue()
        stream = await client.messages.create(model="m", max_tokens=100, messages=history, tools=tools, stream=True)
        assert isinstance(stream, anthropic.AsyncStream)
        pieces = []
        async for event in stream:
            if event.type == "content_block_delta":
                pieces.append(event.delta.text)
                fake.gate.put(1)
        return pieces

    pieces = asyncio.run(run())
    assert fake.gate_timeouts == 0 and len(pieces) > 5
    roles = [m["role"] for m in recalld.Client(daemon.socket).export(memory_id)["messages"]]
    assert roles == ["user", "assistant", "tool", "assistant"]


def test_messages_stream_helper_goes_through_the_wrapper(daemon: Daemon, fake: FakeLLM, memory_id: str) -> None:
    client = recalld.wrap(anthropic.Anthropic(base_url=fake.url, api_key="test", max_retries=0), memory=memory_id, socket=daemon.socket)
    with client.messages.stream(model="m", max_tokens=100, messages=[{"role": "user", "content": "hi"}]) as stream:
        text = "".join(stream.text_stream)
        final = stream.get_final_message()
    assert text.startswith("Answer") and final.content[0].text == text
    assert len(recalld.Client(daemon.socket).export(memory_id)["messages"]) == 2

    async def run() -> str:
        aclient = recalld.wrap(
            anthropic.AsyncAnthropic(base_url=fake.url, api_key="test", max_retries=0), memory=memory_id, socket=daemon.socket
        )
        history = [{"role": "user", "content": "hi"}, {"role": "assistant", "content": text}, {"role": "user", "content": "more"}]
        async with aclient.messages.stream(model="m", max_tokens=100, messages=history) as s:
            return (await s.get_final_message()).content[0].text

    assert asyncio.run(run()).startswith("Answer")
    assert len(recalld.Client(daemon.socket).export(memory_id)["messages"]) == 4


def test_messages_stream_holds_a_note_only_reply_back_and_streams_the_second_call(
    daemon: Daemon, fake: FakeLLM, memory_id: str
) -> None:
    """Every turn streamed until the daemon asks for the note: that turn's first stream (only
    the note's `tool_use`) never reaches the caller, the second call's stream does, delta by
    delta, and the note's facts are in the next request."""
    client = recalld.wrap(
        anthropic.Anthropic(base_url=fake.url, api_key="test", max_retries=0),
        memory=memory_id,
        socket=daemon.socket,
        ceiling=CEILING,
    )
    history: List[Dict[str, Any]] = []
    note_turn = None
    for i in range(14):
        history.append({"role": "user", "content": user_text(i)})
        sent = len(fake.requests)
        fake.gate = queue.Queue()  # a fresh gate a turn: the last delta's token is not left over
        events = []
        call = dict(model="claude-test", max_tokens=300, system=SYSTEM, messages=history)
        with client.messages.create(**call, stream=True, recalld={"now": T0 + 60 * i}) as stream:
            for e in stream:
                events.append(e)
                if e.type == "content_block_delta" and e.delta.type == "text_delta":
                    fake.gate.put(1)  # the server sends the next delta only after this one arrived
        text = "".join(e.delta.text for e in events if e.type == "content_block_delta" and e.delta.type == "text_delta")
        assert text.startswith("Answer"), text
        history.append({"role": "assistant", "content": text})
        bodies = fake.bodies("/messages")[sent:]
        if note_turn is not None:
            assert "Fact 1: the deploy key rotates every Friday" in facts_block("/messages", bodies[0])
            break
        if has_note(bodies[0]):
            note_turn = i
            assert len(bodies) == 2 and not has_note(bodies[1]), "a note-only reply: a second call without the ask"
            assert [e.message.id for e in events if e.type == "message_start"] == [f"msg_{len(fake.requests)}"], (
                "the caller sees the second call's stream only"
            )
            assert not any(e.type == "content_block_start" and e.content_block.type == "tool_use" for e in events)
            assert not any(e.type == "content_block_delta" and e.delta.type == "input_json_delta" for e in events)
            assert [e.delta.stop_reason for e in events if e.type == "message_delta"] == ["end_turn"]
            assert {e.index for e in events if hasattr(e, "index")} == {0}
            assert fake.gate_timeouts == 0, "the second call was streamed delta by delta"
        else:
            assert len(bodies) == 1
    assert note_turn is not None, "the conversation never reached the note ask"
    exported = recalld.Client(daemon.socket).export(memory_id)
    assert any(f["note"].startswith("Fact 1:") for f in exported["facts"])
