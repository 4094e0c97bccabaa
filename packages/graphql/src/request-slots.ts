/**
 * Which `node:http` request the code running now serves, for a GraphQL server that owns its HTTP server (Apollo's
 * `startStandaloneServer`, graphql-yoga on `createServer`): there is no handler of ours to run the request inside
 * its deadline context, so the GraphQL plugin starts the request's deadline when the operation reaches it, and the
 * resolvers enter that context themselves. They find it through a slot per request, made when the request starts.
 *
 * The slot is put in a store of this module's own with `enterWith`, in Node's `http.server.request.start` channel:
 * that message is published just before the server's `'request'` event, in the same synchronous run, so the slot is
 * the store of the request's whole handling (its body parsing, the server's plugins, the resolvers) and of nothing
 * else the application sees. Nothing reads this store but the GraphQL plugins; a request that runs inside a server
 * hop's context already (express, fastify, `deadlineHandler`) ignores its slot.
 */
import { AsyncLocalStorage } from 'node:async_hooks';
import diagnostics from 'node:diagnostics_channel';
import type { IncomingMessage, ServerResponse } from 'node:http';
import { monotonicNow } from '@deadline/core/internal';
import type { RequestState } from '@deadline/server/internal';

/** One `node:http` request: when it arrived, and its deadline once a GraphQL plugin started it. @internal */
export interface RequestSlot {
  readonly req: IncomingMessage;
  readonly res: ServerResponse;
  /** On the monotonic clock, when the request arrived: its budget is anchored there. */
  readonly arrivedAt: number;
  state: RequestState | undefined;
}

const slots = new AsyncLocalStorage<RequestSlot>();
let listening = false;

interface RequestStartMessage {
  request: IncomingMessage;
  response: ServerResponse;
}

function onRequestStart(message: unknown): void {
  const { request, response } = message as RequestStartMessage;
  slots.enterWith({ req: request, res: response, arrivedAt: monotonicNow(), state: undefined });
}

/**
 * Starts giving each `node:http` request a slot (once per process; a plugin calls it when it is made).
 * @internal
 */
export function listenForRequests(): void {
  if (listening) return;
  listening = true;
  diagnostics.subscribe('http.server.request.start', onRequestStart);
}

/** The slot of the request the code running now serves, if a plugin listens and it came through `node:http`. @internal */
export function currentSlot(): RequestSlot | undefined {
  return slots.getStore();
}
