"""OpenAI Chat Completions and Responses as the wrapper sees them: the note tool's name in a
decorated request, replies as dicts and back, and stream filters that hold back the note call's
events and assemble the whole reply for `report`.

A stream filter's `feed(event)` returns the events to hand the caller now (the event itself when
untouched; a rebuilt one when a note part was cut out of it); `visible` turns true once anything
but the note call was handed over; `reply()` is the assembled reply; `finish(response)` returns
what was held until the end (`response` is report's reply, or None when nothing was reported).
"""

from __future__ import annotations

from typing import Any, Dict, List, Optional, Set, Tuple

from ._plain import dump, rebuild_like


class ChatCompletions:
    """`client.chat.completions.create` / `.parse`."""

    def note_tool(self, request: Dict[str, Any]) -> Optional[str]:
        tools = request.get("tools") or []
        return (tools[-1].get("function") or {}).get("name") if tools else None

    def dump(self, reply: Any) -> Dict[str, Any]:
        return dump(reply)

    def rebuild(self, reply: Any, dumped: Dict[str, Any], response: Dict[str, Any]) -> Any:
        if response == dumped:
            return reply
        new = rebuild_like(reply, response)
        # `.parse()` replies carry parsed objects the dict cannot restore: keep the originals.
        for old_choice, new_choice in zip(getattr(reply, "choices", []), getattr(new, "choices", [])):
            parsed = getattr(old_choice.message, "parsed", None)
            if parsed is not None:
                new_choice.message.parsed = parsed
        return new

    def stream_filter(self, note: Optional[str]) -> "ChatStreamFilter":
        return ChatStreamFilter(note)


class ChatStreamFilter:
    def __init__(self, note: Optional[str]) -> None:
        self.note = note
        self.visible = note is None
        self._pending: List[Any] = []
        self._head: Dict[str, Any] = {}
        self._choices: Dict[int, Dict[str, Any]] = {}
        # (choice, index) of note calls; the caller's tool-call index for every other call
        self._note_calls: Set[Tuple[int, int]] = set()
        self._renumber: Dict[Tuple[int, int], int] = {}

    def feed(self, chunk: Any) -> List[Any]:
        d = dump(chunk)
        self._assemble(d)
        if self.note is None:
            return [chunk]
        changed, shows = self._cut_note(d)
        out = rebuild_like(chunk, d) if changed else chunk
        if changed and _empty_chunk(d):
            return []
        if self.visible:
            return [out]
        if not shows:
            self._pending.append(out)
            return []
        self.visible = True
        held, self._pending = self._pending, []
        return held + [out]

    def _cut_note(self, d: Dict[str, Any]) -> Tuple[bool, bool]:
        """Removes note tool-call deltas from `d` in place, renumbers the other calls and turns
        a `tool_calls` finish into `stop` when the note was the only call. Returns (changed,
        whether `d` shows anything)."""
        changed = shows = False
        for choice in d.get("choices") or []:
            ci = choice.get("index", 0)
            delta = choice.get("delta") or {}
            calls = delta.get("tool_calls")
            if calls:
                kept = []
                for call in calls:
                    key = (ci, call.get("index", 0))
                    name = (call.get("function") or {}).get("name")
                    if key not in self._renumber and (key in self._note_calls or name == self.note):
                        self._note_calls.add(key)
                        changed = True
                        continue
                    if key not in self._renumber:
                        self._renumber[key] = sum(1 for k in self._renumber if k[0] == ci)
                    if call.get("index", 0) != self._renumber[key]:
                        call["index"] = self._renumber[key]
                        changed = True
                    kept.append(call)
                if len(kept) != len(calls):
                    if kept:
                        delta["tool_calls"] = kept
                    else:
                        del delta["tool_calls"]
                shows = shows or bool(kept)
            shows = shows or bool(delta.get("content")) or bool(delta.get("refusal")) or bool(delta.get("audio"))
            if choice.get("finish_reason") == "tool_calls" and not any(k[0] == ci for k in self._renumber):
                choice["finish_reason"] = "stop"
                changed = True
        return changed, shows

    def _assemble(self, d: Dict[str, Any]) -> None:
        for key in ("id", "created", "model", "system_fingerprint", "service_tier"):
            if d.get(key) is not None:
                self._head[key] = d[key]
        if d.get("usage"):
            self._head["usage"] = d["usage"]
        for choice in d.get("choices") or []:
            c = self._choices.setdefault(
                choice.get("index", 0), {"content": [], "refusal": [], "calls": {}, "finish_reason": None}
            )
            delta = choice.get("delta") or {}
            if delta.get("content"):
                c["content"].append(delta["content"])
            if delta.get("refusal"):
                c["refusal"].append(delta["refusal"])
            for call in delta.get("tool_calls") or []:
                slot = c["calls"].setdefault(
                    call.get("index", 0), {"id": "", "type": "function", "function": {"name": "", "arguments": ""}}
                )
                if call.get("id"):
                    slot["id"] = call["id"]
                fn = call.get("function") or {}
                if fn.get("name"):
                    slot["function"]["name"] += fn["name"]
                if fn.get("arguments"):
                    slot["function"]["arguments"] += fn["arguments"]
            if choice.get("finish_reason"):
                c["finish_reason"] = choice["finish_reason"]

    def reply(self) -> Dict[str, Any]:
        choices = []
        for index in sorted(self._choices):
            c = self._choices[index]
            message: Dict[str, Any] = {
                "role": "assistant",
                "content": "".join(c["content"]) if c["content"] else None,
                "refusal": "".join(c["refusal"]) if c["refusal"] else None,
            }
            if c["calls"]:
                message["tool_calls"] = [c["calls"][i] for i in sorted(c["calls"])]
            choices.append({"index": index, "message": message, "finish_reason": c["finish_reason"] or "stop"})
        return {"object": "chat.completion", **self._head, "choices": choices}

    def finish(self, response: Optional[Dict[str, Any]]) -> List[Any]:
        held, self._pending = self._pending, []
        return held


def _empty_chunk(d: Dict[str, Any]) -> bool:
    """A chunk that, once the note was cut out, carries nothing for the caller."""
    if d.get("usage"):
        return False
    for choice in d.get("choices") or []:
        delta = choice.get("delta") or {}
        if choice.get("finish_reason") or any(v not in (None, "", []) for v in delta.values()):
            return False
    return True


class Responses:
    """`client.responses.create` / `.parse`."""

    def note_tool(self, request: Dict[str, Any]) -> Optional[str]:
        tools = request.get("tools") or []
        return tools[-1].get("name") if tools else None

    def dump(self, reply: Any) -> Dict[str, Any]:
        return dump(reply)

    def rebuild(self, reply: Any, dumped: Dict[str, Any], response: Dict[str, Any]) -> Any:
        if response == dumped:
            return reply
        new = rebuild_like(reply, response)
        # `.parse()` replies carry parsed objects the dict cannot restore: keep the originals
        # (by message id; the note call cut out of the output is never a message).
        parsed = {
            (item.id, i): part.parsed
            for item in getattr(reply, "output", None) or []
            if getattr(item, "type", None) == "message"
            for i, part in enumerate(item.content)
            if getattr(part, "parsed", None) is not None
        }
        for item in getattr(new, "output", None) or []:
            for i, part in enumerate(getattr(item, "content", None) or []):
                if (getattr(item, "id", None), i) in parsed:
                    part.parsed = parsed[(item.id, i)]
        return new

    def stream_filter(self, note: Optional[str]) -> "ResponsesStreamFilter":
        return ResponsesStreamFilter(note)


_TERMINAL = ("response.completed", "response.incomplete", "response.failed")


class ResponsesStreamFilter:
    """Responses events: the note's `function_call` item (every event with its `output_index`)
    is held back and later items renumbered; the terminal event (`response.completed`, …) is
    held until report and handed over carrying report's reply, without the note call."""

    def __init__(self, note: Optional[str]) -> None:
        self.note = note
        self.visible = note is None
        self._pending: List[Any] = []
        self._note_items: Set[int] = set()
        self._terminal: Optional[Tuple[Any, Dict[str, Any]]] = None
        self._snapshot: Dict[str, Any] = {}
        self._items: Dict[int, Dict[str, Any]] = {}

    def feed(self, event: Any) -> List[Any]:
        d = dump(event)
        kind = d.get("type", "")
        if isinstance(d.get("response"), dict):
            self._snapshot = d["response"]
        if kind == "response.output_item.done" and isinstance(d.get("item"), dict):
            self._items[d.get("output_index", len(self._items))] = d["item"]
        if kind in _TERMINAL:
            self._terminal = (event, d)
            return []
        if self.note is None:
            return [event]
        index = d.get("output_index")
        if not isinstance(index, int):
            out = event
        else:
            item = d.get("item") if kind == "response.output_item.added" else None
            if index in self._note_items or (
                isinstance(item, dict) and item.get("type") == "function_call" and item.get("name") == self.note
            ):
                self._note_items.add(index)
                return []
            shift = sum(1 for i in self._note_items if i < index)
            if shift:
                d["output_index"] = index - shift
                out = rebuild_like(event, d)
            else:
                out = event
        if self.visible:
            return [out]
        if not isinstance(index, int):
            self._pending.append(out)
            return []
        self.visible = True
        held, self._pending = self._pending, []
        return held + [out]

    def reply(self) -> Dict[str, Any]:
        if self._terminal is not None:
            return self._terminal[1]["response"]
        return {**self._snapshot, "object": "response", "output": [self._items[i] for i in sorted(self._items)]}

    def finish(self, response: Optional[Dict[str, Any]]) -> List[Any]:
        held, self._pending = self._pending, []
        if self._terminal is not None:
            event, d = self._terminal
            if response is not None and response != d["response"]:
                event = rebuild_like(event, {**d, "response": response})
            held.append(event)
        return held
