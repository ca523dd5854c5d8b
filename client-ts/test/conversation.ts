/** A multi-turn conversation at a small ceiling, shared by the wrapper tests. */

import assert from "node:assert/strict";

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

const hasNote = (b: Body) => toolNames(b).includes(NOTE_TOOL);

/** The model saw the note ask, a second call after each note-only reply, fading history and
 * the facts block (with the note) on every request after the note. */
export async function checkConversation(fake: FakeLLM, path: string, turns: number, historyLength: number, from = 0) {
  const bodies = (await fake.requests()).slice(from).filter(([p]) => p.endsWith(path)).map(([, b]) => b);
  const asks = bodies.flatMap((b, i) => (hasNote(b) ? [i] : []));
  assert.ok(asks.length > 0, "history never faded far enough to ask for a note");
  assert.equal(bodies.length, turns + asks.length, "one extra model call per note-only reply");
  for (const i of asks) assert.ok(!hasNote(bodies[i + 1]!), "the second call carries no ask");
  // The facts block: a message of its own, or (Anthropic) a part of `system`.
  const facts = (b: Body) => {
    const t = requestTexts(path, b).find(([, t]) => t.includes(FACTS_HEADER))?.[1] ?? "";
    return t.slice(t.indexOf(FACTS_HEADER));
  };
  const after = bodies.slice(asks[0]! + 1).map(facts);
  assert.ok(after.every(Boolean), "every request after the note carries the facts block");
  assert.match(after[after.length - 1]!, /Fact \d+: the deploy key rotates every Friday/);
  const sent = requestTexts(path, bodies[bodies.length - 1]!).length;
  assert.ok(sent < historyLength, `history faded: sent ${sent} of ${historyLength}`);
}

