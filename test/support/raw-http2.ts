/**
 * A gRPC exchange sent with `node:http2` directly — no gRPC library between the test and the wire — for header values
 * no gRPC client would send (a hostile `grpc-timeout`): whatever the server answers is read, status, trailers, reset.
 */
import http2, { type ClientHttp2Session, type OutgoingHttpHeaders } from 'node:http2';

/** What came back: the gRPC status (from the trailers, or a trailers-only answer's headers) and everything else. */
export interface RawAnswer {
  /** `:status`; 0 when the stream was reset before any answer. */
  httpStatus: number;
  /** `grpc-status` as sent (a string), `undefined` if none came. */
  grpcStatus: string | undefined;
  grpcMessage: string | undefined;
  /** `x-deadline-exceeded-by`, from the trailers or a trailers-only answer. */
  exceededBy: string | undefined;
  /** The RST_STREAM code, when the server reset the stream. */
  rstCode: number;
  elapsedMs: number;
}

/** A session to `origin` whose errors (a GOAWAY as the server closes) are not thrown at the process. */
export function rawSession(origin: string): ClientHttp2Session {
  const session = http2.connect(origin);
  session.on('error', () => {});
  return session;
}

const one = (value: string | string[] | number | undefined): string | undefined =>
  value === undefined ? undefined : Array.isArray(value) ? value.join(', ') : String(value);

/** POSTs one gRPC frame to `path` with `headers` (their values as given: arrays are sent as repeated fields). */
export function rawGrpc(
  session: ClientHttp2Session,
  path: string,
  headers: OutgoingHttpHeaders,
  body: Uint8Array,
): Promise<RawAnswer> {
  return new Promise((resolve) => {
    const started = performance.now();
    const request = session.request({
      ':method': 'POST',
      ':path': path,
      'content-type': 'application/grpc',
      te: 'trailers',
      ...headers,
    });
    let head: http2.IncomingHttpHeaders = {};
    let tail: http2.IncomingHttpHeaders = {};
    request.on('response', (received) => {
      head = received;
    });
    request.on('trailers', (received) => {
      tail = received;
    });
    request.on('error', () => {});
    request.on('close', () =>
      resolve({
        httpStatus: Number(head[':status'] ?? 0),
        grpcStatus: one(tail['grpc-status'] ?? head['grpc-status']),
        grpcMessage: one(tail['grpc-message'] ?? head['grpc-message']),
        exceededBy: one(tail['x-deadline-exceeded-by'] ?? head['x-deadline-exceeded-by']),
        rstCode: request.rstCode ?? 0,
        elapsedMs: performance.now() - started,
      }),
    );
    request.resume();
    request.end(body);
  });
}
