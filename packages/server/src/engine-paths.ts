/**
 * The server's Node- and V8-version-specific fast paths, all of them, and nothing else.
 *
 * The rule: a path lives here only if it exists because of a particular Node or V8 version (a branch on the Node
 * version, a variant kept for some Nodes, a workaround for a cost a newer V8 no longer has). Each says what it does,
 * why (the measurement that keeps it), and `Delete when:` — the condition under which it, and its callers' use of
 * it, can go. What every supported Node needs (the request's state, its field layout, the response's end) is the
 * design, and stays in its own module. Adapters reach these through `@deadline/server/internal`.
 *
 * Node's support ends: Node 20 in April 2026, Node 22 in April 2027, Node 24 in April 2028.
 */

import { subscribe } from 'node:diagnostics_channel';
import type { IncomingHttpHeaders, IncomingMessage } from 'node:http';
import type { Socket } from 'node:net';
import type { LineLogger } from './options.js';

// ---------------------------------------------------------------------------------------------------------------
// Prototype-swapped requests are slow to read (Node 20 and 22)
// ---------------------------------------------------------------------------------------------------------------

/**
 * Whether V8 reads the objects of a framework that swaps each request's prototype (express, `setPrototypeOf` to
 * `app.request`) slowly: on Node 20 and 22 (V8 11, 12) such an object shares no hidden class with the next one, a
 * property added to it is a slow runtime call, and a property it lacks walks the whole prototype chain with every
 * cache missing; from Node 24 on (V8 13) its reads and writes are cached like any object's. The server and its
 * adapters choose, per Node, between reading such a request and going around it (callgrind, express: see
 * docs/benchmarks.md).
 *
 * Delete when: Node 22 leaves support (April 2027; V8 13, Node 24, is then the oldest) — with every path below
 * and in @deadline/express's engine-paths.ts that it selects.
 * @internal
 */
export const READS_OF_SWAPPED_REQUESTS_ARE_SLOW = Number(process.versions.node.split('.')[0]) < 24;

// ---------------------------------------------------------------------------------------------------------------
// The last request started: its headers and socket, read as the server started it (Node 20 and 22)
// ---------------------------------------------------------------------------------------------------------------

/*
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
 *
 * Delete when: Node 22 leaves support (April 2027). From Node 24 on nothing is noted already (the reads it spares
 * hit V8's caches there); then the adapter's `noteRequestStarts()` call goes, and it reads `req.headers` and
 * `req.socket` itself where it now calls `takeStartedRequest`.
 */

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
 * little (see READS_OF_SWAPPED_REQUESTS_ARE_SLOW), while a subscriber has Node publish on the channel for every
 * request: noted only on Node 20 and 22, where it saves ~6k instructions a request (express, callgrind; without it,
 * Node 24 counts the same and Node 26 ~2k less).
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

// ---------------------------------------------------------------------------------------------------------------
// `req.log`: own property asked first (Node 20 and 22), read first (Node 24 on)
// ---------------------------------------------------------------------------------------------------------------

/**
 * @internal The logger for `req`'s lines: its own `log` (pino-http sets one on each request), else `fallback` — on
 * every Node, so that lines go to the same logger on each. On Node 20 and 22, `Object.hasOwn` first: on an express
 * request without one, the read walks its whole prototype chain with V8's caches missing (~10k instructions a
 * request on Node 20, callgrind). From Node 24 on the read is cached and `Object.hasOwn` the dearer (~0.2k a request,
 * express): it is asked only when there is a `log` to tell own from inherited.
 *
 * Delete when: Node 22 leaves support (April 2027) — the `READS_OF_SWAPPED_REQUESTS_ARE_SLOW` branch goes, and
 * the function, its last two lines then, moves back to raw-host.ts (one function, here whole: not split in two).
 */
export function requestLogger(req: object | undefined, fallback: LineLogger | undefined): LineLogger | undefined {
  if (req === undefined) return fallback;
  if (READS_OF_SWAPPED_REQUESTS_ARE_SLOW) {
    return Object.hasOwn(req, 'log') ? ((req as { log?: LineLogger }).log ?? fallback) : fallback;
  }
  const log = (req as { log?: LineLogger }).log;
  return log !== undefined && Object.hasOwn(req, 'log') ? log : fallback;
}
