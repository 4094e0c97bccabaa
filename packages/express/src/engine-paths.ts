/**
 * @deadline/express's engine-specific fast paths, all of them, and nothing else: how the
 * adapter goes around V8's handling of express's prototype-swapped objects, and the variants it keeps per Node.
 * The rule: a path lives here only if it exists because of a particular engine or Node version; each says what it
 * does, why (the measurement that keeps it), and `Delete when:` — the condition under which it can go. The rest of
 * the package (middleware.ts, errors.ts) calls in through `isExpressExchange`, `newExchange`, `attach` and
 * `stateOf`; a request these do not recognise (plain connect, a test double) takes the middleware's generic path.
 * The Node version itself is told by @deadline/server's `READS_OF_SWAPPED_REQUESTS_ARE_SLOW` (its engine-paths.ts).
 *
 * The shared prototypes. Where express keeps its request and response extensions: every app's `app.request`
 * inherits from the shared `express.request` (and likewise for responses), express's documented place to extend
 * them.
 *
 * Why not set `req.deadline` and wrap `req.emit` on each request object: express changes the prototype of every
 * req and res (`setPrototypeOf` to `app.request`), after which V8 cannot share hidden classes between them, and
 * on Node 20 and 22 each new own property costs a slow runtime call, then slows every later property access on
 * that object. Counted with callgrind, that was most of this middleware's cost. Defined once on the shared
 * prototypes, with the per-request state in a WeakMap there (one property under a symbol from Node 24 on, where it
 * is cheap: see STATE_ON_REQUEST), it is paid once per process. For the same reason the closes that let go of the
 * WeakMap's entry are seen in the wrapped `emit` rather than through a `close` listener added to each response
 * (the request's end itself is @deadline/server's response-end.ts).
 *
 * Delete when (the shared prototypes: sharedPrototype, patchRequest, patchResponse, recognise, the wrapped `emit`s,
 * isExpressExchange): express no longer swaps the prototypes of its req and res, or every supported V8 gives an
 * object it swapped a shared hidden class — then the middleware's generic path (`req.deadline` set, `emit` wrapped
 * per request, as for plain connect) serves express too. Not yet with V8 13 (Node 24): it made adding a property
 * to such an object cheap, but the per-request `emit` wrappers were not measured against these there. The Node 20
 * and 22 variants below go sooner, each with its own condition.
 */

import type { EventEmitter } from 'node:events';
import { IncomingMessage, ServerResponse } from 'node:http';
import type { RequestDeadline } from '@deadline/server';
import {
  needsRequestContext,
  needsResponseContext,
  READS_OF_SWAPPED_REQUESTS_ARE_SLOW,
  type RequestState,
} from '@deadline/server/internal';

/**
 * Where each request's state is kept, for `req.deadline` and the event wrappers. From Node 24 on, in a property of
 * the request under a symbol of ours: V8 adds it to express's prototype-swapped request at little cost there, and
 * it goes with the request (counted with callgrind: ~2k instructions a request less than the WeakMap on Node 24
 * and 26). On Node 20 and 22 that property is a slow runtime call that also slows every later read of the
 * request (3k to 43k more), so there the state lives in a WeakMap (below).
 *
 * Delete when: Node 22 leaves support (April 2027) — with it `states`, `requestEmitCountingCloses`,
 * `responseEmitCountingCloses`, `closed`, `ExpressExchange`'s count, and the Node 20 and 22 arm of each selection
 * below (`newExchange`, `isExpressExchange`, `attach`, `stateOf`, patchRequest's and patchResponse's).
 */
const STATE_ON_REQUEST = !READS_OF_SWAPPED_REQUESTS_ARE_SLOW;
const kState = Symbol('@deadline/express request state');
type WithState = { [kState]?: RequestState };

/**
 * Node 20 and 22: each request's state, from the middleware until the request and the response have both closed
 * (their `close` listeners included). The state lets go of req and res when the response is over (see
 * RequestState.req), so no value reaches its key.
 *
 * Delete when: Node 22 leaves support (April 2027; see STATE_ON_REQUEST).
 */
const states = new WeakMap<object, RequestState>();
const patched = new WeakSet<object>();

type Emit = (this: EventEmitter, event: string | symbol, ...args: unknown[]) => boolean;

/** The app prototypes of the last express exchange seen, and the `emit` its objects have (see isExpressExchange). */
let lastRequestApp: object | undefined;
let lastResponseApp: object | undefined;
// Until an app is seen: a function no object's `emit` is (a test double without one must not match).
let lastRequestEmit: unknown = () => false;
let lastResponseEmit: unknown = lastRequestEmit;

/**
 * express's shared `express.request` / `express.response` behind an app's (`appProto`, the prototype of a req or
 * res), or undefined if this is not express.
 */
function sharedPrototype(appProto: object | null, nodeProto: object): object | undefined {
  if (appProto === null || !Object.hasOwn(appProto, 'app')) return undefined;
  const shared = Object.getPrototypeOf(appProto) as object | null;
  return shared === null || shared === nodeProto ? undefined : shared;
}

function patchRequest(proto: object): void {
  Object.defineProperty(proto, 'deadline', {
    configurable: true,
    get(this: object): RequestDeadline | undefined {
      return stateOf(this);
    },
    // Someone else's `req.deadline = …` must not throw: it becomes that request's own property, as before.
    set(this: object, value: unknown) {
      Object.defineProperty(this, 'deadline', { value, writable: true, configurable: true, enumerable: true });
    },
  });
  const target = proto as { emit: Emit };
  target.emit = STATE_ON_REQUEST ? requestEmit(target.emit) : requestEmitCountingCloses(target.emit);
}

function patchResponse(proto: object): void {
  const target = proto as { emit: Emit };
  target.emit = STATE_ON_REQUEST ? responseEmit(target.emit) : responseEmitCountingCloses(target.emit);
}

/*
 * The wrapped `emit`s. `arguments` forwarded, not a rest parameter and a spread: V8 passes them on without building
 * an array. From Node 24 on they are no more than the context's test, small enough that V8 inlines them where Node
 * emits and Node's own `emit` into them; the closes' branch of Node 20 and 22 kept that from happening (callgrind,
 * express on Node 24 and 26: ~0.15k instructions a request each).
 */

/** The request's `emit`: the events code continues from are emitted in the request's context. */
function requestEmit(emit: Emit): Emit {
  return function emitInRequestContext(this: EventEmitter, event: string | symbol): boolean {
    if (needsRequestContext(this, event)) {
      const state = (this as WithState)[kState];
      // biome-ignore lint/complexity/noArguments: forwarded as they came (above)
      if (state !== undefined) return state.context.run(Reflect.apply, emit, this, arguments) as boolean;
    }
    // biome-ignore lint/complexity/noArguments: forwarded as they came (above)
    return Reflect.apply(emit, this, arguments) as boolean;
  };
}

/** The response's `emit`: as the request's, for the response's events (in its request's context). */
function responseEmit(emit: Emit): Emit {
  return function emitInResponseContext(this: EventEmitter, event: string | symbol): boolean {
    if (needsResponseContext(this, event)) {
      const state = ((this as ServerResponse).req as WithState)[kState];
      // biome-ignore lint/complexity/noArguments: forwarded as they came (above)
      if (state !== undefined) return state.context.run(Reflect.apply, emit, this, arguments) as boolean;
    }
    // biome-ignore lint/complexity/noArguments: forwarded as they came (above)
    return Reflect.apply(emit, this, arguments) as boolean;
  };
}

/**
 * Node 20 and 22: the request's `emit`, which also counts its `close` (see closed).
 * Delete when: Node 22 leaves support (April 2027; see STATE_ON_REQUEST).
 */
function requestEmitCountingCloses(emit: Emit): Emit {
  return function emitInRequestContext(this: EventEmitter, event: string | symbol): boolean {
    if (event === 'close') {
      // Not in the context (as for the response: bookkeeping listeners, on every request), then counted.
      const state = states.get(this);
      try {
        // biome-ignore lint/complexity/noArguments: forwarded as they came (above)
        return Reflect.apply(emit, this, arguments) as boolean;
      } finally {
        if (state !== undefined) closed(this, state);
      }
    }
    const state = needsRequestContext(this, event) ? states.get(this) : undefined;
    // biome-ignore lint/complexity/noArguments: forwarded as they came (above)
    if (state === undefined) return Reflect.apply(emit, this, arguments) as boolean;
    // biome-ignore lint/complexity/noArguments: forwarded as they came (above)
    return state.context.run(Reflect.apply, emit, this, arguments) as boolean;
  };
}

/**
 * Node 20 and 22: the response's `emit`, which also counts its `close` (see closed).
 * Delete when: Node 22 leaves support (April 2027; see STATE_ON_REQUEST).
 */
function responseEmitCountingCloses(emit: Emit): Emit {
  return function emitInResponseContext(this: EventEmitter, event: string | symbol): boolean {
    if (event === 'close') {
      const req = (this as ServerResponse).req;
      // Not in the context, then counted. The request has ended by now (response-end.ts: the server's finish, or
      // the connection's close, heard first), so its listeners read `req.deadline.outcome` as it ended.
      const state = states.get(req);
      try {
        // biome-ignore lint/complexity/noArguments: forwarded as they came (above)
        return Reflect.apply(emit, this, arguments) as boolean;
      } finally {
        if (state !== undefined) closed(req, state);
      }
    }
    const state = needsResponseContext(this, event) ? states.get((this as ServerResponse).req) : undefined;
    // biome-ignore lint/complexity/noArguments: forwarded as they came (above)
    if (state === undefined) return Reflect.apply(emit, this, arguments) as boolean;
    // biome-ignore lint/complexity/noArguments: forwarded as they came (above)
    return state.context.run(Reflect.apply, emit, this, arguments) as boolean;
  };
}

/**
 * What express's request keeps beside its state: how many of its request and its response have closed.
 * Delete when: Node 22 leaves support (April 2027): only the WeakMap's entries are counted.
 */
export interface ExpressExchange {
  closes: number;
}

/**
 * A new request's {@link ExpressExchange}: counted only where the state is a WeakMap entry (Node 20, 22). One function
 * per Node (see attach).
 *
 * Delete when: Node 22 leaves support (April 2027) — then no `hostData` at all (the middleware passes `undefined`).
 * @internal
 */
export const newExchange: () => ExpressExchange | undefined = STATE_ON_REQUEST
  ? () => undefined
  : () => ({ closes: 0 });

/**
 * The request or the response has closed, its `close` listeners run: after both, the entry goes. Left for the
 * collector to clear, entries of finished requests piled up in the WeakMap between collections, and setting one
 * cost ~8k instructions per request on Node 24 (callgrind, express: 141k → 133k). Both, because either may close
 * first (the request after the response on Node 20, before it on Node 24), and the listeners of both read
 * `req.deadline` or run in the request's context.
 *
 * Delete when: Node 22 leaves support (April 2027): from Node 24 on the state goes with the request.
 */
function closed(req: object, state: RequestState): void {
  // Kept when this hop answered (504, 499): a handler's late failure, reaching deadlineErrors() after the close,
  // is recognised by it and dropped quietly.
  if (++(state.hostData as ExpressExchange).closes === 2 && state.answeredWith === undefined) states.delete(req);
}

/**
 * Whether `req` and `res` are express's objects, whose shared prototypes then carry `req.deadline`, the event
 * wrappers and the response's end (patched on first sight). When not (plain connect, a test double), the caller
 * wires the request's own objects instead.
 *
 * Delete when: the variant of Node 20 and 22 (by prototypes) as the selection's arm, when Node 22 leaves support
 * (April 2027): then `isExpressExchange` is `isExpressExchangeByEmit`, whose fallback keeps the comparison of
 * prototypes for an app not seen last.
 * @internal
 */
export const isExpressExchange: (req: IncomingMessage, res: ServerResponse) => boolean = STATE_ON_REQUEST
  ? isExpressExchangeByEmit
  : isExpressExchangeByPrototypes;

// Nearly always an exchange of the app seen last, whose prototypes were checked and patched then. One function per
// Node, each small: V8 inlines it where a request starts, within the budget it spends there (see
// isExpressExchangeByEmit).

/**
 * From Node 24 on: known by the `emit` its objects have (ours, unless wrapped after us), a load V8 caches, where each
 * `getPrototypeOf` of express's objects is a runtime call (two a request, ~0.3k instructions on Node 24, callgrind).
 * Not a mark of ours on the shared prototypes: a symbol-keyed property added to them sent the stores of Node's
 * EventEmitter constructor megamorphic (~0.4k a request, V8's --log-ic).
 */
function isExpressExchangeByEmit(req: IncomingMessage, res: ServerResponse): boolean {
  if (req.emit === lastRequestEmit && res.emit === lastResponseEmit) return true;
  return isExpressExchangeByPrototypes(req, res);
}

/**
 * Node 20 and 22: the `emit` load walks the prototype chain uncached there, and the prototypes are compared. From
 * Node 24 on, the fallback of isExpressExchangeByEmit. Stays (as that fallback) when Node 22 leaves support.
 */
function isExpressExchangeByPrototypes(req: IncomingMessage, res: ServerResponse): boolean {
  if (Object.getPrototypeOf(req) === lastRequestApp && Object.getPrototypeOf(res) === lastResponseApp) return true;
  return recognise(req, res);
}

/** {@link isExpressExchange} for an app not seen last: checks it, and patches its shared prototypes on first sight. */
function recognise(req: IncomingMessage, res: ServerResponse): boolean {
  const reqApp = Object.getPrototypeOf(req) as object | null;
  const resApp = Object.getPrototypeOf(res) as object | null;
  const reqProto = sharedPrototype(reqApp, IncomingMessage.prototype);
  const resProto = sharedPrototype(resApp, ServerResponse.prototype);
  if (reqProto === undefined || resProto === undefined) return false;
  if (!patched.has(reqProto)) {
    patched.add(reqProto);
    patchRequest(reqProto);
  }
  if (!patched.has(resProto)) {
    patched.add(resProto);
    patchResponse(resProto);
  }
  lastRequestApp = reqApp as object;
  lastResponseApp = resApp as object;
  // What the app's objects inherit, not this request's own: one with an `emit` of its own (wrapped per request by
  // someone) is then known by its prototypes, and no request's closure is kept here.
  lastRequestEmit = (reqApp as { emit?: unknown }).emit;
  lastResponseEmit = (resApp as { emit?: unknown }).emit;
  return true;
}

// newExchange, attach and stateOf: one function per Node, as isExpressExchange. With the branch on the Node version
// inside, each was 30 to 37 bytes of bytecode, counted against the 920 V8 inlines into a request's start; one branch
// alone is under the 27 bytes V8 inlines without counting (--trace-turbo-inlining, Node 26: with
// request-deadline.ts's declared fields, enough room for RequestState's constructor). Delete when (each one's arm of
// Node 20 and 22, and so the selection): Node 22 leaves support (April 2027).

/** Attaches `state` to express's `req` (see {@link isExpressExchange}). @internal */
export const attach: (req: IncomingMessage, state: RequestState) => void = STATE_ON_REQUEST
  ? (req, state) => {
      (req as WithState)[kState] = state;
    }
  : (req, state) => {
      states.set(req, state);
    };

/** The state attached to `req`, if any. @internal */
export const stateOf: (req: object) => RequestState | undefined = STATE_ON_REQUEST
  ? (req) => (req as WithState)[kState]
  : (req) => states.get(req);
