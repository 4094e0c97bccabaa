/**
 * A response body as a host hands it out, as bytes to store: a string or bytes are whole; a stream is not seen
 * whole (its size is unknown, -1); nothing is an empty body.
 */

/** @internal */
export function sentBody(payload: unknown): { body: Buffer | undefined; bodyBytes: number } {
  if (payload === undefined || payload === null) return { body: Buffer.alloc(0), bodyBytes: 0 };
  if (typeof payload === 'string') {
    const body = Buffer.from(payload);
    return { body, bodyBytes: body.length };
  }
  if (payload instanceof Uint8Array) {
    const body = Buffer.isBuffer(payload)
      ? payload
      : Buffer.from(payload.buffer, payload.byteOffset, payload.byteLength);
    return { body, bodyBytes: body.length };
  }
  return { body: undefined, bodyBytes: -1 };
}
