/**
 * The client: one Unix socket to the daemon, many requests in flight on it, replies matched to
 * their callers by request id through a map of pending promises.
 */

import { createConnection, type Socket } from "node:net";
import { Decoder, Encoder } from "@msgpack/msgpack";

import { ConnectionError, RecalldError, isErrorCode, type ErrorCode } from "./errors.js";
import { DEFAULT_MAX_FRAME_BYTES, FrameReader, encodeFrame } from "./frame.js";
import { defaultSocketPath, socketPathFromSpec } from "./socket_path.js";
import {
  PROTOCOL_MAX_VERSION,
  PROTOCOL_MIN_VERSION,
  type ChatCompletionsRequest,
  type DecorateOptions,
  type DecorateReply,
  type ExportReply,
  type HealthReply,
  type HelloReply,
  type InspectOptions,
  type InspectReply,
  type MemoriesReply,
  type PingReply,
  type ProviderRequest,
  type ProviderResponse,
  type ReportOptions,
  type ReportReply,
  type StatsReply,
} from "./types.js";
import { VERSION } from "./version.js";

export interface ConnectOptions {
  /** Refuse requests above this many bytes, even when the server would take more. */
  maxFrameBytes?: number;
  /** Fail a call with `timeout` when its reply has not come in this many ms. Off by default. */
  timeoutMs?: number;
  /** Give up opening the socket after this many ms. Default 5000. */
  connectTimeoutMs?: number;
  /** The name sent in `hello`, for the server's logs. Default `recalld-ts/<version>`. */
  clientName?: string;
}

interface Pending {
  op: string;
  resolve: (value: unknown) => void;
  reject: (error: Error) => void;
  /** The framed request while it waits for a slot; undefined once written. */
  frame: Buffer | undefined;
  timer: NodeJS.Timeout | undefined;
  /** Already answered to the caller (timed out); the entry only waits for the late reply. */
  settled: boolean;
}

/** Ids stay below 2^53 so every language reads them exactly. */
const MAX_ID = Number.MAX_SAFE_INTEGER;

type Args = Record<string, unknown>;

export class Client {
  /** The socket path this client is connected to. */
  readonly path: string;

  private readonly socket: Socket;
  private readonly reader = new FrameReader();
  private readonly encoder = new Encoder();
  private readonly decoder = new Decoder();
  private readonly pending = new Map<number, Pending>();
  /** Ids of requests waiting for an in-flight slot, oldest first. */
  private readonly queue: number[] = [];
  private readonly timeoutMs: number | undefined;
  private readonly frameCap: number;
  private maxFrameBytes: number;
  private maxInFlight = Number.POSITIVE_INFINITY;
  private inFlight = 0;
  private nextId = 1;
  private helloReply: HelloReply | undefined;
  /** Set once the connection is gone; every later call fails with it. */
  private failure: RecalldError | undefined;
  private socketError: Error | undefined;
  private closing = false;
  private readonly closed: Promise<void>;

  private constructor(path: string, socket: Socket, options: ConnectOptions) {
    this.path = path;
    this.socket = socket;
    this.timeoutMs = options.timeoutMs;
    this.frameCap = options.maxFrameBytes ?? Number.POSITIVE_INFINITY;
    this.maxFrameBytes = Math.min(this.frameCap, DEFAULT_MAX_FRAME_BYTES);
    socket.on("data", (chunk: Buffer) => this.onData(chunk));
    socket.on("error", (err: Error) => {
      this.socketError ??= err;
    });
    this.closed = new Promise((resolve) => {
      socket.once("close", () => {
        this.onClose();
        resolve();
      });
    });
  }

  /**
   * Opens the socket and does the `hello` handshake. The path defaults to `$RECALLD_SOCKET`,
   * then `$XDG_RUNTIME_DIR/recalld/recalld.sock`, then `/tmp/recalld-<uid>/recalld.sock`.
   * Rejects with `ConnectionError` when the socket cannot be opened and with code
   * `version_unsupported` when the server speaks no protocol version this client speaks.
   */
  static async connect(path?: string, options: ConnectOptions = {}): Promise<Client> {
    const socketPath = path === undefined ? defaultSocketPath() : socketPathFromSpec(path);
    const socket = await openSocket(socketPath, options.connectTimeoutMs ?? 5000);
    const client = new Client(socketPath, socket, options);
    try {
      await client.handshake(options.clientName ?? `recalld-ts/${VERSION}`);
    } catch (err) {
      await client.close();
      throw err;
    }
    return client;
  }

  /** What the server said in the handshake: versions, limits, capabilities. */
  get server(): HelloReply {
    if (this.helloReply === undefined) throw new Error("the handshake has not completed");
    return this.helloReply;
  }

  /** Whether the connection is still usable. */
  get isOpen(): boolean {
    return this.failure === undefined;
  }

  /** Calls in flight or waiting for a slot. */
  get pendingCount(): number {
    let n = 0;
    for (const p of this.pending.values()) if (!p.settled) n++;
    return n;
  }

  /** Sends `hello` again and returns the server's versions, limits and capabilities. */
  hello(): Promise<HelloReply> {
    return this.call<HelloReply>("hello", {
      min_version: PROTOCOL_MIN_VERSION,
      max_version: PROTOCOL_MAX_VERSION,
      client: `recalld-ts/${VERSION}`,
    });
  }

  /** Echoes `payload` back (as `payload` in the reply). */
  ping(payload?: unknown): Promise<PingReply> {
    return this.call<PingReply>("ping", payload === undefined ? {} : { payload });
  }

  health(): Promise<HealthReply> {
    return this.call<HealthReply>("health", {});
  }

  stats(): Promise<StatsReply> {
    return this.call<StatsReply>("stats", {});
  }

  /**
   * Stores what is new in `request`'s history and returns the request the model should get,
   * with `info` about sizes, budget and states. `request` is a Chat Completions or Responses
   * request as the provider SDK takes it; the reply's `request` has the same shape.
   */
  decorate<R extends object = ChatCompletionsRequest>(
    memory: string,
    request: R,
    options: DecorateOptions = {},
  ): Promise<DecorateReply<R>> {
    // Field order follows the conformance vectors: the memory, the options, the provider object.
    const args: Args = { memory };
    try {
      putNow(args, options.now);
    } catch (err) {
      return Promise.reject(err);
    }
    if (options.dryRun !== undefined) args["dry_run"] = options.dryRun;
    if (options.ceiling !== undefined) args["ceiling"] = options.ceiling;
    if (options.agent !== undefined) args["agent"] = options.agent;
    if (options.user !== undefined) args["user"] = options.user;
    if (options.history !== undefined) args["history"] = options.history;
    args["request"] = request;
    return this.call<DecorateReply<R>>("decorate", args);
  }

  /**
   * Stores the model's reply and returns it without the note call; `again` is true when the
   * note call was all it held, and the model should be called once more.
   */
  report<R extends object = ProviderResponse>(
    memory: string,
    response: R,
    options: ReportOptions = {},
  ): Promise<ReportReply<R>> {
    const args: Args = { memory };
    try {
      putNow(args, options.now);
    } catch (err) {
      return Promise.reject(err);
    }
    args["response"] = response;
    return this.call<ReportReply<R>>("report", args);
  }

  /** Everything stored for `memory`. */
  export(memory: string): Promise<ExportReply> {
    return this.call<ExportReply>("export", { memory });
  }

  /**
   * `memory` as it stands, read-only: its episodes with their activation as of `at` (default
   * now) and its curve, facts, entities, the last decorates' decisions, the lane, and with
   * `turns: [first, last]` the messages of those turns.
   */
  inspect(memory: string, options: InspectOptions = {}): Promise<InspectReply> {
    const args: Args = { memory };
    try {
      putNow(args, options.at, "at");
    } catch (err) {
      return Promise.reject(err);
    }
    if (options.decisions !== undefined) args["decisions"] = options.decisions;
    if (options.episodes !== undefined) args["episodes"] = options.episodes;
    if (options.curve !== undefined) args["curve"] = options.curve;
    if (options.turns !== undefined) args["turns"] = [options.turns[0], options.turns[1]];
    return this.call<InspectReply>("inspect", args);
  }

  /** This user's own memories, from their records. */
  memories(): Promise<MemoriesReply> {
    return this.call<MemoriesReply>("memories", {});
  }

  /**
   * Sends any op and resolves with the reply's `ok` map, or rejects with a `RecalldError`
   * carrying the reply's `err` code. Undefined fields of `args` are left out.
   */
  call<T = Record<string, unknown>>(op: string, args: Args = {}): Promise<T> {
    if (this.failure !== undefined) return Promise.reject(this.failure);
    const id = this.allocateId();
    let frame: Buffer;
    try {
      const body = this.encoder.encodeSharedRef({ id, op, args: withoutUndefined(args) });
      if (body.length > this.maxFrameBytes) {
        return Promise.reject(
          new RecalldError(
            "frame_too_large",
            `${op} request of ${body.length} bytes exceeds the frame limit of ${this.maxFrameBytes} bytes`,
            { op },
          ),
        );
      }
      frame = encodeFrame(body);
    } catch (err) {
      return Promise.reject(
        new RecalldError("invalid_argument", `${op} arguments cannot be encoded: ${describe(err)}`, { op, cause: err }),
      );
    }
    return new Promise<T>((resolve, reject) => {
      const entry: Pending = {
        op,
        resolve: resolve as (value: unknown) => void,
        reject,
        frame,
        timer: undefined,
        settled: false,
      };
      this.pending.set(id, entry);
      if (this.timeoutMs !== undefined) {
        entry.timer = setTimeout(() => this.onTimeout(id), this.timeoutMs);
      }
      if (this.inFlight < this.maxInFlight && this.queue.length === 0) this.send(entry);
      else this.queue.push(id);
    });
  }

  /**
   * Closes the connection. Calls still pending reject with `ConnectionError`. Resolves once
   * the socket is closed.
   */
  async close(): Promise<void> {
    if (!this.closing) {
      this.closing = true;
      this.failure ??= new ConnectionError("the client was closed");
      this.socket.destroy();
    }
    await this.closed;
  }

  /** Lets the process exit while this connection is open and idle. */
  unref(): this {
    this.socket.unref();
    return this;
  }

  /** Undoes `unref()`. */
  ref(): this {
    this.socket.ref();
    return this;
  }

  // -------------------------------------------------------------------------------------------

  private async handshake(clientName: string): Promise<void> {
    let reply: HelloReply;
    try {
      reply = await this.call<HelloReply>("hello", {
        min_version: PROTOCOL_MIN_VERSION,
        max_version: PROTOCOL_MAX_VERSION,
        client: clientName,
      });
    } catch (err) {
      if (err instanceof RecalldError && err.code === "version_unsupported") {
        throw new RecalldError(
          "version_unsupported",
          `recalld at ${this.path} refused protocol versions ${PROTOCOL_MIN_VERSION}..${PROTOCOL_MAX_VERSION}: ${err.message}`,
          { op: "hello", cause: err },
        );
      }
      throw err;
    }
    const version = reply?.protocol_version;
    if (typeof version !== "number" || version < PROTOCOL_MIN_VERSION || version > PROTOCOL_MAX_VERSION) {
      throw new RecalldError(
        "version_unsupported",
        `recalld at ${this.path} chose protocol version ${String(version)}, this client speaks ${PROTOCOL_MIN_VERSION}..${PROTOCOL_MAX_VERSION}`,
        { op: "hello" },
      );
    }
    const limits = reply.limits;
    if (limits !== undefined && limits !== null) {
      if (typeof limits.max_frame_bytes === "number" && limits.max_frame_bytes > 0) {
        this.maxFrameBytes = Math.min(this.frameCap, limits.max_frame_bytes);
      }
      if (typeof limits.max_in_flight === "number" && limits.max_in_flight > 0) {
        this.maxInFlight = limits.max_in_flight;
      }
    }
    this.helloReply = reply;
  }

  private allocateId(): number {
    for (;;) {
      const id = this.nextId;
      this.nextId = id >= MAX_ID ? 1 : id + 1;
      if (!this.pending.has(id)) return id;
    }
  }

  private send(entry: Pending): void {
    const frame = entry.frame!;
    entry.frame = undefined;
    this.inFlight++;
    this.socket.write(frame);
  }

  /** Writes queued requests while slots are free. */
  private pump(): void {
    while (this.queue.length > 0 && this.inFlight < this.maxInFlight) {
      const id = this.queue.shift()!;
      const entry = this.pending.get(id);
      if (entry === undefined || entry.frame === undefined) continue;
      this.send(entry);
    }
  }

  private onTimeout(id: number): void {
    const entry = this.pending.get(id);
    if (entry === undefined || entry.settled) return;
    entry.timer = undefined;
    entry.settled = true;
    // Not yet written: drop it. Written: keep the entry until the late reply frees its slot.
    if (entry.frame !== undefined) this.pending.delete(id);
    entry.reject(new RecalldError("timeout", `${entry.op} got no reply within ${this.timeoutMs} ms`, { op: entry.op }));
  }

  private onData(chunk: Buffer): void {
    let bodies: Buffer[];
    try {
      bodies = this.reader.push(chunk);
    } catch (err) {
      this.fail(new RecalldError("malformed_frame", `unreadable frame from recalld: ${describe(err)}`, { cause: err }));
      return;
    }
    for (const body of bodies) {
      if (this.failure !== undefined) return;
      this.onReply(body);
    }
  }

  private onReply(body: Buffer): void {
    let reply: unknown;
    try {
      reply = this.decoder.decode(body);
    } catch (err) {
      this.fail(new RecalldError("malformed_frame", `reply from recalld is not messagepack: ${describe(err)}`, { cause: err }));
      return;
    }
    if (!isMap(reply) || typeof reply["id"] !== "number") {
      this.fail(new RecalldError("malformed_frame", "reply from recalld is not a map with an id"));
      return;
    }
    const id = reply["id"];
    const entry = this.pending.get(id);
    if (entry === undefined) {
      if ("err" in reply && isMap(reply["err"])) {
        // The server could not tell which request it answers: it could not read one of ours.
        const err = toError(reply["err"], undefined);
        this.fail(new RecalldError(err.code, `recalld could not read a request: ${err.message}`, { cause: err }));
      }
      return; // A late reply to a call that timed out and was already dropped.
    }
    this.pending.delete(id);
    if (entry.frame === undefined) this.inFlight--;
    if (entry.timer !== undefined) clearTimeout(entry.timer);
    if (!entry.settled) {
      entry.settled = true;
      if ("err" in reply && reply["err"] !== undefined && reply["err"] !== null) {
        entry.reject(toError(reply["err"], entry.op));
      } else if (isMap(reply["ok"])) {
        entry.resolve(reply["ok"]);
      } else {
        entry.reject(new RecalldError("malformed_frame", `reply to ${entry.op} has neither ok nor err`, { op: entry.op }));
      }
    }
    this.pump();
  }

  /** Ends the connection with `error`: every pending call rejects with it. */
  private fail(error: RecalldError): void {
    this.failure ??= error;
    this.socket.destroy();
    this.rejectAll();
  }

  private onClose(): void {
    if (this.failure === undefined) {
      const cause = this.socketError;
      const why = cause === undefined ? "" : `: ${cause.message}`;
      this.failure = new ConnectionError(`connection to recalld at ${this.path} was lost${why}`, { cause });
    }
    this.rejectAll();
  }

  private rejectAll(): void {
    const failure = this.failure!;
    const entries = [...this.pending.values()];
    this.pending.clear();
    this.queue.length = 0;
    this.inFlight = 0;
    for (const entry of entries) {
      if (entry.timer !== undefined) clearTimeout(entry.timer);
      if (entry.settled) continue;
      entry.settled = true;
      entry.reject(withOp(failure, entry.op));
    }
  }
}

function openSocket(path: string, timeoutMs: number): Promise<Socket> {
  return new Promise((resolve, reject) => {
    const socket = createConnection({ path });
    const timer = setTimeout(() => {
      socket.destroy();
      reject(new ConnectionError(`cannot connect to recalld at ${path}: no answer within ${timeoutMs} ms`));
    }, timeoutMs);
    const onError = (err: Error) => {
      clearTimeout(timer);
      socket.destroy();
      reject(new ConnectionError(`cannot connect to recalld at ${path}: ${err.message}`, { cause: err }));
    };
    socket.once("error", onError);
    socket.once("connect", () => {
      clearTimeout(timer);
      socket.off("error", onError);
      resolve(socket);
    });
  });
}

function putNow(args: Args, now: number | Date | undefined, key = "now"): void {
  if (now === undefined) return;
  const seconds = now instanceof Date ? now.getTime() / 1000 : now;
  if (typeof seconds !== "number" || !Number.isFinite(seconds)) {
    throw new RecalldError("invalid_argument", `${key} must be a finite number of Unix seconds or a valid Date`);
  }
  args[key] = seconds;
}

function withoutUndefined(args: Args): Args {
  for (const key in args) {
    if (args[key] === undefined) {
      const copy: Args = {};
      for (const [k, v] of Object.entries(args)) if (v !== undefined) copy[k] = v;
      return copy;
    }
  }
  return args;
}

function isMap(value: unknown): value is Record<string, unknown> {
  return typeof value === "object" && value !== null && !Array.isArray(value) && !(value instanceof Uint8Array);
}

function toError(body: unknown, op: string | undefined): RecalldError {
  if (!isMap(body)) return new RecalldError("malformed_frame", "error reply without an error map", { op });
  const raw = body["code"];
  const message = typeof body["message"] === "string" ? body["message"] : "no message";
  const code: ErrorCode = isErrorCode(raw) ? raw : "internal";
  const text = isErrorCode(raw) ? message : `${String(raw)}: ${message}`;
  const options: { op: string | undefined; retryable?: boolean } = { op };
  if (typeof body["retryable"] === "boolean") options.retryable = body["retryable"];
  return new RecalldError(code, text, options);
}

/** The connection's failure, as seen by one call: same class, code and message, with its op. */
function withOp(failure: RecalldError, op: string): RecalldError {
  if (failure instanceof ConnectionError) return new ConnectionError(failure.message, { cause: failure.cause, op });
  return new RecalldError(failure.code, failure.message, { retryable: failure.retryable, cause: failure.cause, op });
}

function describe(err: unknown): string {
  return err instanceof Error ? err.message : String(err);
}
