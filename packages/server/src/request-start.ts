/**
 * What Node's HTTP/1 server knew of a request as it started it: its headers and its socket, read before any
 * framework touched the request.
 *
 * Why: express swaps the prototype of every request it handles (`setPrototypeOf` to the app's `request`), after
 * which V8 misses its inline caches on each property read of that object, and looks it up along the whole
 * prototype chain — on Node 20, callgrind counts 1.4–3.7k instructions for each of `req.headers` and `req.socket`.
 * Node publishes `http.server.request.start` just before it emits `request`, while the request still has the hidden
 * class every request shares: reading them there costs a few instructions. A middleware reached synchronously from
 * that emit (the first one, or after others that call `next()` at once) finds its request here; any other reads the
 * request itself.
 *
 * Only the last request started is kept: the first middleware that takes it lets go of the request (its headers
 * and socket stay until the next request starts); one that no middleware of ours takes (another framework's, in the
 * same process) is held until the next one starts.
 */

import { subscribe } from 'node:diagnostics_channel';
import type { IncomingHttpHeaders, IncomingMessage } from 'node:http';
import type { Socket } from 'node:net';
import { READS_OF_SWAPPED_REQUESTS_ARE_SLOW } from './swapped-requests.js';

/** The last request the server started, and what was read of it then. One object, updated in place. */
interface StartedRequest {
  req: IncomingMessage | undefined;
  headers: IncomingHttpHeaders | undefined;
  socket: Socket | null | undefined;
}

const started: StartedRequest = { req: undefined, headers: undefined, socket: undefined };

let subscribed = false;

function onRequestStart(message: unknown): void {
  const { request, socket } = message as { request: IncomingMessage; socket: Socket };
  started.req = request;
  started.headers = request.headers;
  started.socket = socket;
}

/**
 * Starts noting each request's headers and socket as the server starts it (once per process, on Node 20 and 22; an
 * adapter calls it when it is set up). From Node 24 on, reading `headers` and `socket` of express's request costs
 * little (see swapped-requests.ts), while a subscriber has Node publish on the channel for every request: noted only
 * on Node 20 and 22, where it saves ~6k instructions a request (express, callgrind; without it, Node 24 counts the
 * same and Node 26 ~2k less).
 * @internal
 */
export function noteRequestStarts(): void {
  if (subscribed || !READS_OF_SWAPPED_REQUESTS_ARE_SLOW) return;
  subscribe('http.server.request.start', onRequestStart);
  subscribed = true;
}

/**
 * `req`'s headers and socket as the server started it, if it is the last request started and no one took it yet
 * (then it is let go of); otherwise `undefined`, and the caller reads `req` itself. From Node 24 on, where nothing
 * is noted, it is a function that returns nothing: the check, never true there, was 30 bytes of bytecode counted
 * against the 920 V8 inlines into a request's start; an empty function is inlined without counting
 * (--trace-turbo-inlining).
 * @internal
 */
export const takeStartedRequest: (req: IncomingMessage) => StartedRequest | undefined =
  READS_OF_SWAPPED_REQUESTS_ARE_SLOW ? takeNoted : () => undefined;

function takeNoted(req: IncomingMessage): StartedRequest | undefined {
  if (started.req !== req) return undefined;
  started.req = undefined;
  return started;
}
