// The daemon dies with a call in flight: the pending promise rejects with ConnectionError.

import assert from "node:assert/strict";
import { readFileSync } from "node:fs";
import { test } from "node:test";

import { Client, ConnectionError } from "../src/index.js";
import { sleep, startDaemon } from "./support.js";

test("daemon killed mid-call rejects the pending call with ConnectionError", { timeout: 60_000 }, async () => {
  const daemon = await startDaemon();
  try {
    const client = await Client.connect(daemon.socket);
    await client.ping();
    // Freeze the daemon so the call cannot be answered, then kill it.
    daemon.proc.kill("SIGSTOP");
    await stopped(daemon.proc.pid!);
    let answered = false;
    const pending = client.ping({ doomed: true }).finally(() => (answered = true));
    await sleep(100);
    assert.equal(answered, false, "a stopped daemon answered");
    daemon.proc.kill("SIGKILL");
    await assert.rejects(pending, (err: unknown) => {
      assert.ok(err instanceof ConnectionError, `expected ConnectionError, got ${String(err)}`);
      assert.equal(err.code, "unavailable");
      assert.equal(err.retryable, true);
      assert.equal(err.op, "ping");
      return true;
    });
    assert.equal(client.isOpen, false);
    await assert.rejects(client.ping(), ConnectionError, "a call after the loss must fail at once");
    await client.close();
    if (daemon.proc.exitCode === null && daemon.proc.signalCode === null) {
      await new Promise((res) => daemon.proc.once("exit", res));
    }
    await assert.rejects(Client.connect(daemon.socket), ConnectionError, "connecting to a dead daemon must fail");
  } finally {
    await daemon.stop();
  }
});

/** Waits until the process is in the stopped state (Linux /proc; elsewhere a short sleep). */
async function stopped(pid: number): Promise<void> {
  const deadline = Date.now() + 5000;
  while (Date.now() < deadline) {
    let state: string | undefined;
    try {
      state = readFileSync(`/proc/${pid}/stat`, "utf8").split(") ")[1]?.[0];
    } catch {
      await sleep(100);
      return;
    }
    if (state === "T" || state === "t") return;
    await sleep(5);
  }
  throw new Error(`process ${pid} did not stop`);
}
