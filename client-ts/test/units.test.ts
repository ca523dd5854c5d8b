// Pieces that need no server: frames split anywhere, the default socket path, errors, version.

import assert from "node:assert/strict";
import { readFileSync } from "node:fs";
import { join } from "node:path";
import { test } from "node:test";

import {
  ConnectionError,
  ERROR_CODES,
  FrameReader,
  RecalldError,
  VERSION,
  defaultSocketPath,
  encodeFrame,
  isRetryable,
  socketPathFromSpec,
} from "../src/index.js";
import { PACKAGE_ROOT } from "./support.js";

test("frames split at every byte decode to the same bodies", () => {
  const bodies = [Buffer.from("hello"), Buffer.alloc(0), Buffer.from([1, 2, 3, 4, 5, 6, 7, 8, 9]), Buffer.alloc(300, 7)];
  const wire = Buffer.concat(bodies.map((b) => encodeFrame(b)));
  for (let cut1 = 0; cut1 <= wire.length; cut1++) {
    for (const step of [1, 3, wire.length]) {
      const reader = new FrameReader();
      const got: Buffer[] = [];
      got.push(...reader.push(wire.subarray(0, cut1)).map((b) => Buffer.from(b)));
      for (let pos = cut1; pos < wire.length; pos += step) {
        got.push(...reader.push(wire.subarray(pos, Math.min(pos + step, wire.length))).map((b) => Buffer.from(b)));
      }
      assert.deepEqual(got, bodies, `cut at ${cut1}, step ${step}`);
      assert.equal(reader.pending, 0);
    }
  }
});

test("a frame is not complete one byte early", () => {
  const wire = encodeFrame(Buffer.from("abc"));
  const reader = new FrameReader();
  assert.deepEqual(reader.push(wire.subarray(0, wire.length - 1)), []);
  assert.deepEqual(reader.push(wire.subarray(wire.length - 1)), [Buffer.from("abc")]);
});

test("frame header is 4 bytes big-endian", () => {
  assert.deepEqual(encodeFrame(Buffer.alloc(258)).subarray(0, 4), Buffer.from([0, 0, 1, 2]));
});

test("default socket path: RECALLD_SOCKET, then XDG_RUNTIME_DIR, then /tmp/recalld-<uid>", () => {
  assert.equal(defaultSocketPath({ RECALLD_SOCKET: "/run/x.sock", XDG_RUNTIME_DIR: "/run/user/7" }, 7), "/run/x.sock");
  assert.equal(defaultSocketPath({ RECALLD_SOCKET: "unix:///run/y.sock" }, 7), "/run/y.sock");
  assert.equal(defaultSocketPath({ XDG_RUNTIME_DIR: "/run/user/7" }, 7), "/run/user/7/recalld/recalld.sock");
  assert.equal(defaultSocketPath({ RECALLD_SOCKET: "", XDG_RUNTIME_DIR: "" }, 1000), "/tmp/recalld-1000/recalld.sock");
  assert.equal(socketPathFromSpec("unix:///tmp/a%20b.sock"), "/tmp/a b.sock");
  assert.equal(socketPathFromSpec("unix:/tmp/c.sock"), "/tmp/c.sock");
  assert.equal(socketPathFromSpec("/tmp/100%.sock"), "/tmp/100%.sock");
});

test("error codes match protocol/src/error.rs", () => {
  const rust = readFileSync(join(PACKAGE_ROOT, "..", "protocol", "src", "error.rs"), "utf8");
  const wire = [...rust.matchAll(/=> "([a-z_]+)"/g)].map((m) => m[1]);
  assert.deepEqual([...ERROR_CODES].sort(), wire.sort());
  assert.deepEqual(
    ERROR_CODES.filter((c) => isRetryable(c)).sort(),
    ["resource_exhausted", "timeout", "unavailable"],
  );
});

test("errors carry code, retryable and cause", () => {
  const cause = new Error("ECONNRESET");
  const conn = new ConnectionError("lost", { cause, op: "ping" });
  assert.ok(conn instanceof RecalldError);
  assert.ok(conn instanceof Error);
  assert.equal(conn.code, "unavailable");
  assert.equal(conn.retryable, true);
  assert.equal(conn.cause, cause);
  assert.equal(conn.op, "ping");
  assert.equal(conn.name, "ConnectionError");
  const bad = new RecalldError("invalid_argument", "memory id is empty");
  assert.equal(bad.retryable, false);
  assert.equal(bad.name, "RecalldError");
});

test("VERSION matches package.json", () => {
  const pkg = JSON.parse(readFileSync(join(PACKAGE_ROOT, "package.json"), "utf8")) as { version: string };
  assert.equal(VERSION, pkg.version);
});
