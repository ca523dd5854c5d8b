// `wrap` around the real `openai` npm package (6.x), pointed at the scripted fake model server
// (fake_llm.ts) and the real daemon.

import assert from "node:assert/strict";
import { after, before, describe, test } from "node:test";

import OpenAI from "openai";

import { Client, ConnectionError, RecalldError, withMemory, wrap } from "../src/index.js";
import { CEILING, SYSTEM, T0, checkConversation, factsBlock, hasNote, storedReply, userText } from "./conversation.js";
import { NOTE_TOOL, startFakeLLM, toolNames, type FakeLLM } from "./fake_llm.js";
import { memoryId, startDaemon, type Daemon } from "./support.js";

/** The structured output the parse tests ask for (the fake fills it in, fake_llm.py). */
const BUILD_STATUS = {
  type: "object",
  properties: { summary: { type: "string" }, green: { type: "boolean" }, passed: { type: "integer" } },
  required: ["summary", "green", "passed"],
  additionalProperties: false,
};

describe("wrap(openai)", { timeout: 300_000 }, () => {
  let daemon: Daemon;
  let fake: FakeLLM;
  const openai = () => new OpenAI({ baseURL: fake.url + "/v1", apiKey: "test", maxRetries: 0 });

  before(async () => {
    daemon = await startDaemon();
    fake = await startFakeLLM();
  });
  after(async () => {
    await fake?.stop();
    await daemon?.stop();
  });

  test("chat: a conversation at a small ceiling fades, takes the note and honours again", async () => {
    const from = (await fake.requests()).length;
    const client = wrap(openai(), { memory: memoryId("chat"), socket: daemon.socket, ceiling: CEILING });
    const history: any[] = [{ role: "system", content: SYSTEM }];
    const turns = 14;
    for (let i = 0; i < turns; i++) {
      history.push({ role: "user", content: userText(i) });
      const reply = await client.chat.completions.create(
        withMemory({ model: "gpt-4o-mini", messages: history }, { now: T0 + 60 * i }),
      );
      const message = reply.choices[0]!.message;
      assert.match(message.content ?? "", /^Answer/);
      assert.ok(!message.tool_calls?.length, "the note call never reaches the caller");
      history.push({ role: "assistant", content: message.content });
    }
    await checkConversation(fake, "/chat/completions", turns, history.length, from);
  });

  test("chat stream: text arrives delta by delta, the note is held back, the second call is streamed", async () => {
    const from = (await fake.requests()).length;
    const memory = memoryId("chat-stream");
    const client = wrap(openai(), { memory, socket: daemon.socket, ceiling: CEILING });
    const history: any[] = [{ role: "system", content: SYSTEM }];
    const turns = 14;
    for (let i = 0; i < turns; i++) {
      history.push({ role: "user", content: userText(i) });
      const stream = await client.chat.completions.create(
        withMemory({ model: "gpt-4o-mini", messages: history, stream: true as const }, { now: T0 + 60 * i }),
      );
      assert.equal(stream.constructor.name, "Stream");
      let text = "";
      const finishes: string[] = [];
      for await (const chunk of stream) {
        const choice = chunk.choices[0];
        assert.ok(!choice?.delta.tool_calls?.length, "no note deltas shown");
        text += choice?.delta.content ?? "";
        if (choice?.finish_reason) finishes.push(choice.finish_reason);
      }
      assert.match(text, /^Answer/);
      assert.deepEqual(finishes, ["stop"]);
      history.push({ role: "assistant", content: text });
    }
    await checkConversation(fake, "/chat/completions", turns, history.length, from);
  });

  test("a streamed reply holding the note and the answer: the note's deltas are cut out, no second call", async () => {
    const from = (await fake.requests()).length;
    await fake.config({ note_with_text: true });
    try {
      const client = wrap(openai(), { memory: memoryId("note-with-text"), socket: daemon.socket, ceiling: CEILING });
      const history: any[] = [{ role: "system", content: SYSTEM }];
      for (let i = 0; i < 14; i++) {
        history.push({ role: "user", content: userText(i) });
        const stream = await client.chat.completions.create(
          withMemory({ model: "m", messages: history, stream: true as const }, { now: T0 + 60 * i }),
        );
        let text = "";
        const finishes: string[] = [];
        for await (const chunk of stream) {
          assert.ok(!chunk.choices[0]?.delta.tool_calls?.length, "no note deltas shown");
          text += chunk.choices[0]?.delta.content ?? "";
          if (chunk.choices[0]?.finish_reason) finishes.push(chunk.choices[0].finish_reason);
        }
        assert.match(text, /^Answer/);
        assert.deepEqual(finishes, ["stop"]);
        history.push({ role: "assistant", content: text });
      }
      const bodies = (await fake.requests()).slice(from).map(([, b]) => b);
      assert.equal(bodies.length, 14, "no second call");
      assert.ok(bodies.some((b) => toolNames(b).includes(NOTE_TOOL)), "the note was asked for");
    } finally {
      await fake.config({ note_with_text: false });
    }
  });

  test("stream deltas reach the caller one by one", async () => {
    const memory = memoryId("gate");
    const client = wrap(openai(), { memory, socket: daemon.socket });
    await fake.gateOn();
    const stream = await client.chat.completions.create({
      model: "gpt-4o-mini",
      messages: [{ role: "user", content: "How is the build?" }],
      stream: true,
    });
    const pieces: string[] = [];
    for await (const chunk of stream) {
      const t = chunk.choices[0]?.delta.content;
      if (t) {
        pieces.push(t);
        await fake.gatePut(); // the server sends the next delta only after this one arrived
      }
    }
    await fake.gateOff();
    assert.equal(await fake.gateTimeouts(), 0, "a delta was held until a later one was sent");
    assert.ok(pieces.length > 5);
    const c = await Client.connect(daemon.socket);
    const exported = await c.export(memory);
    await c.close();
    const last = exported.messages[exported.messages.length - 1] as any;
    assert.equal(last.message.content, pieces.join(""), "the assembled reply was reported");
  });

  test("the SDK's stream() and parse() helpers go through the wrapper", async () => {
    const memory = memoryId("helpers");
    const client = wrap(openai(), { memory, socket: daemon.socket });
    const runner = client.chat.completions.stream({ model: "m", messages: [{ role: "user", content: "hi" }] });
    const final = await runner.finalChatCompletion();
    assert.match(final.choices[0]!.message.content ?? "", /^Answer/);
    const parsed = await client.chat.completions.parse({ model: "m", messages: [{ role: "user", content: "again" }] });
    assert.match(parsed.choices[0]!.message.content ?? "", /^Answer/);
    const { data, response } = await client.chat.completions
      .create({ model: "m", messages: [{ role: "user", content: "third" }] })
      .withResponse();
    assert.match(data.choices[0]!.message.content ?? "", /^Answer/);
    assert.equal((response as Response).status, 200);
    const c = await Client.connect(daemon.socket);
    assert.equal((await c.export(memory)).messages.length, 6);
    await c.close();
  });

  for (const noteWithText of [false, true]) {
    const how = noteWithText ? "a note alongside the answer is cut out" : "after a note-only reply the second call is parsed";
    test(`chat parse: a json_schema reply is parsed and stored; ${how}`, async () => {
      const from = (await fake.requests()).length;
      await fake.config({ note_with_text: noteWithText });
      try {
        const memory = memoryId("chat-parse");
        const client = wrap(openai(), { memory, socket: daemon.socket, ceiling: CEILING });
        const response_format = {
          type: "json_schema" as const,
          json_schema: { name: "build_status", strict: true, schema: BUILD_STATUS },
        };
        const history: any[] = [{ role: "system", content: SYSTEM }];
        let noteTurns = 0;
        for (let i = 0; i < 14; i++) {
          history.push({ role: "user", content: userText(i) });
          const sent = (await fake.requests()).length;
          const reply = await client.chat.completions.parse(
            withMemory({ model: "gpt-4o-mini", messages: history, response_format }, { now: T0 + 60 * i }),
          );
          const message = reply.choices[0]!.message;
          const parsed = message.parsed as any;
          assert.ok(parsed, "the reply was parsed");
          assert.deepEqual(parsed, JSON.parse(message.content ?? ""));
          assert.match(parsed.summary, /^Answer/);
          assert.equal(parsed.passed, 42);
          assert.ok(!message.tool_calls?.length, "the note call never reaches the caller");
          const requests = await fake.requests();
          if (requests.slice(sent).some(([, b]) => hasNote(b))) {
            noteTurns++;
            assert.equal(reply.id, `chatcmpl-${requests.length}`, "the last call's reply is the one parsed");
          }
          assert.equal(await storedReply(daemon.socket, memory), message.content, "the reply was reported");
          history.push({ role: "assistant", content: message.content });
        }
        assert.ok(noteTurns > 0, "the conversation never reached the note ask");
        const bodies = (await fake.requests()).slice(from).map(([, b]) => b);
        assert.ok(bodies.every((b) => b["response_format"]?.type === "json_schema"), "every call asked for the schema");
        if (noteWithText) assert.equal(bodies.length, 14, "a reply holding more than the note: no second call");
        else await checkConversation(fake, "/chat/completions", 14, history.length, from);
      } finally {
        await fake.config({ note_with_text: false });
      }
    });

    test(`responses parse: a json_schema reply is parsed into output_parsed and stored; ${how}`, async () => {
      const from = (await fake.requests()).length;
      await fake.config({ note_with_text: noteWithText });
      try {
        const memory = memoryId("responses-parse");
        const client = wrap(openai(), { memory, socket: daemon.socket, ceiling: CEILING });
        const text = { format: { type: "json_schema" as const, name: "build_status", strict: true, schema: BUILD_STATUS } };
        const items: any[] = [];
        let noteTurns = 0;
        for (let i = 0; i < 14; i++) {
          items.push({ role: "user", content: userText(i) });
          const sent = (await fake.requests()).length;
          const reply = await client.responses.parse(
            withMemory({ model: "gpt-4o-mini", instructions: SYSTEM, input: items, text }, { now: T0 + 60 * i }),
          );
          const parsed = reply.output_parsed as any;
          assert.ok(parsed, "the reply was parsed");
          assert.deepEqual(parsed, JSON.parse(reply.output_text));
          assert.match(parsed.summary, /^Answer/);
          assert.equal(parsed.passed, 42);
          assert.ok(reply.output.every((o) => o.type === "message"), "the note call never reaches the caller");
          const requests = await fake.requests();
          if (requests.slice(sent).some(([, b]) => hasNote(b))) {
            noteTurns++;
            assert.equal(reply.id, `resp_${requests.length}`, "the last call's reply is the one parsed");
          }
          assert.equal(await storedReply(daemon.socket, memory), reply.output_text, "the reply was reported");
          items.push({ role: "assistant", content: reply.output_text });
        }
        assert.ok(noteTurns > 0, "the conversation never reached the note ask");
        const bodies = (await fake.requests()).slice(from).map(([, b]) => b);
        assert.ok(bodies.every((b) => b["text"]?.format?.type === "json_schema"), "every call asked for the schema");
        if (noteWithText) assert.equal(bodies.length, 14, "a reply holding more than the note: no second call");
        else await checkConversation(fake, "/responses", 14, items.length + 1, from);
      } finally {
        await fake.config({ note_with_text: false });
      }
    });
  }

  test("responses: conversation and stream", async () => {
    const from = (await fake.requests()).length;
    const client = wrap(openai(), { memory: memoryId("responses"), socket: daemon.socket, ceiling: CEILING });
    const items: any[] = [];
    const turns = 14;
    for (let i = 0; i < turns; i++) {
      items.push({ role: "user", content: userText(i) });
      let text: string;
      if (i % 2) {
        const stream = await client.responses.create(
          withMemory({ model: "m", instructions: SYSTEM, input: items, stream: true as const }, { now: T0 + 60 * i }),
        );
        const events: any[] = [];
        for await (const e of stream) events.push(e);
        assert.ok(!events.some((e) => e.type === "response.function_call_arguments.delta"), "no note events");
        text = events.filter((e) => e.type === "response.output_text.delta").map((e) => e.delta).join("");
        const done = events[events.length - 1];
        assert.equal(done.type, "response.completed");
        assert.ok(done.response.output.every((o: any) => o.type === "message"));
        assert.deepEqual([...new Set(events.filter((e) => "output_index" in e).map((e) => e.output_index))], [0]);
      } else {
        const reply = await client.responses.create(withMemory({ model: "m", instructions: SYSTEM, input: items }, { now: T0 + 60 * i }));
        assert.ok(reply.output.every((o) => o.type === "message"), "no note call shown");
        text = reply.output_text;
      }
      assert.match(text, /^Answer/);
      items.push({ role: "assistant", content: text });
    }
    await checkConversation(fake, "/responses", turns, items.length + 1, from);
  });

  test("responses stream: events reach the caller one by one and the assembled reply is reported", async () => {
    const memory = memoryId("responses-gate");
    const client = wrap(openai(), { memory, socket: daemon.socket });
    const timeouts = await fake.gateTimeouts();
    await fake.gateOn();
    const stream = await client.responses.create({ model: "gpt-4o-mini", input: "How is the build?", stream: true });
    const pieces: string[] = [];
    const events: any[] = [];
    for await (const e of stream) {
      events.push(e);
      if (e.type === "response.output_text.delta") {
        pieces.push(e.delta);
        await fake.gatePut(); // the server sends the next delta only after this one arrived
      }
    }
    await fake.gateOff();
    assert.equal(await fake.gateTimeouts(), timeouts, "an event was held until a later one was sent");
    assert.ok(pieces.length > 5);
    const done = events[events.length - 1];
    assert.equal(done.type, "response.completed");
    assert.equal(done.response.output[0].content[0].text, pieces.join(""));
    assert.equal(await storedReply(daemon.socket, memory), pieces.join(""), "the assembled reply was reported");
  });

  test("responses stream: a note-only turn is held back, the second call is streamed delta by delta, the facts follow", async () => {
    const memory = memoryId("responses-note-stream");
    const client = wrap(openai(), { memory, socket: daemon.socket, ceiling: CEILING });
    const items: any[] = [];
    let noteTurn: number | undefined;
    for (let i = 0; i < 14; i++) {
      items.push({ role: "user", content: userText(i) });
      const sent = (await fake.requests()).length;
      const timeouts = await fake.gateTimeouts();
      await fake.gateOn(); // a fresh gate each turn: gateOff drops the last delta's token
      const stream = await client.responses.create(
        withMemory({ model: "m", instructions: SYSTEM, input: items, stream: true as const }, { now: T0 + 60 * i }),
      );
      const events: any[] = [];
      for await (const e of stream) {
        events.push(e);
        if (e.type === "response.output_text.delta") await fake.gatePut();
      }
      await fake.gateOff();
      const text = events.filter((e) => e.type === "response.output_text.delta").map((e) => e.delta).join("");
      assert.match(text, /^Answer/);
      items.push({ role: "assistant", content: text });
      const requests = await fake.requests();
      const bodies = requests.slice(sent).map(([, b]) => b);
      if (noteTurn !== undefined) {
        assert.match(factsBlock("/responses", bodies[0]!), /Fact \d+: the deploy key rotates every Friday/);
        break;
      }
      if (!hasNote(bodies[0]!)) {
        assert.equal(bodies.length, 1);
        continue;
      }
      noteTurn = i;
      assert.equal(bodies.length, 2, "a note-only reply: a second call");
      assert.ok(!hasNote(bodies[1]!), "the second call carries no ask");
      const created = events.filter((e) => e.type === "response.created").map((e) => e.response.id);
      assert.deepEqual(created, [`resp_${requests.length}`], "the caller sees the second call's stream only");
      assert.ok(
        !events.some((e) => e.item?.type === "function_call" || e.type.startsWith("response.function_call_arguments")),
        "no note events shown",
      );
      assert.deepEqual([...new Set(events.filter((e) => "output_index" in e).map((e) => e.output_index))], [0]);
      const done = events[events.length - 1];
      assert.equal(done.type, "response.completed");
      assert.ok(done.response.output.every((o: any) => o.type === "message"));
      assert.equal(await fake.gateTimeouts(), timeouts, "the second call was streamed delta by delta");
    }
    assert.ok(noteTurn !== undefined, "the conversation never reached the note ask");
    const c = await Client.connect(daemon.socket);
    const facts = (await c.export(memory)).facts as any[];
    await c.close();
    assert.ok(facts.some((f) => /^Fact \d+: the deploy key/.test(f.note)), "the note's facts reached the daemon");
  });

  test("per-call options override the wrapper's", async () => {
    const memory = memoryId("opts");
    const other = memory + "-other";
    const client = wrap(openai(), { memory, socket: daemon.socket });
    const ask = (content: string, opts?: object) =>
      client.chat.completions.create(withMemory({ model: "m", messages: [{ role: "user" as const, content }] }, opts ?? {}));
    await ask("one");
    await ask("two", { memory: other });
    await ask("three", { dryRun: true });
    await ask("four", { memory: null });
    const c = await Client.connect(daemon.socket);
    const mine = (await c.export(memory)).messages.map((m: any) => m.message.content);
    const theirs = (await c.export(other)).messages.map((m: any) => m.message.content);
    await c.close();
    assert.equal(mine.length, 2);
    assert.equal(mine[0], "one");
    assert.equal(theirs[0], "two");
    assert.throws(() => ask("x", { memroy: "y" }), /unknown recalld option/);
  });

  test("per-call agent, user and ceiling reach the memory; a streamed dry run stores nothing", async () => {
    const memory = memoryId("opts-scope");
    const client = wrap(openai(), { memory, socket: daemon.socket, ceiling: CEILING });
    const first = [{ role: "user" as const, content: "one" }];
    await client.chat.completions.create(
      withMemory({ model: "m", messages: first }, { agent: "support-bot", user: "alex", ceiling: 9000 }),
    );
    const c = await Client.connect(daemon.socket);
    const before = (await c.export(memory)) as any;
    assert.deepEqual([before.record.agent, before.record.user, before.record.ceiling], ["support-bot", "alex", 9000]);
    const history = [...first, { role: "assistant" as const, content: "noted" }, { role: "user" as const, content: "two, dry" }];
    const stream = await client.chat.completions.create(
      withMemory({ model: "m", messages: history, stream: true as const }, { dryRun: true }),
    );
    let text = "";
    for await (const chunk of stream) text += chunk.choices[0]?.delta.content ?? "";
    assert.ok(text.length > 0, "the streamed text reached the caller");
    const after = (await c.export(memory)) as any;
    await c.close();
    assert.equal(after.messages.length, before.messages.length, "a dry run stores nothing");
  });

  test("recalld errors are typed, model errors stay the SDK's", async () => {
    const before = (await fake.requests()).length;
    const bad = wrap(openai(), { memory: "", socket: daemon.socket });
    await assert.rejects(
      () => bad.chat.completions.create({ model: "m", messages: [{ role: "user", content: "hi" }] }),
      (err: unknown) => err instanceof RecalldError && err.code === "invalid_argument" && !(err instanceof OpenAI.APIError),
    );
    assert.equal((await fake.requests()).length, before, "a refused decorate never reaches the model");
    await fake.config({ fail_next: 500 });
    const client = wrap(openai(), { memory: memoryId("err"), socket: daemon.socket });
    await assert.rejects(
      () => client.chat.completions.create({ model: "m", messages: [{ role: "user", content: "hi" }] }),
      OpenAI.InternalServerError,
    );
  });

  test("daemon down: fails fast, or passes through with a warning", async () => {
    const missing = "/tmp/recalld-nobody-" + process.pid + ".sock";
    const before = (await fake.requests()).length;
    const client = wrap(openai(), { memory: "m", socket: missing });
    const started = Date.now();
    await assert.rejects(
      () => client.chat.completions.create({ model: "m", messages: [{ role: "user", content: "hi" }] }),
      (err: unknown) => err instanceof ConnectionError && /not reachable/.test(err.message) && err.code === "unavailable",
    );
    assert.ok(Date.now() - started < 2000, "fails fast");
    assert.equal((await fake.requests()).length, before);
    const warnings: string[] = [];
    const passing = wrap(openai(), { memory: "m", socket: missing, passThrough: true, warn: (m) => warnings.push(m) });
    const messages = [{ role: "user" as const, content: "hi" }];
    const reply = await passing.chat.completions.create({ model: "m", messages });
    assert.match(reply.choices[0]!.message.content ?? "", /^Answer/);
    const stream = await passing.chat.completions.create({ model: "m", messages, stream: true });
    let text = "";
    for await (const c of stream) text += c.choices[0]?.delta.content ?? "";
    assert.match(text, /^Answer/);
    const sent = (await fake.requests()).slice(before).map(([, b]) => b["messages"]);
    assert.deepEqual(sent, [messages, messages], "sent unchanged");
    assert.equal(warnings.length, 2);
  });
});
