// Client behaviour the real daemon cannot be made to show on demand: byte-exact requests,
// replies out of order, version refusal, the in-flight limit, bad replies, timeouts.

import assert from "node:assert/strict";
import { readFileSync } from "node:fs";
import { join } from "node:path";
import { test } from "node:test";

import { Client, ConnectionError, RecalldError } from "../src/index.js";
import { HELLO_OK, VECTORS_DIR, fakeServer, sleep, type Envelope, type FakeConn } from "./support.js";

function vector(name: string): { json: { args: Record<string, unknown> }; bytes: Buffer } {
  return {
    json: JSON.parse(readFileSync(join(VECTORS_DIR, `${name}.json`), "utf8")),
    bytes: readFileSync(join(VECTORS_DIR, `${name}.msgpack`)),
  };
}

/** Answers hello, and everything else with `{}`. */
function plain(req: Envelope, conn: FakeConn): void {
  conn.reply(req.id, { ok: req.op === "hello" ? HELLO_OK : {} });
}

test("requests are byte-identical to the conformance vectors", async () => {
  const server = await fakeServer(plain);
  try {
    const client = await Client.connect(server.path, { clientName: "recalld-vectors" });
    const ping = vector("ping_request").json.args;
    await client.ping(ping["payload"]);
    const chat = vector("decorate_chat_request").json.args;
    await client.decorate(chat["memory"] as string, chat["request"] as object, { now: 1767225600.5, dryRun: false });
    const resp = vector("decorate_responses_request").json.args;
    await client.decorate(resp["memory"] as string, resp["request"] as object, { history: "delta" });
    const report = vector("report_request").json.args;
    await client.report(report["memory"] as string, report["response"] as object, {
      now: new Date(1767225660250),
    });
    await client.close();
    const expected = ["hello_request", "ping_request", "decorate_chat_request", "decorate_responses_request", "report_request"];
    assert.equal(server.bodies.length, expected.length);
    expected.forEach((name, i) => assert.deepEqual(server.bodies[i], vector(name).bytes, name));
  } finally {
    await server.close();
  }
});

test("replies out of order reach their own callers", async () => {
  const held: Array<[Envelope, FakeConn]> = [];
  const server = await fakeServer((req, conn) => {
    if (req.op === "hello") return plain(req, conn);
    held.push([req, conn]);
    if (held.length === 50) {
      for (const [r, c] of held.reverse()) c.reply(r.id, { ok: { payload: (r.args as { payload: unknown }).payload } });
    }
  });
  try {
    const client = await Client.connect(server.path);
    const replies = await Promise.all(Array.from({ length: 50 }, (_, i) => client.ping({ i })));
    replies.forEach((r, i) => assert.deepEqual(r.payload, { i }));
    await client.close();
  } finally {
    await server.close();
  }
});

test("connect rejects with version_unsupported when the server refuses", async () => {
  const server = await fakeServer((req, conn) =>
    conn.reply(req.id, { err: { code: "version_unsupported", message: "server speaks 2..3", retryable: false } }),
  );
  try {
    await assert.rejects(Client.connect(server.path), (err: unknown) => {
      assert.ok(err instanceof RecalldError);
      assert.equal(err.code, "version_unsupported");
      assert.match(err.message, /refused protocol versions 1\.\.1: server speaks 2\.\.3/);
      return true;
    });
  } finally {
    await server.close();
  }
});

test("connect rejects with version_unsupported when the server picks a version outside ours", async () => {
  const server = await fakeServer((req, conn) => conn.reply(req.id, { ok: { ...HELLO_OK, protocol_version: 2 } }));
  try {
    await assert.rejects(Client.connect(server.path), { code: "version_unsupported" });
  } finally {
    await server.close();
  }
});

test("requests over the server's frame limit are refused without sending", async () => {
  const server = await fakeServer((req, conn) =>
    conn.reply(req.id, { ok: req.op === "hello" ? { ...HELLO_OK, limits: { ...HELLO_OK.limits, max_frame_bytes: 1000 } } : {} }),
  );
  try {
    const client = await Client.connect(server.path);
    await assert.rejects(client.ping("x".repeat(1000)), { name: "RecalldError", code: "frame_too_large", retryable: false });
    await client.ping("small");
    assert.equal(server.bodies.length, 2, "the oversize request must not reach the server");
    await client.close();
  } finally {
    await server.close();
  }
});

test("no more than max_in_flight requests are on the wire at once", async () => {
  let outstanding = 0;
  let peak = 0;
  const server = await fakeServer((req, conn) => {
    if (req.op === "hello") {
      conn.reply(req.id, { ok: { ...HELLO_OK, limits: { ...HELLO_OK.limits, max_in_flight: 4 } } });
      return;
    }
    outstanding++;
    peak = Math.max(peak, outstanding);
    setTimeout(() => {
      outstanding--;
      conn.reply(req.id, { ok: { n: req.args["payload"] } });
    }, 2);
  });
  try {
    const client = await Client.connect(server.path);
    const replies = await Promise.all(Array.from({ length: 40 }, (_, i) => client.ping(i)));
    replies.forEach((r, i) => assert.equal(r["n"], i));
    assert.equal(peak, 4);
    await client.close();
  } finally {
    await server.close();
  }
});

test("an undecodable reply fails the connection with malformed_frame", async () => {
  const server = await fakeServer((req, conn) => {
    if (req.op === "hello") return plain(req, conn);
    conn.raw(Buffer.from([0, 0, 0, 1, 0xc1]));
  });
  try {
    const client = await Client.connect(server.path);
    await assert.rejects(client.ping(), { code: "malformed_frame" });
    await assert.rejects(client.ping(), { code: "malformed_frame" });
    assert.equal(client.isOpen, false);
    await client.close();
  } finally {
    await server.close();
  }
});

test("a call with no reply times out when asked to, and the connection stays usable", async () => {
  const server = await fakeServer((req, conn) => {
    if (req.op === "ping" && req.args["payload"] === "slow") return;
    plain(req, conn);
  });
  try {
    const client = await Client.connect(server.path, { timeoutMs: 100 });
    await assert.rejects(client.ping("slow"), { code: "timeout", retryable: true });
    await client.ping("fast");
    await client.close();
  } finally {
    await server.close();
  }
});

test("close rejects pending calls with ConnectionError and later calls fail at once", async () => {
  const server = await fakeServer((req, conn) => {
    if (req.op === "hello") plain(req, conn);
  });
  try {
    const client = await Client.connect(server.path);
    const pending = client.ping();
    await client.close();
    await assert.rejects(pending, (err: unknown) => err instanceof ConnectionError && err.code === "unavailable");
    await assert.rejects(client.ping(), ConnectionError);
  } finally {
    await server.close();
  }
});

test("server closing the socket rejects every pending call with ConnectionError", async () => {
  let seen = 0;
  const server = await fakeServer((req, conn) => {
    if (req.op === "hello") return plain(req, conn);
    if (++seen === 3) conn.socket.destroy();
  });
  try {
    const client = await Client.connect(server.path);
    const calls = [client.ping(1), client.ping(2), client.ping(3)];
    for (const call of calls) await assert.rejects(call, ConnectionError);
    await sleep(0);
    assert.equal(client.isOpen, false);
    await client.close();
  } finally {
    await server.close();
  }
});

test("connecting to a missing socket rejects with ConnectionError", async () => {
  await assert.rejects(Client.connect("/nonexistent/recalld.sock"), (err: unknown) => {
    assert.ok(err instanceof ConnectionError);
    assert.equal(err.code, "unavailable");
    assert.ok(err.cause instanceof Error);
    return true;
  });
});
