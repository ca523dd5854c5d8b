// examples/agent.ts, the agent loop with a tool, compiled and run as a user would against the
// fake model server and the real daemon.

import assert from "node:assert/strict";
import { execFileSync, spawnSync } from "node:child_process";
import { resolve } from "node:path";
import { after, before, test } from "node:test";

import { Client } from "../src/index.js";
import { startFakeLLM, type FakeLLM } from "./fake_llm.js";
import { PACKAGE_ROOT, memoryId, startDaemon, type Daemon } from "./support.js";

let daemon: Daemon;
let fake: FakeLLM;

before(async () => {
  daemon = await startDaemon();
  fake = await startFakeLLM();
});
after(async () => {
  await fake?.stop();
  await daemon?.stop();
});

test("the TypeScript agent example calls its tool and remembers", { timeout: 120_000 }, async () => {
  execFileSync(resolve(PACKAGE_ROOT, "node_modules", ".bin", "tsc"), ["-p", resolve(PACKAGE_ROOT, "..", "examples")]);
  const memory = memoryId("example");
  const out = spawnSync("node", [resolve(PACKAGE_ROOT, "dist", "examples", "agent.js")], {
    input: "run: (17 + 4) * 2\nthanks\n\n",
    env: {
      ...process.env,
      OPENAI_BASE_URL: fake.url + "/v1",
      OPENAI_API_KEY: "test",
      MODEL: "test-model",
      RECALLD_SOCKET: daemon.socket,
      RECALLD_MEMORY: memory,
    },
    encoding: "utf8",
    timeout: 60_000,
  });
  assert.equal(out.status, 0, out.stderr);
  assert.match(out.stdout, /tool calculator\(\{"expression":"\(17 \+ 4\) \* 2"\}\) = 42/);
  assert.equal(out.stdout.split("assistant: Answer").length - 1, 2);
  const c = await Client.connect(daemon.socket);
  const roles = (await c.export(memory)).messages.map((m) => m.role);
  await c.close();
  assert.deepEqual(roles, ["user", "assistant", "tool", "assistant", "user", "assistant"]);
});
