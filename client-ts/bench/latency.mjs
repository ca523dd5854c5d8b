#!/usr/bin/env node
// Latency and throughput of the TypeScript client against a running daemon.
//
//   npm run build && node bench/latency.mjs [--socket PATH] [--n 10000] [--concurrency 64]
//
// Sequential `ping {}` and `decorate` (a ~2 KB Chat Completions request, dry_run, one fixed
// memory so the store does not grow): p50/p99 in µs. Then throughput with `--concurrency`
// requests in flight. One JSON line per measurement on stdout.

import { parseArgs } from "node:util";
import { Client } from "../dist/src/index.js";

const { values } = parseArgs({
  options: {
    socket: { type: "string" },
    n: { type: "string", default: "10000" },
    concurrency: { type: "string", default: "64" },
    memory: { type: "string", default: "bench-ts" },
  },
});
const n = Number(values.n);
const concurrency = Number(values.concurrency);
const socket = values.socket ?? process.env.RECALLD_SOCKET;
if (!socket) {
  console.error("usage: node bench/latency.mjs --socket PATH (or set RECALLD_SOCKET)");
  process.exit(2);
}

/** A Chat Completions request of about 2 KB. */
function chatRequest() {
  const filler = "The pricing page ships on Friday; checkout stays with Dana and the web team. ";
  const messages = [{ role: "system", content: "You help the web team ship the pricing page. Be brief." }];
  for (let i = 0; JSON.stringify(messages).length < 1900; i++) {
    messages.push({ role: i % 2 === 0 ? "user" : "assistant", content: `${i}: ${filler}` });
  }
  if (messages.at(-1).role !== "user") messages.push({ role: "user", content: "Who owns checkout?" });
  return { model: "gpt-4o", temperature: 0.2, messages };
}

function percentile(sorted, p) {
  return sorted[Math.min(sorted.length - 1, Math.floor((p / 100) * sorted.length))];
}

async function sequential(name, call, extra) {
  for (let i = 0; i < Math.min(200, n); i++) await call(); // warm up
  const us = new Float64Array(n);
  for (let i = 0; i < n; i++) {
    const t = process.hrtime.bigint();
    await call();
    us[i] = Number(process.hrtime.bigint() - t) / 1000;
  }
  us.sort();
  const mean = us.reduce((a, b) => a + b, 0) / n;
  emit({ bench: "latency", op: name, ...extra, n, p50_us: round(percentile(us, 50)), p99_us: round(percentile(us, 99)), mean_us: round(mean) });
}

async function throughput(name, call, extra) {
  let next = 0;
  const start = process.hrtime.bigint();
  const worker = async () => {
    while (next < n) {
      next++;
      await call();
    }
  };
  await Promise.all(Array.from({ length: concurrency }, worker));
  const seconds = Number(process.hrtime.bigint() - start) / 1e9;
  emit({ bench: "throughput", op: name, ...extra, n, concurrency, seconds: round(seconds, 3), calls_per_s: round(n / seconds) });
}

const round = (x, digits = 1) => Math.round(x * 10 ** digits) / 10 ** digits;
const emit = (obj) => console.log(JSON.stringify({ client: "recalld-ts", ...obj }));

const client = await Client.connect(socket);
try {
  const request = chatRequest();
  const size = { request_json_bytes: JSON.stringify(request).length, dry_run: true };
  const ping = () => client.call("ping", {});
  const decorate = () => client.decorate(values.memory, request, { dryRun: true });
  await sequential("ping", ping, {});
  await sequential("decorate", decorate, size);
  await throughput("ping", ping, {});
  await throughput("decorate", decorate, size);
} finally {
  await client.close();
}
