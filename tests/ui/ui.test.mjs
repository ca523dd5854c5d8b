// The web inspector in a real browser: headless Debian Chromium, driven by playwright-core,
// loads `recalld ui` over a real debug daemon holding a replayed LoCoMo conversation and an
// agent's scope facts, checks what the page shows, acts on the Memory tab, and keeps
// screenshots in target/ (ui-screenshot.png, ui-screenshot-agent.png). Run by scripts/test-ui.sh.

import assert from "node:assert/strict";
import { spawn } from "node:child_process";
import { existsSync, mkdirSync, mkdtempSync, rmSync } from "node:fs";
import { tmpdir } from "node:os";
import { dirname, join, resolve } from "node:path";
import { test } from "node:test";
import { fileURLToPath } from "node:url";

import { chromium } from "playwright-core";

import { T0, agentConversations, locomo, replay } from "./replay.mjs";

const REPO = resolve(dirname(fileURLToPath(import.meta.url)), "..", "..");
const BIN = resolve(process.env.RECALLD_BIN || join(REPO, "target", "debug", "recalld"));
const CHROMIUM = process.env.CHROMIUM || "/usr/bin/chromium";
const LOCOMO = join(process.env.RECALLD_BENCH_DIR || join(REPO, "..", "shared", "bench"), "locomo-dev.json");
const CLIENT = join(REPO, "client-ts", "dist", "src", "index.js");
const MEMORY = "locomo-conv-26";
const AGENT = "helper";
// The launch flags Chromium needs on a machine without a network: no background connections,
// no component updates, no sync (playwright gives it a fresh profile of its own).
const CHROMIUM_ARGS = ["--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
  "--disable-background-networking", "--disable-component-update", "--disable-sync"];

const sleep = (ms) => new Promise((r) => setTimeout(r, ms));

/** Starts a process, keeping the last 64 KiB of what it prints; `stop()` ends it. */
function start(args, env = {}) {
  const proc = spawn(BIN, args, { stdio: ["ignore", "pipe", "pipe"], env: { ...process.env, ...env } });
  let out = "";
  const keep = (chunk) => { out = (out + chunk.toString("utf8")).slice(-65536); };
  proc.stdout.on("data", keep);
  proc.stderr.on("data", keep);
  const exited = new Promise((r) => proc.once("exit", r));
  return {
    proc,
    output: () => out,
    stop: async () => {
      if (proc.exitCode !== null || proc.signalCode !== null) return;
      proc.kill("SIGTERM");
      const timer = setTimeout(() => proc.kill("SIGKILL"), 10_000);
      await exited;
      clearTimeout(timer);
    },
  };
}

async function until(what, fn, ms = 20_000) {
  const deadline = Date.now() + ms;
  for (;;) {
    const v = await fn().catch(() => undefined);
    if (v) return v;
    if (Date.now() > deadline) throw new Error(`timed out waiting for ${what}`);
    await sleep(50);
  }
}

test("the inspector shows a replayed conversation and an agent's memory in Chromium", async (t) => {
  for (const [path, how] of [[BIN, "cargo build -p recalld"], [CLIENT, "make ts-client"], [LOCOMO, "the shared bench data"], [CHROMIUM, "apt-get install chromium"]]) {
    assert.ok(existsSync(path), `${path} is missing (${how})`);
  }
  const { Client } = await import(CLIENT);
  const clock = Date.now();
  const lap = (what) => console.log(`# ${what}: ${((Date.now() - clock) / 1000).toFixed(1)} s`);
  const dir = mkdtempSync(join(tmpdir(), "recalld-ui-"));
  const socket = join(dir, "s.sock");
  const daemon = start(["serve", "--socket", socket, "--data", join(dir, "data")], { RECALLD_LOG: "warn" });
  let ui, browser, client;
  t.after(async () => {
    await browser?.close();
    await client?.close();
    await ui?.stop();
    await daemon.stop();
    rmSync(dir, { recursive: true, force: true });
  });

  client = await until("the daemon", () => Client.connect(socket)).catch((e) => {
    throw new Error(`${e.message}:\n${daemon.output()}`);
  });
  // Two sessions of conv-26, three hours apart, at a 1,100-token ceiling: episodes are cut,
  // leave, seal and are forgotten; notes make facts and entities.
  const conv = locomo(LOCOMO, "conv-26", 2);
  await replay(client, MEMORY, conv, { ceiling: 1100, sessionGap: 3 * 3600, turnGap: 120 });
  await agentConversations(client, AGENT, "alex");
  const exported = await client.call("export", { memory: MEMORY });
  lap("replayed");

  ui = start(["ui", "--socket", socket]);
  const url = await until("the inspector's address", async () => ui.output().match(/http:\/\/127\.0\.0\.1:\d+\/\?token=[0-9a-f]{32}/)?.[0]);
  const origin = new URL(url).origin;
  const bare = await fetch(`${origin}/api/memories`, { method: "POST", body: "{}" });
  assert.equal(bare.status, 401, "the API needs the token");

  browser = await chromium.launch({
    executablePath: CHROMIUM,
    args: CHROMIUM_ARGS,
  });
  const page = await browser.newPage({ viewport: { width: 1440, height: 1000 }, timezoneId: "UTC" });
  const problems = [];
  page.on("pageerror", (e) => problems.push(`page error: ${e.message}`));
  page.on("console", (m) => m.type() === "error" && problems.push(`console: ${m.text()}`));
  page.on("dialog", (d) => d.accept());
  await page.goto(url);
  lap("page loaded");

  // The memory list: this uid's memories, the replayed one and the agent's conversations.
  await page.waitForSelector(`#memory-list li[data-memory="${MEMORY}"]`);
  const listed = await page.$$eval("#memory-list li.memory", (els) => els.map((e) => e.dataset.memory));
  assert.ok(listed.includes(MEMORY) && listed.some((m) => m.startsWith(`${AGENT}-chat-`)), `memory list: ${listed}`);
  await page.click(`#memory-list li[data-memory="${MEMORY}"]`);

  // The timeline: bands of more than one state, with a legend; activation curves with traces.
  await page.waitForSelector("#timeline .band");
  const states = new Set(await page.$$eval("#timeline .band", (els) => els.map((e) => e.dataset.state)));
  assert.ok(states.size >= 2, `episode states shown: ${[...states]}`);
  assert.equal(await page.locator("#legend span").count() >= 4, true);
  assert.ok((await page.locator("#curves .curve path").count()) >= 1, "an activation curve");
  assert.ok((await page.locator("#curves .trace").count()) >= 1, "traces on the curves");

  // Decisions: a budget bar with its ceiling, the episodes in view.
  assert.ok((await page.locator("#decisions svg.budget").count()) >= 1, "a budget bar");
  assert.ok((await page.locator("#decisions .mark-ceiling").count()) >= 1, "the ceiling on the bar");
  assert.match(await page.locator("#decisions .decision").first().innerText(), /in view/);

  // The graph: entities, fact edges; a click on a fact shows the turns it came from.
  assert.ok((await page.locator("#graph .node").count()) >= 2, "entities");
  const edge = page.locator("#graph .fact-edge").first();
  const n = Number(await edge.getAttribute("data-fact"));
  const fact = exported.facts.find((f) => f.n === n);
  const source = exported.messages.find((m) => !m.note && m.turn === fact.first_turn && m.message.role === "user");
  await edge.locator(".edge-hit").click({ force: true });
  await page.waitForSelector("#source-turns .message-text");
  const panel = await page.locator("#fact-panel").innerText();
  assert.ok(panel.includes(fact.note), "the fact's note");
  assert.ok(panel.includes(source.message.content), `the source turn ${fact.first_turn}'s text`);

  // As of another time: inspect again with `at`; the page says which time it shows.
  const earlier = T0 + 3600;
  const asked = page.waitForResponse((r) => r.url().endsWith("/api/inspect") && JSON.parse(r.request().postData()).at === earlier);
  await page.fill("#as-of", new Date(earlier * 1000).toISOString().slice(0, 19));
  await page.dispatchEvent("#as-of", "change");
  assert.equal((await asked).status(), 200);
  await page.waitForSelector(`#inspect-body[data-at="${earlier}"]`);
  await page.click("#as-of-last");
  await page.waitForSelector(`#inspect-body:not([data-at="${earlier}"])`);
  await page.waitForSelector("#graph .fact-edge");
  await page.locator(`#graph .fact-edge[data-fact="${n}"] .edge-hit`).click({ force: true });
  await page.waitForSelector("#source-turns .message-text");
  mkdirSync(join(REPO, "target"), { recursive: true });
  await page.screenshot({ path: join(REPO, "target", "ui-screenshot.png"), fullPage: true });
  lap("conversation checked");

  // The Memory tab of the agent: readiness, its facts (a semantic one with its sources), the
  // audit log; Consolidate now reports; a delete is audited.
  await page.click("#tab-agent");
  await page.fill("#agent-id", AGENT);
  await page.click("#agent-open");
  await page.waitForSelector("#facts .fact-row");
  await page.waitForSelector("#audit .audit-row");
  // The readiness line comes from its own call (`doctor`, which asks the models), filled
  // whenever it answers: wait for it rather than for the facts and the audit log.
  await page.waitForFunction(() => document.querySelector("#readiness").textContent.trim() !== "");
  assert.match(await page.locator("#readiness").innerText(), /policy knowledge_worker/);
  const tiers = await page.$$eval("#facts .fact-row td:nth-child(3)", (els) => els.map((e) => e.textContent));
  assert.ok(tiers.includes("semantic") && tiers.includes("episodic"), `tiers: ${tiers}`);
  assert.match(await page.locator("#audit").innerText(), /handoff/);
  await page.locator("#facts .fact-row", { hasText: "semantic" }).locator("a").click();
  await page.waitForSelector("#fact-detail .sources li");
  assert.ok((await page.locator("#fact-detail .sources li").count()) >= 2, "a semantic fact's sources");
  await page.click("#consolidate");
  await page.waitForSelector("#consolidate-report:not([hidden])");
  assert.match(await page.locator("#consolidate-report").innerText(), /Consolidated/);
  const before = await page.locator("#facts .fact-row").count();
  await page.locator("#facts .fact-row", { hasText: "Sydney" }).locator("button.danger").click();
  await page.waitForFunction((k) => document.querySelectorAll("#facts .fact-row").length === k - 1, before);
  // (the daemon's own timer may audit a sweep at any moment, so not "the newest row")
  await page.waitForFunction(() =>
    [...document.querySelectorAll("#audit .audit-row td:nth-child(2)")].some((td) => td.textContent === "forget"));
  await page.screenshot({ path: join(REPO, "target", "ui-screenshot-agent.png"), fullPage: true });
  lap("agent memory checked");
  assert.deepEqual(problems, [], "no errors in the page");

  // The daemon gone (the browser logs the 502 itself, so after the check above): the page says so.
  await daemon.stop();
  await page.click("#reload-memories");
  await page.waitForSelector("#banner:not([hidden])");
  assert.match(await page.locator("#banner").innerText(), /daemon is not running/);
});
