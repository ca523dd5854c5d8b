/**
 * Test support: paths, a launcher for the real daemon on a temporary socket, and a small
 * in-process fake server for behaviour the real daemon cannot be made to show on demand.
 */

import { spawn, type ChildProcess } from "node:child_process";
import { existsSync, mkdtempSync, rmSync } from "node:fs";
import { connect, createServer, type Server, type Socket } from "node:net";
import { tmpdir } from "node:os";
import { dirname, join, resolve } from "node:path";
import { fileURLToPath } from "node:url";
import { decode, encode } from "@msgpack/msgpack";

import { FrameReader, encodeFrame } from "../src/index.js";

/** client-ts/, whether running from test/ or dist/test/. */
export const PACKAGE_ROOT = (() => {
  let dir = dirname(fileURLToPath(import.meta.url));
  while (!existsSync(join(dir, "package.json"))) dir = dirname(dir);
  return dir;
})();

export const VECTORS_DIR = resolve(PACKAGE_ROOT, "..", "protocol", "vectors");

export function daemonBinary(): string {
  const fromEnv = process.env["RECALLD_BIN"];
  return fromEnv ? resolve(fromEnv) : resolve(PACKAGE_ROOT, "..", "target", "debug", "recalld");
}

export interface Daemon {
  socket: string;
  proc: ChildProcess;
  /** What the daemon printed so far (stdout and stderr, the last 64 KiB). */
  output(): string;
  stop(): Promise<void>;
}

const READY_TIMEOUT_MS = 15_000;

/** Starts `recalld serve` on a fresh socket and data dir, and waits until it accepts connections. */
export async function startDaemon(): Promise<Daemon> {
  const bin = daemonBinary();
  if (!existsSync(bin)) {
    throw new Error(`recalld binary not found at ${bin}: run \`cargo build -p recalld\` or set RECALLD_BIN`);
  }
  const dir = mkdtempSync(join(tmpdir(), "recalld-ts-"));
  const socket = join(dir, "s.sock");
  const proc = spawn(bin, ["serve", "--socket", socket, "--data", join(dir, "data")], {
    env: process.env,
    stdio: ["ignore", "pipe", "pipe"],
  });
  let log = "";
  const keep = (chunk: Buffer) => {
    log = (log + chunk.toString("utf8")).slice(-65536);
  };
  proc.stdout!.on("data", keep);
  proc.stderr!.on("data", keep);
  const exited = new Promise<void>((res) => proc.once("exit", () => res()));
  proc.once("error", (err) => keep(Buffer.from(`spawn error: ${err.message}\n`)));

  const stop = async () => {
    if (proc.exitCode === null && proc.signalCode === null) {
      proc.kill("SIGTERM");
      const timer = setTimeout(() => proc.kill("SIGKILL"), 10_000);
      await exited;
      clearTimeout(timer);
    }
    rmSync(dir, { recursive: true, force: true });
  };

  const deadline = Date.now() + READY_TIMEOUT_MS;
  for (;;) {
    if (proc.exitCode !== null || proc.signalCode !== null) {
      await stop();
      throw new Error(`recalld exited before accepting connections (${proc.exitCode ?? proc.signalCode}):\n${log}`);
    }
    if (await accepts(socket)) break;
    if (Date.now() > deadline) {
      await stop();
      throw new Error(`recalld did not accept connections on ${socket} within ${READY_TIMEOUT_MS} ms:\n${log}`);
    }
    await sleep(50);
  }
  return { socket, proc, output: () => log, stop };
}

function accepts(path: string): Promise<boolean> {
  return new Promise((res) => {
    const s = connect({ path });
    s.once("connect", () => {
      s.destroy();
      res(true);
    });
    s.once("error", () => res(false));
  });
}

export function sleep(ms: number): Promise<void> {
  return new Promise((res) => setTimeout(res, ms));
}

/** A unique memory id per test run. */
export function memoryId(name: string): string {
  return `ts-${name}-${process.pid}-${Math.random().toString(36).slice(2, 8)}`;
}

// ---------------------------------------------------------------------------------------------
// Fake server

export type Envelope = { id: number; op: string; args: Record<string, unknown> };

export interface FakeConn {
  socket: Socket;
  reply(id: number, body: { ok?: unknown; err?: unknown }): void;
  raw(bytes: Buffer): void;
}

export interface FakeServer {
  path: string;
  /** Every request body received, raw, in order. */
  bodies: Buffer[];
  close(): Promise<void>;
}

export const HELLO_OK = {
  protocol_version: 1,
  min_version: 1,
  max_version: 1,
  server: "fake",
  server_version: "0.0.0",
  limits: { max_frame_bytes: 1 << 20, max_memory_id_bytes: 256, max_in_flight: 1024 },
  capabilities: ["hello", "ping"],
};

/** A server on a temp socket that hands each decoded request to `handle`. */
export async function fakeServer(handle: (req: Envelope, conn: FakeConn) => void): Promise<FakeServer> {
  const dir = mkdtempSync(join(tmpdir(), "recalld-ts-fake-"));
  const path = join(dir, "fake.sock");
  const bodies: Buffer[] = [];
  const sockets = new Set<Socket>();
  const server: Server = createServer((socket) => {
    sockets.add(socket);
    socket.on("close", () => sockets.delete(socket));
    socket.on("error", () => {});
    const reader = new FrameReader();
    const conn: FakeConn = {
      socket,
      reply: (id, body) => {
        if (!socket.destroyed) socket.write(encodeFrame(encode({ id, ...body })));
      },
      raw: (bytes) => socket.write(bytes),
    };
    socket.on("data", (chunk: Buffer) => {
      for (const body of reader.push(chunk)) {
        bodies.push(Buffer.from(body));
        handle(decode(body) as Envelope, conn);
      }
    });
  });
  await new Promise<void>((res) => server.listen(path, res));
  return {
    path,
    bodies,
    close: async () => {
      for (const s of sockets) s.destroy();
      await new Promise<void>((res) => server.close(() => res()));
      rmSync(dir, { recursive: true, force: true });
    },
  };
}
