"""Memory across conversations, across languages: conversations ended from Python and from
TypeScript hand their facts to one agent's scope; the facts that agree are distilled; a later
Python conversation of the same user is shown the distilled fact, a TypeScript conversation of
another user is not."""

from __future__ import annotations

import json

import recalld
from test_cross_language import node

T0 = 1_767_225_600.0
DAY = 86_400.0
FACT = "Alex prefers concise answers in bullet points."


def reply_with_note(call_id: str, note: str) -> dict:
    args = json.dumps({"notes": [{"note": note, "subject": "Alex", "object": "answers", "milestone": False}]})
    return {
        "id": "r",
        "object": "chat.completion",
        "model": "gpt-4o",
        "choices": [
            {
                "index": 0,
                "finish_reason": "stop",
                "message": {
                    "role": "assistant",
                    "content": "Noted.",
                    "tool_calls": [{"id": call_id, "type": "function", "function": {"name": "note", "arguments": args}}],
                },
            }
        ],
    }


def request(text: str) -> dict:
    return {"model": "gpt-4o", "messages": [{"role": "user", "content": text}]}


def py_conversation(sock: str, memory: str, now: float) -> None:
    with recalld.Client(sock) as c:
        c.decorate(memory, request("Short answers please, in bullets."), now=now, agent="helper", user="alex")
        c.report(memory, reply_with_note(f"call-{memory}", FACT), now=now + 5)
        assert c.call("end", {"memory": memory, "now": now + 60})["queued"] is True
        assert c.call("quiet", {"memory": memory, "timeout_ms": 120_000})["jobs"] == 0


def test_facts_cross_conversations_and_languages_but_not_users(daemon: str) -> None:
    py_conversation(daemon, "py-1", T0)
    ts = node(
        f"""
const c = await recalld.Client.connect(SOCKET);
await c.decorate("ts-1", {json.dumps(request("Bullet points, keep it brief."))}, {{ now: {T0 + DAY}, agent: "helper", user: "alex" }});
await c.report("ts-1", {json.dumps(reply_with_note("call-ts-1", FACT.rstrip(".")))}, {{ now: {T0 + DAY + 5} }});
await c.call("end", {{ memory: "ts-1", now: {T0 + DAY + 60} }});
const q = await c.call("quiet", {{ memory: "ts-1", timeout_ms: 120000 }});
await c.close();
console.log(JSON.stringify(q));
""",
        daemon,
    )
    assert ts["jobs"] == 0
    py_conversation(daemon, "py-2", T0 + 2 * DAY)

    with recalld.Client(daemon) as c:
        listed = c.call("list_memories", {"agent": "helper", "user": "alex"})["memories"]
        assert [m["tier"] for m in listed] == ["semantic"], listed
        assert len(listed[0]["sources"]) == 3
        out = c.decorate(
            "py-3", request("Could you answer in bullet points again?"), now=T0 + 3 * DAY, agent="helper", user="alex"
        )
        shown = [m["content"] for m in out["request"]["messages"] if m["role"] == "system"]
        assert any(FACT.rstrip(".") in s for s in shown), shown
        assert out["info"]["recall"]["across"]["items"][0]["id"] == listed[0]["id"]

    other = node(
        f"""
const c = await recalld.Client.connect(SOCKET);
const out = await c.decorate("ts-sam", {json.dumps(request("Could you answer in bullet points again?"))}, {{ now: {T0 + 3 * DAY}, agent: "helper", user: "sam" }});
const listed = await c.call("list_memories", {{ agent: "helper", user: "sam", status: "all" }});
await c.close();
console.log(JSON.stringify({{ messages: out.request.messages, listed }}));
""",
        daemon,
    )
    assert all("earlier conversations" not in (m.get("content") or "") for m in other["messages"]), other
    assert other["listed"]["memories"] == []


HANDBOOK = """# Returns

Unworn shoes may be returned within 30 days of delivery for a full refund.

# Warranty

The hiking boots carry a two-year warranty against sole separation and broken eyelets.
"""


def test_a_document_added_by_the_cli_is_shown_as_reference(daemon: str, tmp_path) -> None:
    """The knowledge base through the real CLI, socket and built-in model: a document added
    with `recalld documents add` answers a question of a new conversation, marked as reference."""
    import os
    import subprocess

    from conftest import REPO

    binary = os.environ.get("RECALLD_BIN") or str(REPO / "target" / "debug" / "recalld")
    doc = tmp_path / "handbook.md"
    doc.write_text(HANDBOOK)
    out = subprocess.run(
        [binary, "documents", "add", "shop", str(doc), "--socket", daemon], capture_output=True, text=True, check=True
    )
    added = json.loads(out.stdout)
    assert added["name"] == "handbook.md" and added["chunks"] == 2 and added["by_meaning"], added
    with recalld.Client(daemon) as c:
        out = c.decorate(
            "buyer-1", request("Is sole separation covered by the warranty on my boots?"), now=T0, agent="shop", user="kim"
        )
        shown = "\n".join(m["content"] for m in out["request"]["messages"] if m["role"] == "system")
        assert "reference documents" in shown and "two-year warranty" in shown, shown
        listed = c.call("list_documents", {"agent": "shop"})["documents"]
        assert [d["name"] for d in listed] == ["handbook.md"]


def test_the_model_remembers_and_recalls_through_the_real_daemon(daemon: str) -> None:
    """The scope tools through the socket: both are offered to a memory with an agent, and a
    note saved with remember in one conversation is shown in the user's next."""
    note = "Kim's visa interview is on June 4; ask how it went."
    remember = {"id": "m1", "type": "function", "function": {"name": "remember", "arguments": json.dumps({"note": note, "block": None})}}
    with recalld.Client(daemon) as c:
        out = c.decorate("kim-1", request("I have my visa interview soon."), now=T0, agent="consul", user="kim")
        names = [t["function"]["name"] for t in out["request"].get("tools", [])]
        assert "remember" in names and "recall" in names, names
        reply = {
            "id": "r", "object": "chat.completion", "model": "gpt-4o",
            "choices": [{"index": 0, "finish_reason": "tool_calls",
                         "message": {"role": "assistant", "content": "Good luck!", "tool_calls": [remember]}}],
        }
        done = c.report("kim-1", reply, now=T0 + 5)
        assert "tool_calls" not in done["response"]["choices"][0]["message"], done
        out = c.decorate("kim-2", request("Hello again."), now=T0 + 3_600, agent="consul", user="kim")
        shown = "\n".join(m["content"] for m in out["request"]["messages"] if m["role"] == "system")
        assert note in shown, shown
