// What the browser test shows the page: a slice of a real LoCoMo conversation replayed into a
// daemon as bench/src/replay.rs does it (speaker A the user, B the assistant, delta history, the
// model simulated openly: a note ask is answered with the conversation's own observations
// citing the leaving turns), at a small ceiling with hours passing between sessions so
// episodes leave, seal and fade; and an agent whose three conversations hand facts to its scope.

import { readFileSync } from "node:fs";

const MODEL = "replay-simulated";
export const T0 = 1_767_225_600; // 2026-01-01T00:00:00Z

/** Sessions `1..=sessions` of the LoCoMo sample `id` from `file`. */
export function locomo(file, id, sessions) {
  const sample = JSON.parse(readFileSync(file, "utf8")).find((s) => s.sample_id === id);
  if (!sample) throw new Error(`${file} has no sample ${id}`);
  const c = sample.conversation;
  const out = [];
  for (let k = 1; k <= sessions; k++) {
    const turns = (c[`session_${k}`] || []).map((t) => ({
      byA: t.speaker === c.speaker_a,
      dia: t.dia_id,
      text: t.blip_caption ? `${t.text} [shares ${t.blip_caption}]` : t.text,
    }));
    const obs = Object.entries(sample.observation[`session_${k}_observation`] || {}).flatMap(([speaker, list]) =>
      list.map(([text, cites]) => ({ speaker, text, cites: [].concat(cites) })),
    );
    out.push({ turns, observations: obs });
  }
  return { speakerA: c.speaker_a, speakerB: c.speaker_b, sessions: out };
}

/** The first capitalised name in `text` other than the speaker's (a stand-in triple's object). */
function objectOf(speaker, text) {
  const words = text.split(/\s+/).map((w) => w.replace(/[^\p{L}\p{N}]/gu, ""));
  for (let i = 1; i < words.length; i++) {
    if (/^\p{Lu}/u.test(words[i]) && !words[i].startsWith(speaker)) return words[i];
  }
  return "";
}

function reply(id, text, notes, now) {
  const message = { role: "assistant", content: text };
  if (notes) {
    message.tool_calls = [
      { id: `call_note_${id}`, type: "function", function: { name: "note", arguments: JSON.stringify({ notes }) } },
    ];
  }
  return {
    id: `replay-${id}`,
    object: "chat.completion",
    created: Math.floor(now),
    model: MODEL,
    choices: [{ index: 0, message, finish_reason: text === null ? "tool_calls" : "stop" }],
  };
}

/**
 * Replays `conv` into `memory`. Session k starts `sessionGap` seconds after session k-1, its
 * turns `turnGap` apart; the lane is let finish (`quiet`) before every call, so the replay is
 * deterministic. Returns the number of model calls.
 */
export async function replay(client, memory, conv, { ceiling, sessionGap, turnGap }) {
  const turnOf = new Map();
  const noted = new Set();
  const observations = conv.sessions.flatMap((s) => s.observations);
  let calls = 0;
  let turn = 0;
  const settle = () => client.call("quiet", { memory, timeout_ms: 60_000 });
  const notesFor = (info) => {
    if (!info.note_ask) return null;
    const leaving = (info.episodes || []).filter((e) => e.state === "leaving").map((e) => e.turns);
    const isLeaving = (dia) => turnOf.has(dia) && leaving.some(([a, b]) => turnOf.get(dia) >= a && turnOf.get(dia) <= b);
    const notes = [];
    observations.forEach((o, i) => {
      if (!noted.has(i) && o.cites.some(isLeaving)) {
        noted.add(i);
        notes.push({ note: o.text, subject: o.speaker, object: objectOf(o.speaker, o.text), milestone: false });
      }
    });
    return notes.length ? notes : [{ note: "", subject: "", object: "", milestone: false }];
  };
  const decorate = async (messages, now) => {
    await settle();
    const d = await client.call("decorate", {
      memory,
      now,
      ceiling,
      history: "delta",
      request: { model: MODEL, messages },
    });
    return d.info;
  };
  const report = async (text, notes, now) => {
    await settle();
    calls += 1;
    await client.call("report", { memory, now, response: reply(calls, text, notes, now) });
  };
  for (const [k, session] of conv.sessions.entries()) {
    const start = T0 + k * sessionGap;
    let pending = [];
    let pendingAt = start;
    for (const [i, t] of session.turns.entries()) {
      const now = start + i * turnGap;
      if (t.byA) {
        turn += 1;
        turnOf.set(t.dia, turn);
        pending.push({ role: "user", content: t.text });
        pendingAt = now;
        continue;
      }
      turnOf.set(t.dia, turn);
      const info = await decorate(pending, pending.length ? pendingAt : now);
      pending = [];
      await report(t.text, notesFor(info), now);
    }
    if (pending.length) {
      const info = await decorate(pending, pendingAt);
      const notes = notesFor(info);
      if (notes) await report(null, notes, pendingAt + turnGap);
    }
  }
  await settle();
  return calls;
}

/** Three conversations of `user` with `agent`, each noting a preference and ended, so the
 * agent's scope holds episodic facts and (the three agreeing) a semantic one. */
export async function agentConversations(client, agent, user) {
  const said = [
    ["Short answers please, in bullets.", "Alex prefers concise answers in bullet points.", "Alex", "answers"],
    ["We chose the annual plan for billing.", "Alex chose the annual billing plan in March.", "Alex", "billing plan"],
    ["Bullet points, keep it brief.", "Alex prefers concise answers in bullet points", "Alex", "answers"],
    ["The staging database is hosted in Sydney.", "The staging database is hosted in Sydney.", "staging database", "Sydney"],
    ["Could you keep it to bullets again?", "Alex prefers concise answers in bullet points.", "Alex", "answers"],
  ];
  const day = 86_400;
  for (const [i, [ask, note, subject, object]] of said.entries()) {
    const memory = `${agent}-chat-${i + 1}`;
    const now = T0 - 10 * day + i * day;
    await client.call("decorate", {
      memory,
      now,
      agent,
      user,
      request: { model: "gpt-4o", messages: [{ role: "user", content: ask }] },
    });
    const notes = [{ note, subject, object, milestone: false }];
    await client.call("report", { memory, now: now + 5, response: reply(`${agent}-${i}`, "Noted.", notes, now + 5) });
    await client.call("end", { memory, now: now + 60 });
    await client.call("quiet", { memory, timeout_ms: 120_000 });
  }
}
