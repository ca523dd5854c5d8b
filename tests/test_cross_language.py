"""One conversation, two languages, one daemon: Python decorates, TypeScript reports, both
export the same stored history. Also checks each client's encoding against the conformance
vectors from outside its own suite."""

from __future__ import annotations

import json
import subprocess
from pathlib import Path

import recalld

REPO = Path(__file__).resolve().parents[1]
TS_CLIENT = REPO / "client-ts" / "dist" / "src" / "index.js"


def node(script: str, sock: str) -> dict:
    """Runs an ES module with the TypeScript client imported as `recalld`; it prints JSON."""
    prelude = f"import * as recalld from {json.dumps(TS_CLIENT.as_uri())};\nconst SOCKET = {json.dumps(sock)};\n"
    out = subprocess.run(
        ["node", "--input-type=module", "-e", prelude + script],
        check=True,
        capture_output=True,
        text=True,
        timeout=60,
    )
    return json.loads(out.stdout)


def test_python_decorates_typescript_reports_both_export_the_same(daemon: str) -> None:
    request = {
        "model": "gpt-4o",
        "messages": [
            {"role": "system", "content": "Be brief."},
            {"role": "user", "content": "Which table did finance ask for?"},
        ],
    }
    with recalld.Client(daemon) as py:
        out = py.decorate("x-lang", request, now=1_767_225_600.5)
        assert out["request"]["messages"][-1] == request["messages"][-1]
    reply = {
        "id": "chatcmpl-9",
        "object": "chat.completion",
        "model": "gpt-4o",
        "choices": [{"index": 0, "finish_reason": "stop", "message": {"role": "assistant", "content": "The pricing table."}}],
        "usage": {"prompt_tokens": 30, "completion_tokens": 4, "total_tokens": 34},
    }
    ts = node(
        f"""
const c = await recalld.Client.connect(SOCKET);
const r = await c.report("x-lang", {json.dumps(reply)}, {{ now: 1767225601.25 }});
const e = await c.export("x-lang");
await c.close();
console.log(JSON.stringify({{ again: r.again, export: e }}));
""",
        daemon,
    )
    assert ts["again"] is False
    with recalld.Client(daemon) as py:
        py_export = py.export("x-lang")
    assert py_export == ts["export"], "both languages read the same stored history"
    contents = [m["message"]["content"] for m in py_export["messages"]]
    assert contents[-2:] == ["Which table did finance ask for?", "The pricing table."]
    assert py_export["messages"][-1]["source"] == "reply"


def test_typescript_and_python_encode_the_vectors_identically(daemon: str) -> None:
    vectors = sorted((REPO / "protocol" / "vectors").glob("*.json"))
    assert len(vectors) >= 7
    names = [v.stem for v in vectors]
    ts = node(
        f"""
import {{ encode }} from "@msgpack/msgpack";
import {{ readFileSync }} from "node:fs";
const out = {{}};
for (const n of {json.dumps(names)}) {{
  const v = JSON.parse(readFileSync({json.dumps(str(REPO / "protocol" / "vectors"))} + "/" + n + ".json", "utf8"));
  out[n] = Buffer.from(encode(v)).toString("hex");
}}
console.log(JSON.stringify(out));
""".replace('from "@msgpack/msgpack"', f'from {json.dumps((REPO / "client-ts" / "node_modules" / "@msgpack" / "msgpack" / "dist.esm" / "index.mjs").as_uri())}'),
        daemon,
    )
    for path in vectors:
        expected = path.with_suffix(".msgpack").read_bytes()
        value = json.loads(path.read_text())
        assert recalld._native.encode(value) == expected, path.stem
        assert bytes.fromhex(ts[path.stem]) == expected, path.stem
