/**
 * Typed shapes of each op's arguments and results, as the wire carries them.
 *
 * Provider requests and replies (Chat Completions, Responses) are open objects: the known
 * fields are typed, everything else passes through untouched.
 */

/** The protocol versions this client speaks. */
export const PROTOCOL_MIN_VERSION = 1;
export const PROTOCOL_MAX_VERSION = 1;

// ---------------------------------------------------------------------------------------------
// hello, ping, health, stats

export interface HelloArgs {
  min_version: number;
  max_version: number;
  client?: string;
}

export interface Limits {
  max_frame_bytes: number;
  max_memory_id_bytes: number;
  max_in_flight: number;
}

export interface HelloReply {
  /** The version both sides speak: the highest in both ranges. */
  protocol_version: number;
  min_version: number;
  max_version: number;
  server: string;
  server_version: string;
  limits: Limits;
  /** The ops this server serves. */
  capabilities: string[];
  [key: string]: unknown;
}

export interface PingReply {
  /** The payload sent, echoed back. */
  payload?: unknown;
  [key: string]: unknown;
}

export type HealthReply = Record<string, unknown>;
export type StatsReply = Record<string, unknown>;

// ---------------------------------------------------------------------------------------------
// Provider shapes (open objects)

export interface ChatToolCall {
  id: string;
  type: "function" | (string & {});
  function: { name: string; arguments: string };
  [key: string]: unknown;
}

export interface ChatMessage {
  role: "system" | "developer" | "user" | "assistant" | "tool" | (string & {});
  content?: string | Array<Record<string, unknown>> | null;
  name?: string;
  tool_calls?: ChatToolCall[];
  tool_call_id?: string;
  [key: string]: unknown;
}

/** A Chat Completions request, as `client.chat.completions.create(...)` takes it. */
export interface ChatCompletionsRequest {
  model: string;
  messages: ChatMessage[];
  tools?: Array<Record<string, unknown>>;
  max_tokens?: number;
  max_completion_tokens?: number;
  [key: string]: unknown;
}

/** One item of a Responses request's `input`. */
export interface ResponsesInputItem {
  type?: "message" | "function_call" | "function_call_output" | (string & {});
  role?: "system" | "developer" | "user" | "assistant" | (string & {});
  content?: string | Array<Record<string, unknown>>;
  call_id?: string;
  name?: string;
  arguments?: string;
  output?: string;
  [key: string]: unknown;
}

/** A Responses request, as `client.responses.create(...)` takes it. */
export interface ResponsesRequest {
  model: string;
  input?: string | ResponsesInputItem[];
  instructions?: string | null;
  tools?: Array<Record<string, unknown>>;
  max_output_tokens?: number;
  [key: string]: unknown;
}

export type ProviderRequest = ChatCompletionsRequest | ResponsesRequest;

/** A `chat.completion` object, as the provider returns it. */
export interface ChatCompletion {
  id?: string;
  object?: "chat.completion" | (string & {});
  model?: string;
  choices: Array<{
    index?: number;
    finish_reason?: string | null;
    message: ChatMessage;
    [key: string]: unknown;
  }>;
  usage?: { prompt_tokens?: number; completion_tokens?: number; total_tokens?: number; [key: string]: unknown };
  [key: string]: unknown;
}

/** A Responses `response` object, as the provider returns it. */
export interface ResponsesResponse {
  id?: string;
  object?: "response" | (string & {});
  model?: string;
  output: Array<Record<string, unknown>>;
  usage?: { input_tokens?: number; output_tokens?: number; total_tokens?: number; [key: string]: unknown };
  [key: string]: unknown;
}

export type ProviderResponse = ChatCompletion | ResponsesResponse;

// ---------------------------------------------------------------------------------------------
// decorate, report, export

/** How the request's history relates to what the memory already holds. */
export type HistoryMode = "full" | "delta";

export interface DecorateOptions {
  /** Unix time in seconds, or a Date. The daemon's clock when absent. */
  now?: number | Date;
  /** Assemble the request without storing anything. */
  dryRun?: boolean;
  /** Token ceiling for this memory; stored on the memory when given. */
  ceiling?: number;
  agent?: string;
  user?: string;
  /** `full` (default): the request holds the whole history; `delta`: only new messages. */
  history?: HistoryMode;
}

/** `decorate`'s arguments as the wire names them. */
export interface DecorateArgs {
  memory: string;
  request: object;
  now?: number;
  dry_run?: boolean;
  ceiling?: number;
  agent?: string;
  user?: string;
  history?: HistoryMode;
}

/** Sizes, budget and states of the decorate call; the server decides the fields. */
export type DecorateInfo = Record<string, unknown>;

export interface DecorateReply<R extends object = ProviderRequest> {
  /** The request the model should get. Same shape as the one sent. */
  request: R;
  info: DecorateInfo;
}

export interface ReportOptions {
  /** Unix time in seconds, or a Date. The daemon's clock when absent. */
  now?: number | Date;
}

export interface ReportArgs {
  memory: string;
  response: object;
  now?: number;
}

export interface ReportReply<R extends object = ProviderResponse> {
  /** The reply without the note call. */
  response: R;
  /** True when the note call was all the reply held: call the model once more. */
  again: boolean;
}

/** One stored message in an export. */
export interface StoredMessage {
  role: string;
  [key: string]: unknown;
}

export interface ExportReply {
  memory: string;
  messages: StoredMessage[];
  [key: string]: unknown;
}

// inspect, memories

export interface InspectOptions {
  /** Activation as of this time: Unix seconds or a Date (default: now). */
  at?: number | Date;
  /** How many of the last decorates' decisions (default 8, at most 32). */
  decisions?: number;
  /** The latest episodes listed (default 200; every episode in view is listed as well). */
  episodes?: number;
  /** Points of each episode's activation curve (default 48; 0 for none). */
  curve?: number;
  /** Also return the messages of these turns. */
  turns?: [number, number];
}

/** One episode as `inspect` shows it. */
export interface InspectEpisode {
  n: number;
  state: "live" | "leaving" | "sealed" | "forgotten";
  first_turn: number;
  last_turn: number;
  first_seq: number;
  last_seq: number;
  at: number;
  tokens: number;
  activation: number;
  significance: number;
  facts: number[];
  traces: { at: number; kind: string; score: number; counted: boolean; fact: number | null }[];
  /** `[time, activation]` pairs from the episode's encoding to `at`. */
  curve: [number, number][];
  [key: string]: unknown;
}

export interface InspectReply {
  memory: string;
  at: number;
  record: Record<string, unknown>;
  episodes: InspectEpisode[];
  episodes_omitted: number;
  facts: Record<string, unknown>[];
  entities: { n: number; name: string; aliases: string[] }[];
  edges: { fact: number; subject: number; object: number }[];
  /** The latest decorates' decisions, oldest first. */
  decisions: Record<string, unknown>[];
  decisions_kept: number;
  lane: Record<string, unknown>;
  /** Only when `turns` was given. */
  messages?: { seq: number; turn: number; role: string; text: string; [key: string]: unknown }[];
  [key: string]: unknown;
}

export interface MemorySummary {
  memory: string;
  messages: number;
  turns: number;
  episodes: number;
  facts: number;
  last_at: number;
  created_at: number;
  agent: string | null;
  user: string | null;
  ceiling: number | null;
}

export interface MemoriesReply {
  memories: MemorySummary[];
}
