/**
 * The bytes a client with no generated code sends to the test service (test/fixtures/inventory.proto) and reads back:
 * its two request messages in protobuf, the gRPC length-prefixed frame, and the trailers gRPC-Web sends in the body.
 * Written by hand so that the foreign clients' tests depend on no protobuf library of ours.
 */

/** A protobuf varint. */
function varint(value: number): number[] {
  const bytes: number[] = [];
  let rest = value;
  while (rest > 0x7f) {
    bytes.push((rest & 0x7f) | 0x80);
    rest >>>= 7;
  }
  bytes.push(rest);
  return bytes;
}

/** `QueryRequest { string sql = 1; }`. */
export function queryRequest(sql: string): Uint8Array {
  const text = Buffer.from(sql, 'utf8');
  return Uint8Array.from([0x0a, ...varint(text.length), ...text]);
}

/** `InspectRequest { bool wait = 1; }`: the handler answers with its context at once, or waits for it to stop. */
export function inspectRequest(wait = false): Uint8Array {
  return wait ? Uint8Array.from([0x08, 0x01]) : new Uint8Array(0);
}

/** A message in gRPC's (and gRPC-Web's) length-prefixed frame: flags 0, its length as 4 bytes big-endian. */
export function grpcFrame(message: Uint8Array): Buffer {
  const frame = Buffer.alloc(5 + message.length);
  frame.writeUInt32BE(message.length, 1);
  frame.set(message, 5);
  return frame;
}

/**
 * The trailers of a gRPC-Web response: the body's frame with flag 0x80, "name: value" lines, by lower-case name. Empty
 * when the body has none (a trailers-only answer carries them as headers).
 */
export function grpcWebTrailers(body: Buffer): Record<string, string> {
  const trailers: Record<string, string> = {};
  for (let at = 0; at + 5 <= body.length; ) {
    const length = body.readUInt32BE(at + 1);
    if (((body[at] as number) & 0x80) !== 0) {
      for (const line of body
        .subarray(at + 5, at + 5 + length)
        .toString('utf8')
        .split('\r\n')) {
        const colon = line.indexOf(':');
        if (colon > 0) trailers[line.slice(0, colon).trim().toLowerCase()] = line.slice(colon + 1).trim();
      }
    }
    at += 5 + length;
  }
  return trailers;
}
