/**
 * Errors: the closed list of wire error codes, `RecalldError` for any failed call and
 * `ConnectionError` for a socket that could not be opened or was lost.
 *
 * Codes mirror `protocol/src/error.rs`; messages are for people and may change.
 */

/** Every code a reply's `err` can carry. */
export const ERROR_CODES = [
  "malformed_frame",
  "frame_too_large",
  "unknown_op",
  "invalid_argument",
  "not_found",
  "conflict",
  "resource_exhausted",
  "unavailable",
  "timeout",
  "internal",
  "version_unsupported",
] as const;

export type ErrorCode = (typeof ERROR_CODES)[number];

const RETRYABLE: ReadonlySet<ErrorCode> = new Set<ErrorCode>(["resource_exhausted", "unavailable", "timeout"]);

/** Whether a request failing with `code` may succeed if sent again later. */
export function isRetryable(code: ErrorCode): boolean {
  return RETRYABLE.has(code);
}

export function isErrorCode(value: unknown): value is ErrorCode {
  return typeof value === "string" && (ERROR_CODES as readonly string[]).includes(value);
}

export interface RecalldErrorOptions {
  /** Defaults to what the code implies. */
  retryable?: boolean;
  cause?: unknown;
  /** The op of the call that failed, when there was one. */
  op?: string;
}

/** A failed call: the server's `err` reply, or a failure detected by the client. */
export class RecalldError extends Error {
  readonly code: ErrorCode;
  readonly retryable: boolean;
  readonly op: string | undefined;

  constructor(code: ErrorCode, message: string, options: RecalldErrorOptions = {}) {
    super(message, options.cause === undefined ? undefined : { cause: options.cause });
    this.name = "RecalldError";
    this.code = code;
    this.retryable = options.retryable ?? isRetryable(code);
    this.op = options.op;
  }
}

/** The socket could not be opened, or it closed with calls in flight. Always `unavailable`. */
export class ConnectionError extends RecalldError {
  constructor(message: string, options: { cause?: unknown; op?: string } = {}) {
    super("unavailable", message, { ...options, retryable: true });
    this.name = "ConnectionError";
  }
}
