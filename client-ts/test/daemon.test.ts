// End to end against the real daemon: `recalld serve` on a temp socket, driven by the client.

import assert from "node:assert/strict";
import { readFileSync } from "node:fs";
import { join } from "node:path";
import { after, before, describe, test } from "node:test";

import { Client, RecalldError, type ChatCompletion, type ChatCompletionsRequest } from "../src/index.js";
import { VECTORS_DIR, memoryId, startDaemon, type Daemon } from "./support.js";

function vectorArgs(name: string): Record<string, unknown> {
  return (JSON.parse(readFileSync(join(VECTORS_DIR, `${name}.json`), "utf8")) as { args: Record<string, unknown> }).args;
}

const chatRequest = (): ChatCompletionsRequest => ({
  model: "gpt-4o",
  messages: [
    { role: "system", content: "You help the web team ship the pricing page. Be brief." },
    { role: "user", content: "Who owns checkout?" },
  ],
});

const completion = (text: string): ChatCompletion => ({
  id: "chatcmpl-1",
  object: "chat.completion",
  model: "gpt-4o",
  choices: [{ index: 0, finish_reason: "stop", message: { role: "assistant", content: text } }],
  usage: { prompt_tokens: 40, completion_tokens: 5, total_tokens: 45 },
});

describe("against the real daemon", { timeout: 120_000 }, () => {
  let daemon: Daemon;
  let client: Client;

  before(async () => {
    daemon = await startDaemon();
    client = await Client.connect(daemon.socket);
  });

  after(async () => {
    await client?.close();
    await daemon?.stop();
  });

  test("hello handshake", async () => {
    const server = client.server;
    assert.equal(server.protocol_version, 1);
    assert.ok(server.limits.max_frame_bytes > 0);
    assert.ok(server.limits.max_memory_id_bytes >= 256);
    assert.ok(Array.isArray(server.capabilities));
    for (const op of ["hello", "ping", "decorate", "report", "export"]) {
      assert.ok(server.capabilities.includes(op), `capabilities lack ${op}`);
    }
    const again = await client.hello();
    assert.equal(again.protocol_version, 1);
    assert.equal(typeof again.server_version, "string");
  });

  test("hello with a version range the server does not speak is refused", async () => {
    await assert.rejects(client.call("hello", { min_version: 99, max_version: 99 }), {
      code: "version_unsupported",
      retryable: false,
    });
  });

  test("connect takes a unix:// URL and RECALLD_SOCKET", async () => {
    const byUrl = await Client.connect(`unix://${daemon.socket}`);
    await byUrl.ping();
    await byUrl.close();
    const saved = process.env["RECALLD_SOCKET"];
    process.env["RECALLD_SOCKET"] = daemon.socket;
    try {
      const byEnv = await Client.connect();
      assert.equal(byEnv.path, daemon.socket);
      await byEnv.close();
    } finally {
      if (saved === undefined) delete process.env["RECALLD_SOCKET"];
      else process.env["RECALLD_SOCKET"] = saved;
    }
  });

  test("ping echoes a nested payload", async () => {
    const payload = vectorArgs("ping_request")["payload"];
    const reply = await client.ping(payload);
    assert.deepEqual(reply.payload, payload);
  });

  test("200 concurrent requests are all matched to their callers", async () => {
    const calls = Array.from({ length: 200 }, (_, i) => client.ping({ i, pad: "x".repeat(i % 37) }));
    const replies = await Promise.all(calls);
    replies.forEach((reply, i) => assert.deepEqual(reply.payload, { i, pad: "x".repeat(i % 37) }));
  });

  test("health and stats answer with maps", async () => {
    const health = await client.health();
    assert.equal(typeof health, "object");
    const stats = await client.stats();
    assert.equal(typeof stats, "object");
  });

  test("decorate, report and export one conversation", async () => {
    const memory = memoryId("conv");
    const decorated = await client.decorate(memory, chatRequest(), { now: new Date(1767225600500) });
    assert.equal(typeof decorated.info, "object");
    assert.ok(decorated.info !== null);
    assert.equal(decorated.request.model, "gpt-4o");
    assert.ok(Array.isArray(decorated.request.messages), "decorated request has messages");
    const lastUser = decorated.request.messages.filter((m) => m.role === "user").at(-1);
    assert.ok(lastUser !== undefined, "the user message reaches the model");

    const reported = await client.report(memory, completion("Dana owns checkout."), { now: 1767225660.25 });
    assert.equal(typeof reported.again, "boolean");
    assert.equal(reported.again, false);
    assert.equal(reported.response.choices[0]?.message.content, "Dana owns checkout.");

    const exported = await client.export(memory);
    assert.ok(Array.isArray(exported.messages), "export has messages");
    for (const m of exported.messages) assert.equal(typeof m.role, "string");
    const roles = exported.messages.map((m) => m.role);
    assert.ok(roles.includes("user"), `no user message in export: ${JSON.stringify(roles)}`);
    assert.ok(roles.includes("assistant"), `no assistant message in export: ${JSON.stringify(roles)}`);
  });

  test("decorate of the conformance vectors' requests (chat with tools, responses delta)", async () => {
    const chat = vectorArgs("decorate_chat_request");
    const a = await client.decorate(memoryId("vec-chat"), chat["request"] as object, { now: chat["now"] as number });
    assert.ok(Array.isArray((a.request as { messages?: unknown }).messages));
    const resp = vectorArgs("decorate_responses_request");
    const b = await client.decorate(memoryId("vec-resp"), resp["request"] as object, { history: "delta" });
    assert.equal(typeof b.info, "object");
    assert.equal((b.request as { model?: unknown }).model, "gpt-4.1");
  });

  test("inspect shows the memory and the messages of a turn; memories lists it", async () => {
    const memory = memoryId("inspect");
    await client.decorate(memory, chatRequest(), { now: 1767225600 });
    await client.report(memory, completion("Noted."), { now: 1767225601 });
    const seen = await client.inspect(memory, { at: new Date(Date.UTC(2026, 0, 2)), turns: [1, 1], curve: 0 });
    assert.equal(seen.memory, memory);
    assert.equal(seen.at, 1767312000);
    assert.equal(seen.record["turns"], 1);
    assert.deepEqual(seen.decisions.map((d) => d["turn"]), [1]);
    assert.deepEqual(seen.messages?.map((m) => m.role), ["user", "assistant"]);
    await assert.rejects(client.inspect(`${memory}-never`), { code: "not_found" });
    const listed = (await client.memories()).memories.find((m) => m.memory === memory);
    assert.equal(listed?.turns, 1);
  });

  test("dry-run decorate stores nothing", async () => {
    const memory = memoryId("dry");
    await client.decorate(memory, chatRequest(), { dryRun: true });
    const exported = await client.export(memory).catch((err: unknown) => err);
    if (exported instanceof RecalldError) assert.equal(exported.code, "not_found");
    else assert.deepEqual((exported as { messages: unknown[] }).messages, []);
  });

  test("invalid memory ids are rejected with invalid_argument", async () => {
    for (const memory of ["", "m".repeat(300)]) {
      await assert.rejects(client.decorate(memory, chatRequest()), { code: "invalid_argument", retryable: false });
      await assert.rejects(client.report(memory, completion("hi")), { code: "invalid_argument" });
      await assert.rejects(client.export(memory), { code: "invalid_argument" });
    }
  });

  test("an unknown op is rejected with unknown_op and the connection stays usable", async () => {
    await assert.rejects(client.call("no_such_op", { x: 1 }), (err: unknown) => {
      assert.ok(err instanceof RecalldError);
      assert.equal(err.code, "unknown_op");
      assert.equal(err.op, "no_such_op");
      return true;
    });
    assert.deepEqual((await client.ping("still here")).payload, "still here");
  });
});
