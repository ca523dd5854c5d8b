"""`recalld.wrap` around the real `openai` package (sync and async), pointed at a local fake
OpenAI server (fake_llm.py) and the real daemon (conftest.py)."""

from __future__ import annotations

import asyncio
import logging
import queue
import time
from typing import Any, Dict, Iterator, List

import openai
import pytest
from openai.types.chat import ChatCompletion, ChatCompletionChunk
from openai.types.responses import Response
from pydantic import BaseModel

import recalld
from conftest import Daemon
from fake_llm import FACTS_HEADER, NOTE_TOOL, FakeLLM, request_texts, tool_names

CEILING = 2500
T0 = 1_767_225_600.0
SYSTEM = "You are the release assistant of the web team. Answer in one sentence."

WORDS = (
    "deploy staging checkout billing cache invoice latency rollout canary schema index queue worker "
    "token session retry budget alert dashboard migration backup replica shard tenant webhook"
).split()


def user_text(i: int, n: int = 110) -> str:
    words = [WORDS[(i * 7 + k * 3) % len(WORDS)] for k in range(n)]
    return f"Turn {i}: " + " ".join(words) + "."


@pytest.fixture
def fake() -> Iterator[FakeLLM]:
    f = FakeLLM()
    yield f
    f.close()


def openai_client(fake: FakeLLM) -> openai.OpenAI:
    return openai.OpenAI(base_url=fake.url + "/v1", api_key="test", max_retries=0)


def async_openai_client(fake: FakeLLM) -> openai.AsyncOpenAI:
    return openai.AsyncOpenAI(base_url=fake.url + "/v1", api_key="test", max_retries=0)


def has_note(body: Dict[str, Any]) -> bool:
    return NOTE_TOOL in tool_names("", body)


def facts_block(path: str, body: Dict[str, Any]) -> str:
    """The facts block: a message of its own, or (Anthropic) a part of `system`."""
    text = next((t for r, t in request_texts(path, body) if FACTS_HEADER in t), "")
    return text[text.find(FACTS_HEADER) :] if text else ""


def check_conversation(fake: FakeLLM, path: str, turns: int, history_lengths: List[int]) -> None:
    """What the model received over a conversation at a small ceiling: the note ask came, the
    note-only reply was followed by a second call without the ask, history faded, and a later
    request carried the facts block holding the note."""
    bodies = fake.bodies(path)
    asks = [i for i, b in enumerate(bodies) if has_note(b)]
    assert asks, "history never faded far enough to ask for a note"
    assert len(bodies) == turns + len(asks), "one extra model call per note-only reply (again)"
    for i in asks:
        assert not has_note(bodies[i + 1]), "the second call after the note carries no ask"
    after = [facts_block(path, b) for b in bodies[asks[0] + 1 :]]
    assert all(after), "every request after the note carries the facts block"
    assert "Fact 1: the deploy key rotates every Friday" in after[-1]
    sent = [len(request_texts(path, b)) for b in bodies]
    assert sent[-1] < history_lengths[-1], f"history faded: sent {sent[-1]} of {history_lengths[-1]} messages"


def test_chat_conversation_fades_takes_the_note_and_honours_again(daemon: Daemon, fake: FakeLLM, memory_id: str) -> None:
    client = recalld.wrap(openai_client(fake), memory=memory_id, socket=daemon.socket, ceiling=CEILING)
    history: List[Dict[str, Any]] = [{"role": "system", "content": SYSTEM}]
    lengths = []
    turns = 14
    for i in range(turns):
        history.append({"role": "user", "content": user_text(i)})
        reply = client.chat.completions.create(
            model="gpt-4o-mini", messages=history, temperature=0.2, recalld={"now": T0 + 60 * i}
        )
        assert isinstance(reply, ChatCompletion)
        message = reply.choices[0].message
        assert message.content and message.content.startswith("Answer"), message
        assert not message.tool_calls, "the note call never reaches the caller"
        history.append({"role": "assistant", "content": message.content})
        lengths.append(len(history))
    check_conversation(fake, "/chat/completions", turns, lengths)
    exported = recalld.Client(daemon.socket).export(memory_id)
    assert any(f["note"].startswith("Fact 1:") for f in exported["facts"])


def test_note_alongside_text_is_cut_out_without_a_second_call(daemon: Daemon, fake: FakeLLM, memory_id: str) -> None:
    fake.model.note_with_text = True
    client = recalld.wrap(openai_client(fake), memory=memory_id, socket=daemon.socket, ceiling=CEILING)
    history: List[Dict[str, Any]] = [{"role": "system", "content": SYSTEM}]
    for i in range(14):
        history.append({"role": "user", "content": user_text(i)})
        call = dict(model="gpt-4o-mini", messages=history, recalld={"now": T0 + 60 * i})
        if i >= 7:  # streamed: the note's deltas come first and are cut out, the text passes
            chunks = list(client.chat.completions.create(**call, stream=True))
            assert all(not c.choices or not c.choices[0].delta.tool_calls for c in chunks)
            assert [c.choices[0].finish_reason for c in chunks if c.choices and c.choices[0].finish_reason] == ["stop"]
            text = "".join(c.choices[0].delta.content or "" for c in chunks if c.choices)
        else:
            message = client.chat.completions.create(**call).choices[0].message
            assert not message.tool_calls
            text = message.content
        assert text.startswith("Answer"), text
        history.append({"role": "assistant", "content": text})
    bodies = fake.bodies("/chat/completions")
    assert len(bodies) == 14, "the reply held more than the note: no second call"
    assert any(has_note(b) for b in bodies[7:]), "a streamed turn was asked for the note"


def test_chat_stream_passes_text_chunk_by_chunk(daemon: Daemon, fake: FakeLLM, memory_id: str) -> None:
    client = recalld.wrap(openai_client(fake), memory=memory_id, socket=daemon.socket)
    fake.gate = queue.Queue()
    history = [{"role": "system", "content": SYSTEM}, {"role": "user", "content": "How is the build?"}]
    stream = client.chat.completions.create(model="gpt-4o-mini", messages=history, stream=True)
    assert isinstance(stream, openai.Stream)
    pieces = []
    for chunk in stream:
        assert isinstance(chunk, ChatCompletionChunk)
        text = chunk.choices[0].delta.content if chunk.choices else None
        if text:
            pieces.append(text)
            fake.gate.put(1)  # the server sends the next delta only after this one arrived
    assert fake.gate_timeouts == 0, "a delta was held back until a later one was sent"
    assert len(pieces) > 5
    assert "".join(pieces).startswith("Answer 1: the build is green")
    exported = recalld.Client(daemon.socket).export(memory_id)
    assert exported["messages"][-1]["message"]["content"] == "".join(pieces), "the assembled reply was reported"


def test_chat_stream_conversation_holds_the_note_and_streams_the_second_call(
    daemon: Daemon, fake: FakeLLM, memory_id: str
) -> None:
    client = recalld.wrap(openai_client(fake), memory=memory_id, socket=daemon.socket, ceiling=CEILING)
    history: List[Dict[str, Any]] = [{"role": "system", "content": SYSTEM}]
    lengths = []
    turns = 14
    for i in range(turns):
        history.append({"role": "user", "content": user_text(i)})
        with client.chat.completions.create(
            model="gpt-4o-mini", messages=history, stream=True, recalld={"now": T0 + 60 * i}
        ) as stream:
            chunks = list(stream)
        assert all(not c.choices or not c.choices[0].delta.tool_calls for c in chunks), "no note deltas shown"
        text = "".join(c.choices[0].delta.content or "" for c in chunks if c.choices)
        assert text.startswith("Answer"), text
        finishes = [c.choices[0].finish_reason for c in chunks if c.choices and c.choices[0].finish_reason]
        assert finishes == ["stop"]
        history.append({"role": "assistant", "content": text})
        lengths.append(len(history))
    check_conversation(fake, "/chat/completions", turns, lengths)


def test_stream_helper_goes_through_the_wrapper(daemon: Daemon, fake: FakeLLM, memory_id: str) -> None:
    client = recalld.wrap(openai_client(fake), memory=memory_id, socket=daemon.socket)
    history = [{"role": "user", "content": "How is the build?"}]
    with client.chat.completions.stream(model="gpt-4o-mini", messages=history) as stream:
        deltas = [e.delta for e in stream if e.type == "content.delta"]
        final = stream.get_final_completion()
    assert "".join(deltas) == final.choices[0].message.content
    assert len(recalld.Client(daemon.socket).export(memory_id)["messages"]) == 2


def test_tool_calls_pass_through_and_tool_outputs_are_stored(daemon: Daemon, fake: FakeLLM, memory_id: str) -> None:
    client = recalld.wrap(openai_client(fake), memory=memory_id, socket=daemon.socket)
    tools = [
        {
            "type": "function",
            "function": {
                "name": "shell",
                "description": "Run a shell command.",
                "parameters": {"type": "object", "properties": {"command": {"type": "string"}}, "required": ["command"]},
            },
        }
    ]
    history: List[Dict[str, Any]] = [{"role": "user", "content": "run: make test"}]
    reply = client.chat.completions.create(model="gpt-4o-mini", messages=history, tools=tools)
    call = reply.choices[0].message.tool_calls[0]
    assert call.function.name == "shell"
    history.append(reply.choices[0].message.model_dump(exclude_none=True))
    history.append({"role": "tool", "tool_call_id": call.id, "content": "42 passed"})
    reply = client.chat.completions.create(model="gpt-4o-mini", messages=history, tools=tools)
    assert reply.choices[0].message.content.startswith("Answer")
    roles = [m["role"] for m in recalld.Client(daemon.socket).export(memory_id)["messages"]]
    assert roles == ["user", "assistant", "tool", "assistant"]


def test_responses_conversation_sync(daemon: Daemon, fake: FakeLLM, memory_id: str) -> None:
    client = recalld.wrap(openai_client(fake), memory=memory_id, socket=daemon.socket, ceiling=CEILING)
    items: List[Dict[str, Any]] = []
    lengths = []
    turns = 14
    for i in range(turns):
        items.append({"role": "user", "content": user_text(i)})
        reply = client.responses.create(
            model="gpt-4o-mini", instructions=SYSTEM, input=items, recalld={"now": T0 + 60 * i}
        )
        assert isinstance(reply, Response)
        assert reply.output_text.startswith("Answer")
        assert all(o.type == "message" for o in reply.output), "no note call shown"
        items.append({"role": "assistant", "content": reply.output_text})
        lengths.append(len(items) + 1)
    check_conversation(fake, "/responses", turns, lengths)


def test_responses_stream_conversation(daemon: Daemon, fake: FakeLLM, memory_id: str) -> None:
    client = recalld.wrap(openai_client(fake), memory=memory_id, socket=daemon.socket, ceiling=CEILING)
    items: List[Dict[str, Any]] = []
    lengths = []
    turns = 14
    for i in range(turns):
        items.append({"role": "user", "content": user_text(i)})
        stream = client.responses.create(
            model="gpt-4o-mini", instructions=SYSTEM, input=items, stream=True, recalld={"now": T0 + 60 * i}
        )
        events = list(stream)
        types = [e.type for e in events]
        assert "response.function_call_arguments.delta" not in types, "no note events shown"
        text = "".join(e.delta for e in events if e.type == "response.output_text.delta")
        assert text.startswith("Answer")
        done = events[-1]
        assert done.type == "response.completed" and done.response.output_text == text
        assert all(o.type == "message" for o in done.response.output)
        assert {e.output_index for e in events if hasattr(e, "output_index")} == {0}
        items.append({"role": "assistant", "content": text})
        lengths.append(len(items) + 1)
    check_conversation(fake, "/responses", turns, lengths)


def test_async_chat_conversation_and_stream(daemon: Daemon, fake: FakeLLM, memory_id: str) -> None:
    async def run() -> List[int]:
        client = recalld.wrap(async_openai_client(fake), memory=memory_id, socket=daemon.socket, ceiling=CEILING)
        history: List[Dict[str, Any]] = [{"role": "system", "content": SYSTEM}]
        lengths = []
        for i in range(14):
            history.append({"role": "user", "content": user_text(i)})
            if i % 2:
                stream = await client.chat.completions.create(
                    model="gpt-4o-mini", messages=history, stream=True, recalld={"now": T0 + 60 * i}
                )
                assert isinstance(stream, openai.AsyncStream)
                text = "".join([c.choices[0].delta.content or "" async for c in stream if c.choices])
            else:
                reply = await client.chat.completions.create(
                    model="gpt-4o-mini", messages=history, recalld={"now": T0 + 60 * i}
                )
                assert isinstance(reply, ChatCompletion) and not reply.choices[0].message.tool_calls
                text = reply.choices[0].message.content
            assert text.startswith("Answer"), text
            history.append({"role": "assistant", "content": text})
            lengths.append(len(history))
        return lengths

    lengths = asyncio.run(run())
    check_conversation(fake, "/chat/completions", 14, lengths)


def test_async_stream_is_chunk_by_chunk(daemon: Daemon, fake: FakeLLM, memory_id: str) -> None:
    async def run() -> List[str]:
        client = recalld.wrap(async_openai_client(fake), memory=memory_id, socket=daemon.socket)
        fake.gate = queue.Queue()
        stream = await client.responses.create(model="gpt-4o-mini", input="How is the build?", stream=True)
        pieces = []
        async for event in stream:
            if event.type == "response.output_text.delta":
                pieces.append(event.delta)
                fake.gate.put(1)
        return pieces

    pieces = asyncio.run(run())
    assert fake.gate_timeouts == 0 and len(pieces) > 5


def test_per_call_options_override_the_wrapper(daemon: Daemon, fake: FakeLLM, memory_id: str) -> None:
    client = recalld.wrap(openai_client(fake), memory=memory_id, socket=daemon.socket)
    other = memory_id + "-other"
    client.chat.completions.create(model="m", messages=[{"role": "user", "content": "one"}])
    client.chat.completions.create(model="m", messages=[{"role": "user", "content": "two"}], recalld={"memory": other})
    client.chat.completions.create(
        model="m", messages=[{"role": "user", "content": "three"}], recalld={"dry_run": True}
    )
    client.chat.completions.create(model="m", messages=[{"role": "user", "content": "four"}], recalld={"memory": None})
    with recalld.Client(daemon.socket) as c:
        mine = [m["message"]["content"] for m in c.export(memory_id)["messages"]]
        theirs = [m["message"]["content"] for m in c.export(other)["messages"]]
    assert mine[0] == "one" and len(mine) == 2, mine
    assert theirs[0] == "two" and len(theirs) == 2, theirs
    assert len(fake.requests) == 4, "every call reached the model"
    with pytest.raises(TypeError, match="unknown recalld option"):
        client.chat.completions.create(model="m", messages=[], recalld={"memroy": "x"})


def test_per_call_agent_user_ceiling_and_a_streamed_dry_run(daemon: Daemon, fake: FakeLLM, memory_id: str) -> None:
    client = recalld.wrap(openai_client(fake), memory=memory_id, socket=daemon.socket, ceiling=CEILING)
    first = [{"role": "user", "content": "one"}]
    client.chat.completions.create(
        model="m", messages=first, recalld={"agent": "support-bot", "user": "alex", "ceiling": 9000}
    )
    with recalld.Client(daemon.socket) as c:
        export = c.export(memory_id)
    record = export["record"]
    assert (record["agent"], record["user"], record["ceiling"]) == ("support-bot", "alex", 9000), record
    stored = len(export["messages"])
    # A streamed dry run: the text reaches the caller, the model was called, nothing is stored.
    history = first + [{"role": "assistant", "content": "noted"}, {"role": "user", "content": "two, dry"}]
    chunks = list(client.chat.completions.create(model="m", messages=history, stream=True, recalld={"dry_run": True}))
    text = "".join(ch.choices[0].delta.content or "" for ch in chunks if ch.choices)
    assert text, chunks
    assert len(fake.requests) == 2
    with recalld.Client(daemon.socket) as c:
        assert len(c.export(memory_id)["messages"]) == stored, "a dry run stores nothing"


def test_recalld_errors_are_typed_not_model_errors(daemon: Daemon, fake: FakeLLM) -> None:
    client = recalld.wrap(openai_client(fake), memory="", socket=daemon.socket)
    with pytest.raises(recalld.InvalidArgumentError) as err:
        client.chat.completions.create(model="m", messages=[{"role": "user", "content": "hi"}])
    assert err.value.code == "invalid_argument" and not isinstance(err.value, openai.OpenAIError)
    assert fake.requests == [], "a refused decorate never reaches the model"


def test_model_errors_stay_the_sdks(daemon: Daemon, fake: FakeLLM, memory_id: str) -> None:
    client = recalld.wrap(openai_client(fake), memory=memory_id, socket=daemon.socket)
    fake.fail_next = 500
    with pytest.raises(openai.InternalServerError):
        client.chat.completions.create(model="m", messages=[{"role": "user", "content": "hi"}])


def test_daemon_down_fails_fast_or_passes_through(tmp_path: Any, fake: FakeLLM, caplog: Any) -> None:
    missing = str(tmp_path / "nobody.sock")
    client = recalld.wrap(openai_client(fake), memory="m", socket=missing)
    started = time.monotonic()
    with pytest.raises(recalld.RecalldConnectionError, match="not reachable") as err:
        client.chat.completions.create(model="m", messages=[{"role": "user", "content": "hi"}])
    assert time.monotonic() - started < 2, "fails fast"
    assert err.value.code == "unavailable"
    assert fake.requests == []

    client = recalld.wrap(openai_client(fake), memory="m", socket=missing, pass_through=True)
    request = [{"role": "user", "content": "hi"}]
    with caplog.at_level(logging.WARNING, logger="recalld"):
        reply = client.chat.completions.create(model="m", messages=request)
        chunks = list(client.chat.completions.create(model="m", messages=request, stream=True))
    assert reply.choices[0].message.content.startswith("Answer")
    assert "".join(c.choices[0].delta.content or "" for c in chunks).startswith("Answer")
    assert [b["messages"] for b in fake.bodies()] == [request, request], "sent unchanged"
    assert sum("unreachable" in r.message for r in caplog.records) == 2


def test_parse_goes_through_the_wrapper(daemon: Daemon, fake: FakeLLM, memory_id: str) -> None:
    client = recalld.wrap(openai_client(fake), memory=memory_id, socket=daemon.socket)
    reply = client.chat.completions.parse(model="m", messages=[{"role": "user", "content": "hi"}])
    assert reply.choices[0].message.content.startswith("Answer")
    assert len(recalld.Client(daemon.socket).export(memory_id)["messages"]) == 2


def test_responses_stream_helper_goes_through_the_wrapper(daemon: Daemon, fake: FakeLLM, memory_id: str) -> None:
    client = recalld.wrap(openai.OpenAI(base_url=fake.url + "/v1", api_key="test", max_retries=0), memory=memory_id, socket=daemon.socket)
    with client.responses.stream(model="m", input="hi") as stream:
        final = stream.get_final_response()
    assert final.output_text.startswith("Answer")
    assert len(recalld.Client(daemon.socket).export(memory_id)["messages"]) == 2


class BuildStatus(BaseModel):
    """The structured output the `.parse()` tests ask for (the fake fills it in, fake_llm.py)."""

    summary: str
    green: bool
    passed: int


def stored_reply(daemon: Daemon, memory_id: str) -> str:
    """The text of the last reply the daemon stored for the memory (the note call is stored
    as a message of its own, marked `note`)."""
    with recalld.Client(daemon.socket) as c:
        stored = [m for m in c.export(memory_id)["messages"] if not m["note"]]
    content = stored[-1]["message"]["content"]
    return content if isinstance(content, str) else "".join(p.get("text", "") for p in content)


@pytest.mark.parametrize("note_with_text", [False, True], ids=["note-alone", "note-with-text"])
def test_chat_parse_returns_the_model_and_stores_the_reply(
    daemon: Daemon, fake: FakeLLM, memory_id: str, note_with_text: bool, recwarn: Any
) -> None:
    """`.parse(response_format=Model)` over a conversation that reaches the note ask: every
    reply is parsed into the model and stored. A note-only first reply is not parsed: the second
    call's reply is; a note alongside the answer is cut out and the parsed model kept."""
    fake.model.note_with_text = note_with_text
    client = recalld.wrap(openai_client(fake), memory=memory_id, socket=daemon.socket, ceiling=CEILING)
    history: List[Dict[str, Any]] = [{"role": "system", "content": SYSTEM}]
    lengths = []
    note_turns = []
    for i in range(14):
        history.append({"role": "user", "content": user_text(i)})
        sent = len(fake.requests)
        reply = client.chat.completions.parse(
            model="gpt-4o-mini", messages=history, response_format=BuildStatus, recalld={"now": T0 + 60 * i}
        )
        message = reply.choices[0].message
        assert isinstance(message.parsed, BuildStatus), message
        assert message.parsed == BuildStatus.model_validate_json(message.content or "")
        assert message.parsed.summary.startswith("Answer") and message.parsed.passed == 42
        assert not message.tool_calls, "the note call never reaches the caller"
        bodies = fake.bodies()[sent:]
        if any(has_note(b) for b in bodies):
            note_turns.append(i)
            assert reply.id == f"chatcmpl-{len(fake.requests)}", "the last call's reply is the one parsed"
        assert stored_reply(daemon, memory_id) == message.content, "the reply was reported"
        history.append({"role": "assistant", "content": message.content})
        lengths.append(len(history))
    assert note_turns, "the conversation never reached the note ask"
    assert all(b["response_format"]["type"] == "json_schema" for b in fake.bodies()), "every call asked for the schema"
    if note_with_text:
        assert len(fake.requests) == 14, "a reply holding more than the note: no second call"
    else:
        check_conversation(fake, "/chat/completions", 14, lengths)
    assert not [w for w in recwarn if "serializ" in str(w.message)], "no pydantic warnings for the caller"


@pytest.mark.parametrize("note_with_text", [False, True], ids=["note-alone", "note-with-text"])
def test_responses_parse_returns_the_model_and_stores_the_reply(
    daemon: Daemon, fake: FakeLLM, memory_id: str, note_with_text: bool
) -> None:
    """`responses.parse(text_format=Model)`: as the Chat Completions test, with `.output_parsed`."""
    fake.model.note_with_text = note_with_text
    client = recalld.wrap(openai_client(fake), memory=memory_id, socket=daemon.socket, ceiling=CEILING)
    items: List[Dict[str, Any]] = []
    lengths = []
    note_turns = []
    for i in range(14):
        items.append({"role": "user", "content": user_text(i)})
        sent = len(fake.requests)
        reply = client.responses.parse(
            model="gpt-4o-mini", instructions=SYSTEM, input=items, text_format=BuildStatus, recalld={"now": T0 + 60 * i}
        )
        assert isinstance(reply.output_parsed, BuildStatus), reply
        assert reply.output_parsed == BuildStatus.model_validate_json(reply.output_text)
        assert reply.output_parsed.summary.startswith("Answer") and reply.output_parsed.passed == 42
        assert all(o.type == "message" for o in reply.output), "the note call never reaches the caller"
        if any(has_note(b) for b in fake.bodies()[sent:]):
            note_turns.append(i)
            assert reply.id == f"resp_{len(fake.requests)}", "the last call's reply is the one parsed"
        assert stored_reply(daemon, memory_id) == reply.output_text, "the reply was reported"
        items.append({"role": "assistant", "content": reply.output_text})
        lengths.append(len(items) + 1)
    assert note_turns, "the conversation never reached the note ask"
    assert all(b["text"]["format"]["type"] == "json_schema" for b in fake.bodies()), "every call asked for the schema"
    if note_with_text:
        assert len(fake.requests) == 14, "a reply holding more than the note: no second call"
    else:
        check_conversation(fake, "/responses", 14, lengths)
