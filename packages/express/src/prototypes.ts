/**
 * Where express keeps its request and response extensions: every app's `app.request` inherits from the shared
 * `express.request` (and likewise for responses), express's documented place to extend them.
 *
 * Why not set `req.deadline` and wrap `req.emit` on each request object: express changes the prototype of every
 * req and res (`setPrototypeOf` to `app.request`), after which V8 cannot share hidden classes between them, and
 * each new own property costs a slow runtime call, then slows every later property access on that object. Counted
 * with callgrind, that was most of this middleware's cost. Defined once on the shared prototypes, with the
 * per-request state in a WeakMap, it is paid once per process.
 */

import type { EventEmitter } from 'node:events';
import { IncomingMessage, ServerResponse } from 'node:http';
import type { RequestDeadline } from '@deadline/server';
import { needsContext, REQUEST_EVENTS, RESPONSE_EVENTS, type RequestState } from '@deadline/server/internal';

/** Each request's state, for `req.deadline` and the event wrapper. Entries go with their request. */
const states = new WeakMap<object, RequestState>();
const patched = new WeakSet<object>();

/** express's shared `express.request` / `express.response` behind an app's, or undefined if this is not express. */
function sharedPrototype(object: object, nodeProto: object): object | undefined {
  const appProto = Object.getPrototypeOf(object) as object | null;
  if (appProto === null || !Object.hasOwn(appProto, 'app')) return undefined;
  const shared = Object.getPrototypeOf(appProto) as object | null;
  return shared === null || shared === nodeProto ? undefined : shared;
}

function wrapEmit(
  proto: object,
  events: ReadonlySet<string | symbol>,
  stateOf: (self: object) => RequestState | undefined,
) {
  const target = proto as { emit: (...args: unknown[]) => boolean };
  const emit = target.emit;
  target.emit = function emitInRequestContext(this: EventEmitter, ...args: unknown[]): boolean {
    const state = needsContext(this, args[0], events) ? stateOf(this) : undefined;
    if (state === undefined) return Reflect.apply(emit, this, args) as boolean;
    return state.context.run(Reflect.apply, emit, this, args) as boolean;
  };
}

/**
 * Attaches `state` to `req` and `res`: `req.deadline`, and their stream events emitted in its context.
 * Returns false when these are not express objects (the caller falls back to per-object wiring).
 * @internal
 */
export function attach(req: IncomingMessage, res: ServerResponse, state: RequestState): boolean {
  const reqProto = sharedPrototype(req, IncomingMessage.prototype);
  const resProto = sharedPrototype(res, ServerResponse.prototype);
  if (reqProto === undefined || resProto === undefined) return false;
  if (!patched.has(reqProto)) {
    patched.add(reqProto);
    Object.defineProperty(reqProto, 'deadline', {
      configurable: true,
      get(this: object): RequestDeadline | undefined {
        return states.get(this);
      },
      // Someone else's `req.deadline = …` must not throw: it becomes that request's own property, as before.
      set(this: object, value: unknown) {
        Object.defineProperty(this, 'deadline', { value, writable: true, configurable: true, enumerable: true });
      },
    });
    wrapEmit(reqProto, REQUEST_EVENTS, (self) => states.get(self));
  }
  if (!patched.has(resProto)) {
    patched.add(resProto);
    wrapEmit(resProto, RESPONSE_EVENTS, (self) => states.get((self as ServerResponse).req));
  }
  states.set(req, state);
  return true;
}

/** The state attached to `req`, if any. @internal */
export function stateOf(req: object): RequestState | undefined {
  return states.get(req);
}
