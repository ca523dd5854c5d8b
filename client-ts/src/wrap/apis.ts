/**
 * The provider APIs as the wrapper sees them: where the note tool's name sits in a decorated
 * request, and stream filters that hold back the note call's events and assemble the whole
 * reply for `report`. Same rules as the Python wrapper (client-py `recalld/_wrap/_openai.py`).
 *
 * A filter's `feed(event)` returns the events to hand the caller now (the event itself when
 * untouched, a copy when a note part was cut out); `visible` turns true once anything but the
 * note call was handed over; `reply()` is the assembled reply; `finish(response)` returns what
 * was held until the end (`response`: report's reply, or undefined when nothing was reported).
 */

type Json = Record<string, any>;

export interface StreamFilter {
  readonly visible: boolean;
  feed(event: Json): Json[];
  reply(): Json;
  finish(response: Json | undefined): Json[];
}

export interface Api {
  /** The note tool's name in a decorated request that asks for a note (the last tool). */
  noteTool(request: Json): string | undefined;
  streamFilter(note: string | undefined): StreamFilter;
  /** The request as recalld should read it (Messages: a minimal request gets an empty `system`,
   * else it would read as Chat Completions; the decorated request leaves it out again). */
  mark?(request: Json): Json;
}

const isEqual = (a: unknown, b: unknown): boolean => JSON.stringify(a) === JSON.stringify(b);
const clone = <T>(v: T): T => structuredClone(v);

/** Holds events that show nothing until one that shows something arrives. */
abstract class HoldingFilter implements StreamFilter {
  visible: boolean;
  protected pending: Json[] = [];

  constructor(protected readonly note: string | undefined) {
    this.visible = note === undefined;
  }

  protected pass(out: Json, shows: boolean): Json[] {
    if (this.visible) return [out];
    if (!shows) {
      this.pending.push(out);
      return [];
    }
    this.visible = true;
    const held = this.pending;
    this.pending = [];
    return [...held, out];
  }

  abstract feed(event: Json): Json[];
  abstract reply(): Json;

  finish(_response: Json | undefined): Json[] {
    const held = this.pending;
    this.pending = [];
    return held;
  }
}

// --- Chat Completions ------------------------------------------------------------------------

interface ChoiceState {
  content: string[];
  refusal: string[];
  calls: Map<number, { id: string; type: string; function: { name: string; arguments: string } }>;
  finish: string | null;
}

class ChatFilter extends HoldingFilter {
  private head: Json = {};
  private choices = new Map<number, ChoiceState>();
  private noteCalls = new Set<string>();
  private renumber = new Map<string, number>();

  feed(chunk: Json): Json[] {
    this.assemble(chunk);
    if (this.note === undefined) return [chunk];
    const d = clone(chunk);
    const [changed, shows] = this.cutNote(d);
    if (changed && emptyChunk(d)) return [];
    return this.pass(changed ? d : chunk, shows);
  }

  private cutNote(d: Json): [boolean, boolean] {
    let changed = false;
    let shows = false;
    for (const choice of d["choices"] ?? []) {
      const ci = choice.index ?? 0;
      const delta = choice.delta ?? {};
      const calls: Json[] | undefined = delta.tool_calls;
      if (calls && calls.length) {
        const kept: Json[] = [];
        for (const call of calls) {
          const key = `${ci}:${call.index ?? 0}`;
          const name = call.function?.name;
          if (!this.renumber.has(key) && (this.noteCalls.has(key) || name === this.note)) {
            this.noteCalls.add(key);
            changed = true;
            continue;
          }
          if (!this.renumber.has(key)) {
            this.renumber.set(key, [...this.renumber.keys()].filter((k) => k.startsWith(`${ci}:`)).length);
          }
          const index = this.renumber.get(key)!;
          if ((call.index ?? 0) !== index) {
            call.index = index;
            changed = true;
          }
          kept.push(call);
        }
        if (kept.length !== calls.length) {
          if (kept.length) delta.tool_calls = kept;
          else delete delta.tool_calls;
        }
        shows ||= kept.length > 0;
      }
      shows ||= Boolean(delta.content) || Boolean(delta.refusal) || Boolean(delta.audio);
      if (choice.finish_reason === "tool_calls" && ![...this.renumber.keys()].some((k) => k.startsWith(`${ci}:`))) {
        choice.finish_reason = "stop";
        changed = true;
      }
    }
    return [changed, shows];
  }

  private assemble(d: Json): void {
    for (const key of ["id", "created", "model", "system_fingerprint", "service_tier"]) {
      if (d[key] !== undefined && d[key] !== null) this.head[key] = d[key];
    }
    if (d["usage"]) this.head["usage"] = d["usage"];
    for (const choice of d["choices"] ?? []) {
      const index = choice.index ?? 0;
      let c = this.choices.get(index);
      if (!c) {
        c = { content: [], refusal: [], calls: new Map(), finish: null };
        this.choices.set(index, c);
      }
      const delta = choice.delta ?? {};
      if (delta.content) c.content.push(delta.content);
      if (delta.refusal) c.refusal.push(delta.refusal);
      for (const call of delta.tool_calls ?? []) {
        const i = call.index ?? 0;
        let slot = c.calls.get(i);
        if (!slot) {
          slot = { id: "", type: "function", function: { name: "", arguments: "" } };
          c.calls.set(i, slot);
        }
        if (call.id) slot.id = call.id;
        if (call.function?.name) slot.function.name += call.function.name;
        if (call.function?.arguments) slot.function.arguments += call.function.arguments;
      }
      if (choice.finish_reason) c.finish = choice.finish_reason;
    }
  }

  reply(): Json {
    const choices = [...this.choices.entries()]
      .sort(([a], [b]) => a - b)
      .map(([index, c]) => {
        const message: Json = {
          role: "assistant",
          content: c.content.length ? c.content.join("") : null,
          refusal: c.refusal.length ? c.refusal.join("") : null,
        };
        if (c.calls.size) message["tool_calls"] = [...c.calls.entries()].sort(([a], [b]) => a - b).map(([, v]) => v);
        return { index, message, finish_reason: c.finish ?? "stop" };
      });
    return { object: "chat.completion", ...this.head, choices };
  }
}

function emptyChunk(d: Json): boolean {
  if (d["usage"]) return false;
  for (const choice of d["choices"] ?? []) {
    if (choice.finish_reason) return false;
    for (const v of Object.values(choice.delta ?? {})) {
      if (v !== null && v !== undefined && v !== "" && !(Array.isArray(v) && v.length === 0)) return false;
    }
  }
  return true;
}

export const chatCompletions: Api = {
  noteTool: (request) => {
    const tools: Json[] = request["tools"] ?? [];
    return tools.length ? tools[tools.length - 1]!["function"]?.name : undefined;
  },
  streamFilter: (note) => new ChatFilter(note),
};

// --- Responses -------------------------------------------------------------------------------

const TERMINAL = new Set(["response.completed", "response.incomplete", "response.failed"]);

/** Responses events: the note's `function_call` item (every event with its `output_index`) is
 * held back and later items renumbered; the terminal event is held until report and handed
 * over carrying report's reply. */
class ResponsesFilter extends HoldingFilter {
  private noteItems = new Set<number>();
  private terminal: Json | undefined;
  private snapshot: Json = {};
  private items = new Map<number, Json>();

  feed(event: Json): Json[] {
    const kind: string = event["type"] ?? "";
    if (event["response"] && typeof event["response"] === "object") this.snapshot = event["response"];
    if (kind === "response.output_item.done" && event["item"]) this.items.set(event["output_index"] ?? this.items.size, event["item"]);
    if (TERMINAL.has(kind)) {
      this.terminal = event;
      return [];
    }
    if (this.note === undefined) return [event];
    const index = event["output_index"];
    if (typeof index !== "number") return this.pass(event, false);
    const item = kind === "response.output_item.added" ? event["item"] : undefined;
    if (this.noteItems.has(index) || (item?.type === "function_call" && item?.name === this.note)) {
      this.noteItems.add(index);
      return [];
    }
    const shift = [...this.noteItems].filter((i) => i < index).length;
    return this.pass(shift ? { ...event, output_index: index - shift } : event, true);
  }

  reply(): Json {
    if (this.terminal) return this.terminal["response"];
    const output = [...this.items.entries()].sort(([a], [b]) => a - b).map(([, v]) => v);
    return { ...this.snapshot, object: "response", output };
  }

  override finish(response: Json | undefined): Json[] {
    const held = super.finish(response);
    if (this.terminal) {
      const same = response === undefined || isEqual(response, this.terminal["response"]);
      held.push(same ? this.terminal : { ...this.terminal, response });
    }
    return held;
  }
}

export const responses: Api = {
  noteTool: (request) => {
    const tools: Json[] = request["tools"] ?? [];
    return tools.length ? tools[tools.length - 1]!["name"] : undefined;
  },
  streamFilter: (note) => new ResponsesFilter(note),
};

// --- Anthropic Messages ----------------------------------------------------------------------

/** Messages events: the note's `tool_use` block (every event with its `index`) is held back
 * and later blocks renumbered; `stop_reason: "tool_use"` becomes `end_turn` when the note was
 * the only tool call. */
class MessagesFilter extends HoldingFilter {
  private noteBlocks = new Set<number>();
  private otherTools = 0;
  private message: Json = {};
  private blocks = new Map<number, Json>();
  private partialJson = new Map<number, string>();

  feed(event: Json): Json[] {
    this.assemble(event);
    if (this.note === undefined) return [event];
    const kind: string = event["type"] ?? "";
    const index = event["index"];
    if (typeof index === "number") {
      const block = kind === "content_block_start" ? event["content_block"] : undefined;
      if (this.noteBlocks.has(index) || (block?.type === "tool_use" && block?.name === this.note)) {
        this.noteBlocks.add(index);
        return [];
      }
      if (block?.type === "tool_use") this.otherTools++;
      const shift = [...this.noteBlocks].filter((i) => i < index).length;
      return this.pass(shift ? { ...event, index: index - shift } : event, true);
    }
    if (kind === "message_delta" && event["delta"]?.stop_reason === "tool_use" && this.otherTools === 0) {
      return this.pass({ ...event, delta: { ...event["delta"], stop_reason: "end_turn" } }, false);
    }
    return this.pass(event, false);
  }

  private assemble(event: Json): void {
    switch (event["type"]) {
      case "message_start":
        this.message = clone(event["message"] ?? {});
        break;
      case "content_block_start":
        this.blocks.set(event["index"], clone(event["content_block"] ?? {}));
        break;
      case "content_block_delta": {
        const block = this.blocks.get(event["index"]);
        const delta = event["delta"] ?? {};
        if (!block) break;
        if (delta.type === "text_delta") block["text"] = (block["text"] ?? "") + delta.text;
        else if (delta.type === "input_json_delta")
          this.partialJson.set(event["index"], (this.partialJson.get(event["index"]) ?? "") + delta.partial_json);
        else if (delta.type === "thinking_delta") block["thinking"] = (block["thinking"] ?? "") + delta.thinking;
        else if (delta.type === "signature_delta") block["signature"] = delta.signature;
        break;
      }
      case "content_block_stop": {
        const json = this.partialJson.get(event["index"]);
        const block = this.blocks.get(event["index"]);
        if (block && json !== undefined) block["input"] = json ? JSON.parse(json) : {};
        break;
      }
      case "message_delta":
        Object.assign(this.message, event["delta"] ?? {});
        if (event["usage"]) this.message["usage"] = { ...(this.message["usage"] ?? {}), ...event["usage"] };
        break;
    }
  }

  reply(): Json {
    const content = [...this.blocks.entries()].sort(([a], [b]) => a - b).map(([, v]) => v);
    return { ...this.message, content };
  }
}

export const messages: Api = {
  noteTool: (request) => {
    const tools: Json[] = request["tools"] ?? [];
    return tools.length ? tools[tools.length - 1]!["name"] : undefined;
  },
  streamFilter: (note) => new MessagesFilter(note),
  mark: (request) => ("system" in request ? request : { ...request, system: "" }),
};
