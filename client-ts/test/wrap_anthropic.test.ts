// `wrap` around the real `@anthropic-ai/sdk` npm package, pointed at the scripted fake model
// server (fake_llm.ts) and the real daemon: the Anthropic Messages format end to end.

import assert from "node:assert/strict";
import { after, before, describe, test } from "node:test";

import Anthropic from "@anthropic-ai/sdk";

import { Client, withMemory, wrap } from "../src/index.js";
import { startFakeLLM, type FakeLLM } from "./fake_llm.js";
import { memoryId, startDaemon, type Daemon } from "./support.js";
import { CEILING, SYSTEM, T0, checkConversation, factsBlock, hasNote, userText } from "./conversation.js";

describe("wrap(anthropic)", { timeout: 300_000 }, () => {
  let daemon: Daemon;
  let fake: FakeLLM;
  const anthropic = () => new Anthropic({ baseURL: fake.url, apiKey: "test", maxRetries: 0 });

  before(async () => {
    daemon = await startDaemon();
    fake = await startFakeLLM();
  });
  after(async () => {
    await fake?.stop();
    await daemon?.stop();
  });

  test("messages: a conversation fades, takes the note, honours again; streams hold the note back", async () => {
    const from = (await fake.requests()).length;
    const client = wrap(anthropic(), { memory: memoryId("messages"), socket: daemon.socket, ceiling: CEILING });
    const history: Anthropic.MessageParam[] = [];
    const turns = 14;
    for (let i = 0; i < turns; i++) {
      history.push({ role: "user", content: userText(i) });
      const body = { model: "claude-test", max_tokens: 300, system: SYSTEM, messages: history };
      let text: string;
      if (i % 2) {
        const stream = await client.messages.create(withMemory({ ...body, stream: true as const }, { now: T0 + 60 * i }));
        const events: any[] = [];
        for await (const e of stream) events.push(e);
        assert.ok(!events.some((e) => e.type === "content_block_start" && e.content_block.type === "tool_use"), "no note shown");
        text = events.filter((e) => e.type === "content_block_delta").map((e) => e.delta.text).join("");
        const stop = events.find((e) => e.type === "message_delta").delta.stop_reason;
        assert.equal(stop, "end_turn");
        assert.deepEqual([...new Set(events.filter((e) => "index" in e).map((e) => e.index))], [0]);
      } else {
        const reply = await client.messages.create(withMemory(body, { now: T0 + 60 * i }));
        assert.ok(reply.content.every((b) => b.type === "text"), "no note call shown");
        text = reply.content.map((b) => (b.type === "text" ? b.text : "")).join("");
      }
      assert.match(text, /^Answer/);
      history.push({ role: "assistant", content: text });
    }
    await checkConversation(fake, "/messages", turns, history.length + 1, from);
  });

  test("stream deltas reach the caller one by one", async () => {
    const memory = memoryId("messages-gate");
    const client = wrap(anthropic(), { memory, socket: daemon.socket });
    await fake.gateOn();
    const stream = await client.messages.create({
      model: "claude-test",
      max_tokens: 300,
      messages: [{ role: "user", content: "How is the build?" }],
      stream: true,
    });
    const pieces: string[] = [];
    for await (const e of stream) {
      if (e.type === "content_block_delta" && e.delta.type === "text_delta") {
        pieces.push(e.delta.text);
        await fake.gatePut(); // the server sends the next delta only after this one arrived
      }
    }
    await fake.gateOff();
    assert.equal(await fake.gateTimeouts(), 0, "a delta was held until a later one was sent");
    assert.ok(pieces.length > 5);
    const c = await Client.connect(daemon.socket);
    const exported = await c.export(memory);
    await c.close();
    const content = (exported.messages[exported.messages.length - 1] as any).message.content;
    const reported = typeof content === "string" ? content : content.map((b: any) => b.text ?? "").join("");
    assert.equal(reported, pieces.join(""), "the assembled reply was reported");
  });

  test("stream: a note-only turn is held back, the second call is streamed delta by delta, the facts follow", async () => {
    const memory = memoryId("messages-note-stream");
    const client = wrap(anthropic(), { memory, socket: daemon.socket, ceiling: CEILING });
    const history: Anthropic.MessageParam[] = [];
    let noteTurn: number | undefined;
    for (let i = 0; i < 14; i++) {
      history.push({ role: "user", content: userText(i) });
      const sent = (await fake.requests()).length;
      const timeouts = await fake.gateTimeouts();
      await fake.gateOn(); // a fresh gate each turn: gateOff drops the last delta's token
      const body = { model: "claude-test", max_tokens: 300, system: SYSTEM, messages: history, stream: true as const };
      const stream = await client.messages.create(withMemory(body, { now: T0 + 60 * i }));
      const events: any[] = [];
      for await (const e of stream) {
        events.push(e);
        if (e.type === "content_block_delta" && e.delta.type === "text_delta") await fake.gatePut();
      }
      await fake.gateOff();
      const text = events
        .filter((e) => e.type === "content_block_delta" && e.delta.type === "text_delta")
        .map((e) => e.delta.text)
        .join("");
      assert.match(text, /^Answer/);
      history.push({ role: "assistant", content: text });
      const requests = await fake.requests();
      const bodies = requests.slice(sent).map(([, b]) => b);
      if (noteTurn !== undefined) {
        assert.match(factsBlock("/messages", bodies[0]!), /Fact \d+: the deploy key rotates every Friday/);
        break;
      }
      if (!hasNote(bodies[0]!)) {
        assert.equal(bodies.length, 1);
        continue;
      }
      noteTurn = i;
      assert.equal(bodies.length, 2, "a note-only reply: a second call");
      assert.ok(!hasNote(bodies[1]!), "the second call carries no ask");
      const starts = events.filter((e) => e.type === "message_start").map((e) => e.message.id);
      assert.deepEqual(starts, [`msg_${requests.length}`], "the caller sees the second call's stream only");
      assert.ok(!events.some((e) => e.type === "content_block_start" && e.content_block.type === "tool_use"), "no note shown");
      assert.ok(!events.some((e) => e.type === "content_block_delta" && e.delta.type === "input_json_delta"), "no note deltas");
      assert.deepEqual(events.filter((e) => e.type === "message_delta").map((e) => e.delta.stop_reason), ["end_turn"]);
      assert.deepEqual([...new Set(events.filter((e) => "index" in e).map((e) => e.index))], [0]);
      assert.equal(await fake.gateTimeouts(), timeouts, "the second call was streamed delta by delta");
    }
    assert.ok(noteTurn !== undefined, "the conversation never reached the note ask");
    const c = await Client.connect(daemon.socket);
    const facts = (await c.export(memory)).facts as any[];
    await c.close();
    assert.ok(facts.some((f) => /^Fact \d+: the deploy key/.test(f.note)), "the note's facts reached the daemon");
  });

  test("the SDK's messages.stream() helper and tool use go through the wrapper", async () => {
    const memory = memoryId("messages-tools");
    const client = wrap(anthropic(), { memory, socket: daemon.socket });
    const tools = [
      {
        name: "shell",
        description: "Run a shell command.",
        input_schema: { type: "object" as const, properties: { command: { type: "string" } }, required: ["command"] },
      },
    ];
    const history: Anthropic.MessageParam[] = [{ role: "user", content: "run: make test" }];
    const first = await client.messages.create({ model: "m", max_tokens: 100, messages: history, tools });
    const use = first.content.find((b) => b.type === "tool_use");
    assert.ok(use && use.type === "tool_use" && use.name === "shell");
    history.push({ role: "assistant", content: first.content });
    history.push({ role: "user", content: [{ type: "tool_result", tool_use_id: use.id, content: "42 passed" }] });
    const final = await client.messages.stream({ model: "m", max_tokens: 100, messages: history, tools }).finalMessage();
    assert.match(final.content[0]!.type === "text" ? final.content[0]!.text : "", /^Answer/);
    const c = await Client.connect(daemon.socket);
    const roles = (await c.export(memory)).messages.map((m) => m.role);
    await c.close();
    assert.deepEqual(roles, ["user", "assistant", "tool", "assistant"]);
  });
});
