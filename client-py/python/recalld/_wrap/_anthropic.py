"""Anthropic Messages as the wrapper sees them (see `_openai.py` for the stream filter contract).

Stream events: the note's `tool_use` block (every event with its `index`) is held back and
later blocks renumbered; `stop_reason: "tool_use"` becomes `end_turn` when the note was the only
tool call. The reply is assembled from `message_start`, the blocks and `message_delta`.
"""

from __future__ import annotations

import copy
import json
from typing import Any, Dict, List, Optional, Set

from ._plain import dump, rebuild_like


class Messages:
    """`client.messages.create`."""

    def mark(self, request: Dict[str, Any]) -> Dict[str, Any]:
        """A request recalld reads as Messages: a minimal one (no `system`, no tools, no tool
        blocks) would read as Chat Completions, so it gets an empty `system`, which the
        decorated request leaves out again."""
        return request if "system" in request else {**request, "system": ""}

    def note_tool(self, request: Dict[str, Any]) -> Optional[str]:
        tools = request.get("tools") or []
        return tools[-1].get("name") if tools else None

    def dump(self, reply: Any) -> Dict[str, Any]:
        return dump(reply)

    def rebuild(self, reply: Any, dumped: Dict[str, Any], response: Dict[str, Any]) -> Any:
        if response == dumped:
            return reply
        return rebuild_like(reply, response)

    def stream_filter(self, note: Optional[str]) -> "MessagesStreamFilter":
        return MessagesStreamFilter(note)


class MessagesStreamFilter:
    def __init__(self, note: Optional[str]) -> None:
        self.note = note
        self.visible = note is None
        self._pending: List[Any] = []
        self._note_blocks: Set[int] = set()
        self._other_tools = 0
        self._message: Dict[str, Any] = {}
        self._blocks: Dict[int, Dict[str, Any]] = {}
        self._partial_json: Dict[int, str] = {}

    def feed(self, event: Any) -> List[Any]:
        d = dump(event)
        self._assemble(d)
        if self.note is None:
            return [event]
        kind = d.get("type", "")
        index = d.get("index")
        if isinstance(index, int):
            block = d.get("content_block") if kind == "content_block_start" else None
            if index in self._note_blocks or (
                isinstance(block, dict) and block.get("type") == "tool_use" and block.get("name") == self.note
            ):
                self._note_blocks.add(index)
                return []
            if isinstance(block, dict) and block.get("type") == "tool_use":
                self._other_tools += 1
            shift = sum(1 for i in self._note_blocks if i < index)
            return self._pass(rebuild_like(event, {**d, "index": index - shift}) if shift else event, True)
        delta = d.get("delta") or {}
        if kind == "message_delta" and delta.get("stop_reason") == "tool_use" and not self._other_tools:
            return self._pass(rebuild_like(event, {**d, "delta": {**delta, "stop_reason": "end_turn"}}), False)
        return self._pass(event, False)

    def _pass(self, out: Any, shows: bool) -> List[Any]:
        if self.visible:
            return [out]
        if not shows:
            self._pending.append(out)
            return []
        self.visible = True
        held, self._pending = self._pending, []
        return held + [out]

    def _assemble(self, d: Dict[str, Any]) -> None:
        kind = d.get("type")
        if kind == "message_start":
            self._message = copy.deepcopy(d.get("message") or {})
        elif kind == "content_block_start":
            self._blocks[d["index"]] = copy.deepcopy(d.get("content_block") or {})
        elif kind == "content_block_delta":
            block = self._blocks.get(d.get("index", -1))
            delta = d.get("delta") or {}
            if block is None:
                return
            if delta.get("type") == "text_delta":
                block["text"] = block.get("text", "") + delta.get("text", "")
            elif delta.get("type") == "input_json_delta":
                self._partial_json[d["index"]] = self._partial_json.get(d["index"], "") + delta.get("partial_json", "")
            elif delta.get("type") == "thinking_delta":
                block["thinking"] = block.get("thinking", "") + delta.get("thinking", "")
            elif delta.get("type") == "signature_delta":
                block["signature"] = delta.get("signature")
        elif kind == "content_block_stop":
            raw = self._partial_json.get(d.get("index", -1))
            block = self._blocks.get(d.get("index", -1))
            if block is not None and raw is not None:
                block["input"] = json.loads(raw) if raw else {}
        elif kind == "message_delta":
            self._message.update(d.get("delta") or {})
            if d.get("usage"):
                self._message["usage"] = {**(self._message.get("usage") or {}), **d["usage"]}

    def reply(self) -> Dict[str, Any]:
        return {**self._message, "content": [self._blocks[i] for i in sorted(self._blocks)]}

    def finish(self, response: Optional[Dict[str, Any]]) -> List[Any]:
        held, self._pending = self._pending, []
        return held
