"""A small complete agent loop with memory: one tool, any OpenAI-compatible endpoint.

    OPENAI_BASE_URL=http://localhost:11434/v1 OPENAI_API_KEY=x MODEL=qwen2.5 \
        python examples/agent.py

Environment: OPENAI_BASE_URL and OPENAI_API_KEY (read by the openai package), MODEL (default
gpt-4o-mini), RECALLD_SOCKET (default: the daemon's default socket), RECALLD_MEMORY (the
conversation's memory id, default "example-agent"), RECALLD_CEILING (tokens, default 8000).
Start the daemon first (`make run`). Type a message per line; an empty line or EOF ends.

The whole history is sent on every call, as if the context were unlimited: recalld keeps the
request under the ceiling, asks the model to note the facts of what leaves, and puts those
facts back in front of it.
"""

from __future__ import annotations

import ast
import json
import operator
import os
import sys

import openai

import recalld

TOOLS = [
    {
        "type": "function",
        "function": {
            "name": "calculator",
            "description": "Evaluate an arithmetic expression (numbers, + - * / ** % and parentheses).",
            "parameters": {
                "type": "object",
                "properties": {"expression": {"type": "string", "description": "e.g. (17 + 4) * 2"}},
                "required": ["expression"],
            },
        },
    }
]

_OPS = {
    ast.Add: operator.add,
    ast.Sub: operator.sub,
    ast.Mult: operator.mul,
    ast.Div: operator.truediv,
    ast.Pow: operator.pow,
    ast.Mod: operator.mod,
    ast.USub: operator.neg,
    ast.UAdd: operator.pos,
}


def calculator(expression: str) -> str:
    """Arithmetic only: the expression's syntax tree is walked, never executed."""

    def ev(node: ast.AST) -> float:
        if isinstance(node, ast.Constant) and isinstance(node.value, (int, float)):
            return node.value
        if isinstance(node, ast.BinOp) and type(node.op) in _OPS:
            return _OPS[type(node.op)](ev(node.left), ev(node.right))
        if isinstance(node, ast.UnaryOp) and type(node.op) in _OPS:
            return _OPS[type(node.op)](ev(node.operand))
        raise ValueError("only numbers and + - * / ** % are allowed")

    try:
        return str(ev(ast.parse(expression, mode="eval").body))
    except (ValueError, SyntaxError, ZeroDivisionError, OverflowError) as e:
        return f"error: {e}"


def main() -> None:
    client = recalld.wrap(
        openai.OpenAI(),
        memory=os.environ.get("RECALLD_MEMORY", "example-agent"),
        socket=os.environ.get("RECALLD_SOCKET"),
        ceiling=int(os.environ.get("RECALLD_CEILING", "8000")),
    )
    model = os.environ.get("MODEL", "gpt-4o-mini")
    history = [{"role": "system", "content": "You are a helpful assistant. Use the calculator for arithmetic."}]
    for line in sys.stdin:
        if not line.strip():
            break
        history.append({"role": "user", "content": line.strip()})
        while True:  # one user turn: call the model until it answers without a tool call
            reply = client.chat.completions.create(model=model, messages=history, tools=TOOLS)
            message = reply.choices[0].message
            history.append(message.model_dump(exclude_none=True))
            if not message.tool_calls:
                print(f"assistant: {message.content}", flush=True)
                break
            for call in message.tool_calls:
                args = json.loads(call.function.arguments or "{}")
                result = calculator(str(args.get("expression", "")))
                print(f"tool {call.function.name}({args}) = {result}", flush=True)
                history.append({"role": "tool", "tool_call_id": call.id, "content": result})


if __name__ == "__main__":
    main()
