/** A multi-turn conversation at a small ceiling, shared by the wrapper tests. */

import assert from "node:assert/strict";

import { Client } from "../src/index.js";
import { FACTS_HEADER, NOTE_TOOL, requestTexts, toolNames, type Body, type FakeLLM } from "./fake_llm.js";

export const CEILING = 2500;
export const T0 = 1_767_225_600;
export const SYSTEM = "You are the release assistant of the web team. Answer in one sentence.";
const WORDS = (
  "deploy staging checkout billing cache invoice latency rollout canary schema index queue worker " +
  "token session retry budget alert dashboard migration backup replica shard tenant webhook"
).split(" ");

export function userText(i: number, n = 110): string {
  const words = Array.from({ length: n }, (_, k) => WORDS[(i * 7 + k * 3) % WORDS.length]);
  return `Turn ${i}: ${words.join(" ")}.`;
}

export const hasNote = (b: Body) => toolNames(b).includes(NOTE_TOOL);

/** The facts block of a request: a message of its own, or (Anthropic) a part of `system`. */
export function factsBlock(path: string, body: Body): string {
  const t = requestTexts(path, body).find(([, t]) => t.includes(FACTS_HEADER))?.[1] ?? "";
  return t.slice(t.indexOf(FACTS_HEADER));
}

/** The text of the last reply the daemon stored for a memory (the note call is stored as a
 * message of its own, marked `note`). */
export async function storedReply(socket: string, memory: string): Promise<string> {
  const c = await Client.connect(socket);
  const messages = (await c.export(memory)).messages.filter((m: any) => !m.note);
  await c.close();
  const content = (messages[messages.length - 1] as any).message.content;
  return typeof content === "string" ? content : content.map((p: any) => p.text ?? "").join("");
}

/** The model saw the note ask, a second call after each note-only reply, fading history and
 * the facts block (with the note) on every request after the note. */
export async function checkConversation(fake: FakeLLM, path: string, turns: number, historyLength: number, from = 0) {
  const bodies = (await fake.requests()).slice(from).filter(([p]) => p.endsWith(path)).map(([, b]) => b);
  const asks = bodies.flatMap((b, i) => (hasNote(b) ? [i] : []));
  assert.ok(asks.length > 0, "history never faded far enough to ask for a note");
  assert.equal(bodies.length, turns + asks.length, "one extra model call per note-only reply");
  for (const i of asks) assert.ok(!hasNote(bodies[i + 1]!), "the second call carries no ask");
  const after = bodies.slice(asks[0]! + 1).map((b) => factsBlock(path, b));
  assert.ok(after.every(Boolean), "every request after the note carries the facts block");
  assert.match(after[after.length - 1]!, /Fact \d+: the deploy key rotates every Friday/);
  const sent = requestTexts(path, bodies[bodies.length - 1]!).length;
  assert.ok(sent < historyLength, `history faded: sent ${sent} of ${historyLength}`);
}

