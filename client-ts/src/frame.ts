/**
 * Frames: a 4-byte big-endian length, then that many bytes of body (one MessagePack map).
 *
 * `FrameReader` takes socket chunks as they arrive and yields whole bodies; it never
 * confuses "need more bytes" with a complete frame, wherever the chunks were split.
 */

/** 64 MiB: the protocol's default limit on one frame's body, until `hello` says otherwise. */
export const DEFAULT_MAX_FRAME_BYTES = 64 * 1024 * 1024;

export const HEADER_BYTES = 4;

/** Largest body the 4-byte header can describe. */
const MAX_ENCODABLE = 0xffff_ffff;

/** Writes header + body into one new buffer. The caller checks the size limit first. */
export function encodeFrame(body: Uint8Array): Buffer {
  if (body.length > MAX_ENCODABLE) {
    throw new RangeError(`frame body of ${body.length} bytes cannot be framed`);
  }
  const out = Buffer.allocUnsafe(HEADER_BYTES + body.length);
  out.writeUInt32BE(body.length, 0);
  out.set(body, HEADER_BYTES);
  return out;
}

/**
 * Incremental frame reader over a stream of chunks. Chunks are kept as a list and joined only
 * when a whole frame is there, so a large frame arriving in many chunks is copied once.
 */
export class FrameReader {
  private chunks: Buffer[] = [];
  private held = 0;
  /** Body length of the frame being read, once its header is complete. */
  private need = -1;

  /** Adds a chunk and returns every body completed by it, in order. */
  push(chunk: Buffer): Buffer[] {
    if (chunk.length === 0) return [];
    this.chunks.push(chunk);
    this.held += chunk.length;
    const bodies: Buffer[] = [];
    for (;;) {
      if (this.need < 0) {
        if (this.held < HEADER_BYTES) break;
        this.need = this.peekHeader();
      }
      if (this.held < HEADER_BYTES + this.need) break;
      const all = this.chunks.length === 1 ? this.chunks[0]! : Buffer.concat(this.chunks, this.held);
      const end = HEADER_BYTES + this.need;
      bodies.push(all.subarray(HEADER_BYTES, end));
      const rest = all.subarray(end);
      this.chunks = rest.length > 0 ? [rest] : [];
      this.held = rest.length;
      this.need = -1;
    }
    return bodies;
  }

  /** Bytes held of a frame not yet complete. */
  get pending(): number {
    return this.held;
  }

  private peekHeader(): number {
    const first = this.chunks[0]!;
    if (first.length >= HEADER_BYTES) return first.readUInt32BE(0);
    const joined = Buffer.concat(this.chunks, this.held);
    this.chunks = [joined];
    return joined.readUInt32BE(0);
  }
}
