/**
 * `wrap(client, {memory})`: an `openai` (6.x) or `@anthropic-ai/sdk` client with memory.
 *
 * The client's own methods are replaced on the instance (`client.chat.completions.create`,
 * `client.responses.create`, `client.messages.create`), so the SDK's helpers that call them
 * (`.stream()`, `.parse()`) go through memory too. Each call decorates the request, calls the
 * model, reports the reply, calls again while report says `again`, and resolves with the
 * SDK's own reply without the note call. With `stream: true` events pass through as they
 * arrive (the note call's are held back) and the result is the SDK's own `Stream` class.
 */

import { Client } from "../client.js";
import { ConnectionError, RecalldError } from "../errors.js";
import type { DecorateOptions, HistoryMode } from "../types.js";
import { chatCompletions, messages, responses, type Api } from "./apis.js";

type Json = Record<string, any>;

/** How many times one call goes back to the model on `again` before returning the reply. */
const MAX_AGAIN = 3;

export interface MemoryOptions {
  /** The memory id (one conversation). Without it a call goes to the model untouched. */
  memory?: string | null;
  /** Token ceiling of the assembled request (stored on the memory). */
  ceiling?: number;
  agent?: string;
  user?: string;
  /** Time of the call (Unix seconds or a Date); the daemon's clock when absent. */
  now?: number | Date;
  /** Decorate without storing and do not report; the reply comes back as the model gave it. */
  dryRun?: boolean;
  history?: HistoryMode;
}

export interface WrapOptions extends MemoryOptions {
  /** The daemon's socket; found as `Client.connect` finds it when absent. */
  socket?: string;
  /** When the daemon cannot be reached, call the model unchanged and warn instead of failing. */
  passThrough?: boolean;
  /** Where pass-through warnings go (default `console.warn`). */
  warn?: (message: string) => void;
  /** An open client to use instead of connecting. */
  recalld?: Client;
}

/** A request body with per-call options: `create(withMemory(body, {now}))`, or add the
 * `recalld` key yourself. The key is taken out before the request leaves. */
export type WithMemory<T> = T & { recalld?: MemoryOptions };

export function withMemory<T extends object>(body: T, options: MemoryOptions): T {
  return { ...body, recalld: options } as T;
}

const KNOWN_OPTIONS = new Set(["memory", "ceiling", "agent", "user", "now", "dryRun", "history"]);

/** Gives the client memory and returns it (the same object). */
export function wrap<C extends object>(client: C, options: WrapOptions = {}): C {
  const shared = new Connector(options);
  const targets: [string[], Api][] = [
    [["chat", "completions"], chatCompletions],
    [["responses"], responses],
    [["messages"], messages],
  ];
  let wrapped = 0;
  for (const [path, api] of targets) {
    let owner: any = client;
    for (const name of path) owner = owner?.[name];
    if (!owner || typeof owner.create !== "function") continue;
    const original = owner.create.__recalldOriginal ?? owner.create;
    const method = wrapMethod(client, owner, original, api, options, shared);
    owner.create = method;
    wrapped++;
  }
  if (!wrapped) throw new TypeError("recalld.wrap takes an openai or @anthropic-ai/sdk client");
  return client;
}

function wrapMethod(
  client: object,
  owner: any,
  original: (body: Json, options?: Json) => any,
  api: Api,
  defaults: WrapOptions,
  connector: Connector,
) {
  const method = (body: Json, requestOptions?: Json) => {
    const { recalld: perCall, ...request } = body ?? {};
    for (const key of Object.keys(perCall ?? {})) {
      if (!KNOWN_OPTIONS.has(key)) throw new TypeError(`unknown recalld option: ${key}`);
    }
    const opts: WrapOptions = { ...defaults, ...(perCall ?? {}) };
    const call = new Call(client, owner, original, api, opts, connector, requestOptions);
    const result = request["stream"] ? call.stream(request) : call.once(request);
    return new RecalldPromise(result);
  };
  method.__recalldOriginal = original;
  return method;
}

interface Result {
  data: any;
  /** The last model call's HTTP response, when the SDK gave it. */
  response: unknown;
}

/** One wrapped call: decorate → model → report → again. */
class Call {
  constructor(
    private readonly client: object,
    private readonly owner: any,
    private readonly original: (body: Json, options?: Json) => any,
    private readonly api: Api,
    private readonly opts: WrapOptions,
    private readonly connector: Connector,
    private readonly requestOptions: Json | undefined,
  ) {}

  private async model(request: Json): Promise<Result> {
    const promise = this.original.call(this.owner, request, this.requestOptions);
    if (typeof promise?.withResponse === "function") {
      const { data, response } = await promise.withResponse();
      return { data, response };
    }
    return { data: await promise, response: undefined };
  }

  private decorateOptions(): DecorateOptions {
    const o: DecorateOptions = {};
    if (this.opts.now !== undefined) o.now = this.opts.now;
    if (this.opts.dryRun !== undefined) o.dryRun = this.opts.dryRun;
    if (this.opts.ceiling !== undefined) o.ceiling = this.opts.ceiling;
    if (this.opts.agent !== undefined) o.agent = this.opts.agent;
    if (this.opts.user !== undefined) o.user = this.opts.user;
    if (this.opts.history !== undefined) o.history = this.opts.history;
    return o;
  }

  private async decorate(request: Json): Promise<Json | undefined> {
    try {
      const marked = this.api.mark ? this.api.mark(request) : request;
      return await this.connector.use((memory) => memory.decorate(this.opts.memory!, marked, this.decorateOptions()));
    } catch (err) {
      this.passOrThrow(err, "decorate");
      return undefined;
    }
  }

  private async report(reply: Json): Promise<{ response: Json; again: boolean } | undefined> {
    try {
      const now = this.opts.now;
      return (await this.connector.use((memory) => memory.report(this.opts.memory!, reply, now === undefined ? {} : { now }))) as any;
    } catch (err) {
      this.passOrThrow(err, "report");
      return undefined;
    }
  }

  private passOrThrow(err: unknown, stage: string): void {
    if (this.opts.passThrough && err instanceof ConnectionError) {
      (this.opts.warn ?? console.warn)(
        `recalld unreachable at ${stage}, the call goes to the model without memory: ${(err as Error).message}`,
      );
      return;
    }
    throw err;
  }

  async once(request: Json): Promise<Result> {
    if (this.opts.memory === undefined || this.opts.memory === null) return this.model(request);
    let decorated = await this.decorate(request);
    if (!decorated) return this.model(request);
    for (let attempt = 0; ; attempt++) {
      const reply = await this.model(decorated["request"]);
      if (this.opts.dryRun) return reply;
      const result = await this.report(reply.data);
      if (!result) return reply;
      if (!result.again || attempt >= MAX_AGAIN) {
        const same = JSON.stringify(result.response) === JSON.stringify(reply.data);
        return { data: same ? reply.data : withRequestId(result.response, reply.data), response: reply.response };
      }
      decorated = (await this.decorate(request)) ?? { request, info: {} };
    }
  }

  /** Opens the first model stream (so HTTP errors reject the call, as in the SDK), then
   * returns a stream of the SDK's own class fed by `events`. */
  async stream(request: Json): Promise<Result> {
    const hasMemory = this.opts.memory !== undefined && this.opts.memory !== null;
    const decorated = hasMemory ? await this.decorate(request) : undefined;
    const first = await this.model(decorated ? decorated["request"] : request);
    const source = first.data;
    const StreamClass = source.constructor;
    const events = decorated ? this.events(request, decorated, source) : passAll(source);
    const stream = new StreamClass(() => events, source.controller, (source as any).client);
    return { data: stream, response: first.response };
  }

  private async *events(request: Json, decorated: Json, source: AsyncIterable<Json>): AsyncGenerator<Json> {
    for (let attempt = 0; ; attempt++) {
      const note = decorated["info"]?.["note_ask"] ? this.api.noteTool(decorated["request"]) : undefined;
      const filter = this.api.streamFilter(note);
      for await (const event of source) {
        for (const out of filter.feed(event)) yield out;
      }
      if (this.opts.dryRun) {
        yield* filter.finish(undefined);
        return;
      }
      const result = await this.report(filter.reply());
      if (result?.again && !filter.visible && attempt < MAX_AGAIN) {
        decorated = (await this.decorate(request)) ?? { request, info: {} };
        source = (await this.model(decorated["request"])).data;
        continue;
      }
      yield* filter.finish(result?.response);
      return;
    }
  }
}

async function* passAll(source: AsyncIterable<Json>): AsyncGenerator<Json> {
  yield* source;
}

/** The SDKs put the request id on replies as a non-enumerable `_request_id`: keep it. */
function withRequestId(data: Json, like: Json): Json {
  const id = (like as any)?._request_id;
  if (id !== undefined) Object.defineProperty(data, "_request_id", { value: id, enumerable: false });
  return data;
}

/** One recalld connection shared by the wrapped methods; reconnected after a failure. The
 * socket holds the process open only while a call waits on it (so a script ends by itself). */
class Connector {
  private client: Client | undefined;
  private connecting: Promise<Client> | undefined;
  private active = 0;

  async use<T>(call: (client: Client) => Promise<T>): Promise<T> {
    const client = await this.get();
    this.active++;
    client.ref();
    try {
      return await call(client);
    } finally {
      if (--this.active === 0) client.unref();
    }
  }

  constructor(private readonly options: WrapOptions) {
    this.client = options.recalld;
  }

  async get(): Promise<Client> {
    if (this.client?.isOpen) return this.client;
    this.connecting ??= Client.connect(this.options.socket)
      .then((c) => {
        this.client = c;
        return c;
      })
      .catch((err: unknown) => {
        const where = this.options.socket ?? "the default socket";
        throw new ConnectionError(
          `recalld is not reachable at ${where} (${(err as Error).message}); start it with \`recalld serve\`, ` +
            `or wrap the client with passThrough: true to call the model without memory`,
          { cause: err },
        );
      })
      .finally(() => {
        this.connecting = undefined;
      });
    return this.connecting;
  }
}

/**
 * What a wrapped method returns: a Promise with the SDK's `APIPromise` helpers —
 * `withResponse()` (the data and the last model call's HTTP response), `asResponse()`, and
 * `_thenUnwrap()` (which the SDK's `.parse()` uses).
 */
export class RecalldPromise<T> extends Promise<T> {
  static override get [Symbol.species]() {
    return Promise;
  }

  private readonly result: Promise<Result>;

  constructor(result: Promise<Result>) {
    // Like the SDK's APIPromise: the base promise is a no-op, then/catch/finally read `result`,
    // so a caller that only uses withResponse() leaves no unhandled rejection behind.
    super((resolve) => resolve(null as T));
    this.result = result;
  }

  override then<A = T, B = never>(
    onfulfilled?: ((value: T) => A | PromiseLike<A>) | null,
    onrejected?: ((reason: any) => B | PromiseLike<B>) | null,
  ): Promise<A | B> {
    return this.result.then((r) => r.data as T).then(onfulfilled, onrejected);
  }

  override catch<B = never>(onrejected?: ((reason: any) => B | PromiseLike<B>) | null): Promise<T | B> {
    return this.then(undefined, onrejected);
  }

  override finally(onfinally?: (() => void) | null): Promise<T> {
    return this.result.then((r) => r.data as T).finally(onfinally);
  }

  async withResponse(): Promise<{ data: T; response: unknown; request_id: string | null | undefined }> {
    const { data, response } = await this.result;
    const id = (response as any)?.headers?.get?.("x-request-id");
    return { data, response, request_id: id };
  }

  async asResponse(): Promise<unknown> {
    return (await this.result).response;
  }

  _thenUnwrap<U>(transform: (data: T, props: { response: unknown }) => U): RecalldPromise<U> {
    return new RecalldPromise(this.result.then((r) => ({ data: transform(r.data, { response: r.response }), response: r.response })));
  }
}


