/**
 * recalld: the TypeScript client for the recalld memory sidecar.
 *
 * ```ts
 * const recalld = await Client.connect();
 * const { request } = await recalld.decorate("conv-1", chatRequest);
 * ```
 */

export { Client, type ConnectOptions } from "./client.js";
export { ConnectionError, ERROR_CODES, RecalldError, isErrorCode, isRetryable, type ErrorCode, type RecalldErrorOptions } from "./errors.js";
export { DEFAULT_MAX_FRAME_BYTES, FrameReader, encodeFrame } from "./frame.js";
export { defaultSocketPath, socketPathFromSpec } from "./socket_path.js";
export * from "./types.js";
export { VERSION } from "./version.js";
export { RecalldPromise, withMemory, wrap, type MemoryOptions, type WithMemory, type WrapOptions } from "./wrap/index.js";
