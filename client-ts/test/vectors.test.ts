// The conformance vectors: every NAME.json has a NAME.msgpack that our encoder must produce
// byte for byte and our decoder must read back to the same value.

import assert from "node:assert/strict";
import { readdirSync, readFileSync } from "node:fs";
import { join } from "node:path";
import { test } from "node:test";
import { decode, encode } from "@msgpack/msgpack";

import { VECTORS_DIR } from "./support.js";

const names = readdirSync(VECTORS_DIR)
  .filter((f) => f.endsWith(".json"))
  .map((f) => f.slice(0, -".json".length))
  .sort();

test("there are conformance vectors", () => {
  assert.ok(names.length >= 7, `only ${names.length} vectors in ${VECTORS_DIR}`);
});

for (const name of names) {
  test(`vector ${name}`, () => {
    const value: unknown = JSON.parse(readFileSync(join(VECTORS_DIR, `${name}.json`), "utf8"));
    const bytes = readFileSync(join(VECTORS_DIR, `${name}.msgpack`));
    assert.deepEqual(Buffer.from(encode(value)), bytes, "encode(json) differs from the msgpack bytes");
    assert.deepEqual(decode(bytes), value, "decode(msgpack) differs from the json");
  });
}
