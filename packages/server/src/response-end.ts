/**
 * How a request's deadline hears that its response is over.
 *
 * Node's HTTP/1 server publishes `http.server.response.finish` on a diagnostics channel for every response it has
 * finished: one subscriber for the process does what a `close` listener added to each response did, without the
 * listener (adding it was ~0.6k instructions per request, callgrind, fastify on Node 24). A client that leaves
 * first finishes no response; one `close` listener per socket hears it, before the responses hear theirs, for the
 * requests still open on that socket (more than one when requests are pipelined: Node answers them in turn, and a
 * response waiting for its turn, with no socket yet, would never hear a `close` of its own).
 *
 * express's responses are found the same way (the socket's list, not a property on the response: a property added
 * to express's objects is a slow runtime call, see its engine-paths.ts). Any other response — HTTP/2's compatibility
 * API, light-my-request's `inject()` — gets a `close` listener of its own, as before.
 */

import { subscribe } from 'node:diagnostics_channel';
import { type IncomingMessage, ServerResponse } from 'node:http';
import type { Socket } from 'node:net';

/** What is told when its response is over: `finished` when the server finished it, else read off the response. */
export interface ResponseEnd {
  /** The response, until it is over. */
  readonly res: ServerResponse | undefined;
  finish(finished?: boolean): void;
}

/** On a socket: the ends of its requests still open, in the order the requests came. */
const OPEN = Symbol('deadline.openResponses');

type TrackedSocket = Socket & { [OPEN]?: ResponseEnd[]; server?: unknown };

let subscribed = false;

/**
 * Has `end.finish()` called once when the response to `req`, read from `socket`, is over: finished by the server
 * (`finish(true)`), or closed before that (the client left, the socket was destroyed: `finish()`).
 */
export function finishWithResponse(
  req: IncomingMessage,
  res: ServerResponse,
  end: ResponseEnd,
  // The caller's, when it has it already (see engine-paths.ts): a read of express's `req` is slow.
  socket = req.socket as TrackedSocket | null,
): void {
  // Nearly always: a kept-alive socket that already carried a request of ours, so one a node:http or node:https
  // server accepted. The rest is apart: a request's start is optimised as one unit, and V8 stops inlining into
  // it once the code it took in passes a size — code on a path never taken counts too, calls on it do not.
  const open = socket?.[OPEN];
  if (open !== undefined) open.push(end);
  else trackFirst(res, end, socket);
}

/** The first request of ours on `socket` (or a response whose finish is not published). */
function trackFirst(res: ServerResponse, end: ResponseEnd, socket: TrackedSocket | null | undefined): void {
  // A node:http or node:https server's own response to a request read from a socket it accepted: its finish is
  // published.
  if (socket == null || socket.server == null || !(res instanceof ServerResponse)) {
    finishOnClose(res, end);
    return;
  }
  if (!subscribed) {
    subscribe('http.server.response.finish', onResponseFinish);
    subscribed = true;
  }
  const ends: ResponseEnd[] = [end];
  socket[OPEN] = ends;
  // First among the socket's `close` listeners: Node's own emit the responses' `close` (and the requests'), and
  // OpenTelemetry's http instrumentation ends the server span there; the outcome must be on it by then.
  socket.prependOnceListener('close', () => closeAll(ends));
}

/**
 * A response's own `close` listener. First, before the others: OpenTelemetry's http instrumentation ends the server
 * span on `close`, and the request's outcome must be on it by then.
 */
function finishOnClose(res: ServerResponse, end: ResponseEnd): void {
  // `close` comes once per response; `on` spares the wrapper `once` would allocate per request.
  res.prependListener('close', () => end.finish());
}

/** Found by its response among those open on its socket: nearly always the first, as responses go in turn. */
function onResponseFinish(message: unknown): void {
  const { response, socket } = message as { response: ServerResponse; socket: TrackedSocket | null };
  const open = socket?.[OPEN];
  if (open === undefined) return; // a server's socket that carried no request of ours
  for (let at = 0; at < open.length; at++) {
    const end = open[at] as ResponseEnd;
    if (end.res !== response) continue;
    if (at === 0) open.shift();
    else open.splice(at, 1);
    end.finish(true);
    return;
  }
}

/** The socket closed: what is still open on it ends now, unfinished unless its response says otherwise. */
function closeAll(open: ResponseEnd[]): void {
  for (const end of open.splice(0)) end.finish();
}
