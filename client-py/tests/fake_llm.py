"""A local HTTP server that speaks the OpenAI Chat Completions and Responses APIs and the
Anthropic Messages API, with a scripted model, for the SDK wrapper tests.

The model (`ScriptedModel`) answers from what the request holds: when the request offers the
note tool it answers with a note call only; when the last user message starts with `run:` it
calls the `shell` tool; otherwise it answers in text, or, when the request asks for structured
output (a JSON schema in `response_format` or `text.format`), in a JSON object of that schema
whose string fields hold the answer (`structured_answer`). Replies are sent as JSON or, for
`stream: true`, as server-sent events in each API's own event shapes. Every request body is
kept in `requests` so tests can see what reached the model.

`gate`: when set, a streamed text reply waits for a token on it before each text delta after
the first; a wait that times out is counted in `gate_timeouts`. A test that puts one token per
delta it received proves that deltas reach it one by one, as they are sent.
"""

from __future__ import annotations

import json
import queue
import threading
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any, Dict, Iterator, List, Optional, Tuple

NOTE_TOOL = "note"
FACTS_HEADER = "Recorded facts from compacted history"


@dataclass
class Reply:
    text: Optional[str] = None
    calls: List[Tuple[str, str, str]] = field(default_factory=list)  # (id, name, arguments json)


def request_texts(path: str, body: Dict[str, Any]) -> List[Tuple[str, str]]:
    """(role, text) of every message or item of a request, in any of the three APIs."""

    def text_of(content: Any) -> str:
        if isinstance(content, str):
            return content
        if isinstance(content, list):
            return "\n".join(str(p.get("text", "")) for p in content if isinstance(p, dict))
        return ""

    out: List[Tuple[str, str]] = []
    if path.endswith("/messages"):
        system = body.get("system")
        if system:
            out.append(("system", text_of(system)))
        for m in body.get("messages", []):
            out.append((m.get("role", ""), text_of(m.get("content"))))
    elif path.endswith("/responses"):
        if body.get("instructions"):
            out.append(("system", body["instructions"]))
        items = body.get("input")
        if isinstance(items, str):
            items = [{"role": "user", "content": items}]
        for it in items or []:
            role = it.get("role") or it.get("type", "")
            out.append((role, text_of(it.get("content")) or str(it.get("output", ""))))
    else:
        for m in body.get("messages", []):
            out.append((m.get("role", ""), text_of(m.get("content"))))
    return out


def tool_names(path: str, body: Dict[str, Any]) -> List[str]:
    names = []
    for t in body.get("tools") or []:
        names.append(t.get("name") or (t.get("function") or {}).get("name", ""))
    return names


class ScriptedModel:
    """Deterministic answers. `note_with_text`: answer a note ask with the note call and the
    text answer together instead of the note call alone."""

    def __init__(self) -> None:
        self.notes_written = 0
        self.answers = 0
        self.note_with_text = False

    def note_sentence(self) -> str:
        return f"Fact {self.notes_written}: the deploy key rotates every Friday at 09:00 UTC."

    def __call__(self, path: str, body: Dict[str, Any]) -> Reply:
        texts = request_texts(path, body)
        last_user = next((t for r, t in reversed(texts) if r == "user"), "")
        if NOTE_TOOL in tool_names(path, body):
            self.notes_written += 1
            args = {
                "notes": [
                    {"note": self.note_sentence(), "subject": "deploy key", "object": "Friday", "milestone": False}
                ]
            }
            call = (f"call_note_{self.notes_written}", NOTE_TOOL, json.dumps(args))
            if self.note_with_text:
                return Reply(text=self.text_answer(path, body), calls=[call])
            return Reply(calls=[call])
        if last_user.startswith("run:") and not texts[-1][0] in ("tool", "function_call_output") and texts[-1][1]:
            # Call the first tool offered with the rest of the message as its first parameter.
            tool = next(t for t in body.get("tools") or [] if NOTE_TOOL not in tool_names(path, {"tools": [t]}))
            schema = tool.get("parameters") or tool.get("input_schema") or (tool.get("function") or {}).get("parameters") or {}
            param = (schema.get("required") or list(schema.get("properties") or {}) or ["command"])[0]
            name = tool_names(path, {"tools": [tool]})[0]
            args = json.dumps({param: last_user[len("run:") :].strip()})
            return Reply(calls=[(f"call_{name}_{len(texts)}", name, args)])
        return Reply(text=self.text_answer(path, body))

    def text_answer(self, path: str, body: Dict[str, Any]) -> str:
        schema = output_schema(path, body)
        return self.answer() if schema is None else json.dumps(structured_answer(schema, self.answer()))

    def answer(self) -> str:
        self.answers += 1
        return f"Answer {self.answers}: the build is green and the release notes are drafted for review."


def output_schema(path: str, body: Dict[str, Any]) -> Optional[Dict[str, Any]]:
    """The JSON schema a request asks the answer to follow, if any."""
    if path.endswith("/chat/completions"):
        fmt = body.get("response_format") or {}
        if fmt.get("type") == "json_schema":
            return (fmt.get("json_schema") or {}).get("schema") or {}
    elif path.endswith("/responses"):
        fmt = (body.get("text") or {}).get("format") or {}
        if fmt.get("type") == "json_schema":
            return fmt.get("schema") or {}
    return None


def structured_answer(schema: Dict[str, Any], text: str) -> Dict[str, Any]:
    """An object of a flat schema: strings hold `text`, integers 42, booleans true."""
    filler = {"string": text, "integer": 42, "number": 0.5, "boolean": True, "array": [], "object": {}}
    return {name: filler.get(prop.get("type")) for name, prop in (schema.get("properties") or {}).items()}


def _chunks(text: str) -> List[str]:
    words = text.split(" ")
    return [w if i == 0 else " " + w for i, w in enumerate(words)]


class FakeLLM:
    def __init__(self, model: Optional[Any] = None) -> None:
        self.model = model or ScriptedModel()
        self.requests: List[Tuple[str, Dict[str, Any]]] = []
        self.gate: Optional["queue.Queue[int]"] = None
        self.gate_timeouts = 0
        self.fail_next: Optional[int] = None  # answer the next request with this HTTP status
        server = ThreadingHTTPServer(("127.0.0.1", 0), _handler(self))
        server.daemon_threads = True
        self._server = server
        self._thread = threading.Thread(target=server.serve_forever, daemon=True)
        self._thread.start()

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self._server.server_address[1]}"

    def close(self) -> None:
        self._server.shutdown()
        self._server.server_close()

    def bodies(self, suffix: str = "") -> List[Dict[str, Any]]:
        return [b for p, b in self.requests if p.endswith(suffix)]

    def control(self, path: str, body: Dict[str, Any]) -> Dict[str, Any]:
        """The control routes a test in another language uses: `/_fake/gate` turns the gate on
        (or off, with `{"off": true}`) or puts a token on it, `/_fake/config` sets `note_with_text` and `fail_next`."""
        if path == "/_fake/gate":
            if body.get("off"):
                self.gate = None
            elif self.gate is None:
                self.gate = queue.Queue()
            if body.get("put") and self.gate is not None:
                self.gate.put(1)
        elif path == "/_fake/config":
            if "note_with_text" in body:
                self.model.note_with_text = bool(body["note_with_text"])
            if "fail_next" in body:
                self.fail_next = body["fail_next"]
        return {"ok": True}

    def wait_gate(self) -> None:
        if self.gate is None:
            return
        try:
            self.gate.get(timeout=5)
        except queue.Empty:
            self.gate_timeouts += 1

    # --- Chat Completions ----------------------------------------------------------------

    def chat_json(self, body: Dict[str, Any], reply: Reply, n: int) -> Dict[str, Any]:
        message: Dict[str, Any] = {"role": "assistant", "content": reply.text, "refusal": None}
        if reply.calls:
            message["tool_calls"] = [
                {"id": i, "type": "function", "function": {"name": name, "arguments": args}}
                for i, name, args in reply.calls
            ]
        return {
            "id": f"chatcmpl-{n}",
            "object": "chat.completion",
            "created": 1767225600 + n,
            "model": body.get("model", "gpt-4o-mini"),
            "choices": [
                {
                    "index": 0,
                    "message": message,
                    "finish_reason": "tool_calls" if reply.calls else "stop",
                    "logprobs": None,
                }
            ],
            "usage": {"prompt_tokens": 100, "completion_tokens": 20, "total_tokens": 120},
        }

    def chat_events(self, body: Dict[str, Any], reply: Reply, n: int) -> Iterator[Tuple[Optional[str], Any]]:
        head = {"id": f"chatcmpl-{n}", "object": "chat.completion.chunk", "created": 1767225600 + n}
        head["model"] = body.get("model", "gpt-4o-mini")

        def chunk(delta: Dict[str, Any], finish: Optional[str] = None) -> Dict[str, Any]:
            return {**head, "choices": [{"index": 0, "delta": delta, "finish_reason": finish, "logprobs": None}]}

        yield None, chunk({"role": "assistant", "content": ""})
        for index, (cid, name, args) in enumerate(reply.calls):
            yield None, chunk(
                {"tool_calls": [{"index": index, "id": cid, "type": "function", "function": {"name": name, "arguments": ""}}]}
            )
            half = len(args) // 2
            for part in (args[:half], args[half:]):
                yield None, chunk({"tool_calls": [{"index": index, "function": {"arguments": part}}]})
        for i, piece in enumerate(_chunks(reply.text or "") if reply.text else []):
            if i > 0:
                yield "gate", None
            yield None, chunk({"content": piece})
        yield None, chunk({}, "tool_calls" if reply.calls else "stop")
        yield None, "[DONE]"

    # --- Responses -----------------------------------------------------------------------

    def responses_items(self, reply: Reply, n: int) -> List[Dict[str, Any]]:
        items: List[Dict[str, Any]] = []
        for cid, name, args in reply.calls:
            items.append(
                {"type": "function_call", "id": f"fc_{cid}", "call_id": cid, "name": name, "arguments": args, "status": "completed"}
            )
        if reply.text is not None:
            items.append(
                {
                    "type": "message",
                    "id": f"msg_{n}",
                    "role": "assistant",
                    "status": "completed",
                    "content": [{"type": "output_text", "text": reply.text, "annotations": []}],
                }
            )
        return items

    def responses_json(self, body: Dict[str, Any], reply: Reply, n: int, output: Optional[List[Any]] = None) -> Dict[str, Any]:
        return {
            "id": f"resp_{n}",
            "object": "response",
            "created_at": 1767225600 + n,
            "status": "completed",
            "model": body.get("model", "gpt-4o-mini"),
            "output": self.responses_items(reply, n) if output is None else output,
            "parallel_tool_calls": True,
            "tool_choice": "auto",
            "tools": [],
            "usage": {
                "input_tokens": 100,
                "output_tokens": 20,
                "total_tokens": 120,
                "input_tokens_details": {"cached_tokens": 0},
                "output_tokens_details": {"reasoning_tokens": 0},
            },
        }

    def responses_events(self, body: Dict[str, Any], reply: Reply, n: int) -> Iterator[Tuple[Optional[str], Any]]:
        seq = iter(range(10_000))
        start = {**self.responses_json(body, reply, n, output=[]), "status": "in_progress", "usage": None}
        yield None, {"type": "response.created", "sequence_number": next(seq), "response": start}
        for index, item in enumerate(self.responses_items(reply, n)):
            if item["type"] == "function_call":
                yield None, {
                    "type": "response.output_item.added",
                    "sequence_number": next(seq),
                    "output_index": index,
                    "item": {**item, "arguments": "", "status": "in_progress"},
                }
                yield None, {
                    "type": "response.function_call_arguments.delta",
                    "sequence_number": next(seq),
                    "output_index": index,
                    "item_id": item["id"],
                    "delta": item["arguments"],
                }
                yield None, {
                    "type": "response.function_call_arguments.done",
                    "sequence_number": next(seq),
                    "output_index": index,
                    "item_id": item["id"],
                    "arguments": item["arguments"],
                    "name": item["name"],
                }
            else:
                yield None, {
                    "type": "response.output_item.added",
                    "sequence_number": next(seq),
                    "output_index": index,
                    "item": {**item, "content": [], "status": "in_progress"},
                }
                part = {"type": "output_text", "text": "", "annotations": []}
                yield None, {
                    "type": "response.content_part.added",
                    "sequence_number": next(seq),
                    "output_index": index,
                    "item_id": item["id"],
                    "content_index": 0,
                    "part": part,
                }
                for i, piece in enumerate(_chunks(reply.text or "")):
                    if i > 0:
                        yield "gate", None
                    yield None, {
                        "type": "response.output_text.delta",
                        "sequence_number": next(seq),
                        "output_index": index,
                        "item_id": item["id"],
                        "content_index": 0,
                        "delta": piece,
                        "logprobs": [],
                    }
                yield None, {
                    "type": "response.content_part.done",
                    "sequence_number": next(seq),
                    "output_index": index,
                    "item_id": item["id"],
                    "content_index": 0,
                    "part": {**part, "text": reply.text},
                }
            yield None, {"type": "response.output_item.done", "sequence_number": next(seq), "output_index": index, "item": item}
        yield None, {"type": "response.completed", "sequence_number": next(seq), "response": self.responses_json(body, reply, n)}

    # --- Anthropic Messages --------------------------------------------------------------

    def messages_blocks(self, reply: Reply) -> List[Dict[str, Any]]:
        blocks: List[Dict[str, Any]] = []
        if reply.text is not None:
            blocks.append({"type": "text", "text": reply.text})
        for cid, name, args in reply.calls:
            blocks.append({"type": "tool_use", "id": cid.replace("call_", "toolu_"), "name": name, "input": json.loads(args)})
        return blocks

    def messages_json(self, body: Dict[str, Any], reply: Reply, n: int) -> Dict[str, Any]:
        return {
            "id": f"msg_{n}",
            "type": "message",
            "role": "assistant",
            "model": body.get("model", "claude-sonnet-4-5"),
            "content": self.messages_blocks(reply),
            "stop_reason": "tool_use" if reply.calls else "end_turn",
            "stop_sequence": None,
            "usage": {"input_tokens": 100, "output_tokens": 20},
        }

    def messages_events(self, body: Dict[str, Any], reply: Reply, n: int) -> Iterator[Tuple[Optional[str], Any]]:
        start = {**self.messages_json(body, reply, n), "content": [], "stop_reason": None}
        start["usage"] = {"input_tokens": 100, "output_tokens": 1}
        yield None, {"type": "message_start", "message": start}
        for index, block in enumerate(self.messages_blocks(reply)):
            if block["type"] == "text":
                yield None, {"type": "content_block_start", "index": index, "content_block": {"type": "text", "text": ""}}
                for i, piece in enumerate(_chunks(block["text"])):
                    if i > 0:
                        yield "gate", None
                    yield None, {"type": "content_block_delta", "index": index, "delta": {"type": "text_delta", "text": piece}}
            else:
                yield None, {"type": "content_block_start", "index": index, "content_block": {**block, "input": {}}}
                args = json.dumps(block["input"])
                half = len(args) // 2
                for part in (args[:half], args[half:]):
                    yield None, {
                        "type": "content_block_delta",
                        "index": index,
                        "delta": {"type": "input_json_delta", "partial_json": part},
                    }
            yield None, {"type": "content_block_stop", "index": index}
        yield None, {
            "type": "message_delta",
            "delta": {"stop_reason": "tool_use" if reply.calls else "end_turn", "stop_sequence": None},
            "usage": {"output_tokens": 20},
        }
        yield None, {"type": "message_stop"}


def _handler(fake: FakeLLM) -> type:
    class Handler(BaseHTTPRequestHandler):
        def log_message(self, format: str, *args: Any) -> None:
            pass

        def do_GET(self) -> None:
            if self.path == "/_fake/requests":
                return self._json({"requests": fake.requests, "gate_timeouts": fake.gate_timeouts}, 200)
            self._json({"error": {"message": f"no route {self.path}"}}, 404)

        def do_POST(self) -> None:
            body = json.loads(self.rfile.read(int(self.headers.get("Content-Length", "0"))) or b"{}")
            path = self.path.split("?")[0]
            if path.startswith("/_fake/"):
                return self._json(fake.control(path, body), 200)
            fake.requests.append((path, body))
            n = len(fake.requests)
            if fake.fail_next is not None:
                status, fake.fail_next = fake.fail_next, None
                return self._json({"error": {"message": "scripted failure", "type": "server_error"}}, status)
            reply = fake.model(path, body)
            if path.endswith("/chat/completions"):
                as_json, events = fake.chat_json, fake.chat_events
            elif path.endswith("/responses"):
                as_json, events = fake.responses_json, fake.responses_events
            elif path.endswith("/messages"):
                as_json, events = fake.messages_json, fake.messages_events
            else:
                return self._json({"error": {"message": f"no route {path}"}}, 404)
            if not body.get("stream"):
                return self._json(as_json(body, reply, n), 200)
            self.send_response(200)
            self.send_header("Content-Type", "text/event-stream")
            self.send_header("Connection", "close")
            self.end_headers()
            for tag, data in events(body, reply, n):
                if tag == "gate":
                    fake.wait_gate()
                    continue
                payload = data if isinstance(data, str) else json.dumps(data)
                event = "" if isinstance(data, str) or path.endswith("/chat/completions") else f"event: {data['type']}\n"
                self.wfile.write(f"{event}data: {payload}\n\n".encode())
                self.wfile.flush()
            self.close_connection = True

        def _json(self, data: Dict[str, Any], status: int) -> None:
            raw = json.dumps(data).encode()
            self.send_response(status)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(raw)))
            self.end_headers()
            self.wfile.write(raw)

    return Handler


if __name__ == "__main__":
    # Serves until stdin closes; prints the base URL on the first line (for the TypeScript tests).
    import sys

    fake = FakeLLM()
    print(fake.url, flush=True)
    sys.stdin.read()
    fake.close()
