/**
 * A small complete agent loop with memory: one tool, any OpenAI-compatible endpoint.
 *
 *   make ts-client && client-ts/node_modules/.bin/tsc -p examples     # builds client-ts/dist/examples/agent.js
 *   OPENAI_BASE_URL=http://localhost:11434/v1 OPENAI_API_KEY=x MODEL=qwen2.5 node client-ts/dist/examples/agent.js
 *
 * Environment: OPENAI_BASE_URL and OPENAI_API_KEY (read by the openai package), MODEL (default
 * gpt-4o-mini), RECALLD_SOCKET (default: the daemon's default socket), RECALLD_MEMORY (the
 * conversation's memory id, default "example-agent"), RECALLD_CEILING (tokens, default 8000).
 * Start the daemon first (`make run`). Type a message per line; an empty line or EOF ends.
 */

import { createInterface } from "node:readline";

import OpenAI from "openai";
import { wrap } from "recalld";

const TOOLS = [
  {
    type: "function" as const,
    function: {
      name: "calculator",
      description: "Evaluate an arithmetic expression (numbers, + - * / % and parentheses).",
      parameters: {
        type: "object",
        properties: { expression: { type: "string", description: "e.g. (17 + 4) * 2" } },
        required: ["expression"],
      },
    },
  },
];

/** Arithmetic only: a small recursive-descent parser, nothing is evaluated as code. */
function calculator(expression: string): string {
  const tokens = expression.match(/\d+(?:\.\d+)?|[-+*/%()]/g) ?? [];
  if (tokens.join("") !== expression.replace(/\s+/g, "")) return "error: only numbers and + - * / % ( ) are allowed";
  let i = 0;
  const peek = () => tokens[i];
  const atom = (): number => {
    const t = tokens[i++];
    if (t === "(") {
      const v = sum();
      if (tokens[i++] !== ")") throw new Error("missing )");
      return v;
    }
    if (t === "-") return -atom();
    if (t === undefined || Number.isNaN(Number(t))) throw new Error(`unexpected ${t ?? "end"}`);
    return Number(t);
  };
  const product = (): number => {
    let v = atom();
    while (peek() === "*" || peek() === "/" || peek() === "%") {
      const op = tokens[i++];
      const r = atom();
      v = op === "*" ? v * r : op === "/" ? v / r : v % r;
    }
    return v;
  };
  const sum = (): number => {
    let v = product();
    while (peek() === "+" || peek() === "-") v = tokens[i++] === "+" ? v + product() : v - product();
    return v;
  };
  try {
    const v = sum();
    return i === tokens.length ? String(v) : "error: trailing input";
  } catch (err) {
    return `error: ${(err as Error).message}`;
  }
}

async function main(): Promise<void> {
  const client = wrap(new OpenAI(), {
    memory: process.env["RECALLD_MEMORY"] ?? "example-agent",
    socket: process.env["RECALLD_SOCKET"],
    ceiling: Number(process.env["RECALLD_CEILING"] ?? 8000),
  });
  const model = process.env["MODEL"] ?? "gpt-4o-mini";
  const history: OpenAI.ChatCompletionMessageParam[] = [
    { role: "system", content: "You are a helpful assistant. Use the calculator for arithmetic." },
  ];
  for await (const line of createInterface({ input: process.stdin })) {
    if (!line.trim()) break;
    history.push({ role: "user", content: line.trim() });
    for (;;) {
      // One user turn: call the model until it answers without a tool call.
      const reply = await client.chat.completions.create({ model, messages: history, tools: TOOLS });
      const message = reply.choices[0]!.message;
      history.push(message);
      if (!message.tool_calls?.length) {
        console.log(`assistant: ${message.content}`);
        break;
      }
      for (const call of message.tool_calls) {
        if (call.type !== "function") continue;
        const args = JSON.parse(call.function.arguments || "{}") as { expression?: string };
        const result = calculator(String(args.expression ?? ""));
        console.log(`tool ${call.function.name}(${JSON.stringify(args)}) = ${result}`);
        history.push({ role: "tool", tool_call_id: call.id, content: result });
      }
    }
  }
}

main().catch((err) => {
  console.error(err);
  process.exit(1);
});
