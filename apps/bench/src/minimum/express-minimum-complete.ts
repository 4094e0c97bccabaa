/**
 * The least a deadline middleware for express can do per request while doing what `@deadline/express` promises,
 * by hand, for the instruction counts: the model's framework-free half (minimum-deadlines.ts: the arrival, every
 * budget header, the trace, a heap and one shared timer answering 504, the response's end and the client's
 * leaving, the end's log line through `req.log` when pino-http put one there), and:
 * - the caller is asked about only through a `trust` predicate when the service gave one;
 * - a deadline already on the request is looked for (a router's second mount narrows it, never starts another);
 * - `req.deadline` is set, and the rest of the chain runs in the context;
 * - the request's and the response's events that code continues from ('data', 'end', 'readable', 'error' on the
 *   request; 'drain', 'error' on the response) are emitted in the context when someone other than Node listens:
 *   `emit` wrapped once on the app's request and response prototypes (which events need it is the library's own
 *   test, `needsRequestContext` / `needsResponseContext`: a minimum would write the same lines).
 * `req.deadline` is an own property of the request: the cheapest way on Node 24 and 26, where this count is the
 * floor of the ≥ 0.95 goal (on Node 20 and 22 a property added to express's prototype-swapped request is a slow
 * runtime call and slows every later read of it: @deadline/express's engine-paths.ts). It leaves out what needs no
 * code on this path (errors, checks of options, route limits).
 * A count of it is a floor under any middleware that keeps those promises, not a design.
 */
import type { AsyncLocalStorage } from 'node:async_hooks';
import type { EventEmitter } from 'node:events';
import { needsRequestContext, needsResponseContext } from '@deadline/server/internal';
import type { Request, RequestHandler, Response } from 'express';
import { minimumDeadlines, now, type RequestScope } from './minimum-deadlines.js';

/**
 * The complete minimal deadline middleware.
 *
 * @example
 * ```ts
 * const app = express();
 * app.use(completeDeadlineMinimum());
 * app.get('/', (_req, res) => res.json({ hello: 'world' }));
 * ```
 */
export function completeDeadlineMinimum(
  trust?: (req: Request) => boolean,
): RequestHandler & { readonly als: AsyncLocalStorage<RequestScope<Response>> } {
  const { als, start } = minimumDeadlines<Response>({
    raw: (res) => res,
    answerDeadline: (res) => {
      if (!res.headersSent) res.status(504).json({ error: 'deadline exceeded' });
    },
    logger: (res) => (res.req as { log?: { info(fields: object, message: string): void } }).log,
  });
  /** Wraps `proto.emit`: the events `needsContext` names are emitted in the scope `scopeOf` finds. */
  const wrapEmit = (
    proto: object,
    needsContext: (emitter: EventEmitter, event: unknown) => boolean,
    scopeOf: (emitter: object) => unknown,
  ) => {
    const target = proto as { emit: EventEmitter['emit'] };
    const emit = target.emit;
    // `arguments` forwarded, not rest and spread: V8 passes them on without building an array.
    target.emit = function emitInContext(this: EventEmitter, event: string | symbol): boolean {
      if (needsContext(this, event)) {
        const scope = scopeOf(this);
        // biome-ignore lint/complexity/noArguments: the cheapest way to forward every argument (above)
        if (scope !== undefined) return als.run(scope as never, Reflect.apply, emit, this, arguments) as boolean;
      }
      // biome-ignore lint/complexity/noArguments: the cheapest way to forward every argument (above)
      return Reflect.apply(emit, this, arguments) as boolean;
    };
  };
  const scopeOfRequest = (req: object) => (req as { deadline?: unknown }).deadline;
  const scopeOfResponse = (res: object) => ((res as Response).req as { deadline?: unknown }).deadline;
  let wrapped = false;

  const middleware: RequestHandler = (req, res, next) => {
    const arrivedAt = now();
    const existing = (req as { deadline?: unknown }).deadline;
    if (existing !== undefined) {
      // A router's second mount: the running deadline stays (narrowing it is off this path).
      als.run(existing as never, next);
      return;
    }
    const trusted = trust?.(req) ?? false;
    const scope = start(req.headers, trusted, arrivedAt, res, req.socket);
    (req as { deadline?: unknown }).deadline = scope;
    // One app here: its prototypes are wrapped at its first request (a library checks which app each request is of).
    if (!wrapped) {
      wrapped = true;
      wrapEmit(Object.getPrototypeOf(req) as object, needsRequestContext, scopeOfRequest);
      wrapEmit(Object.getPrototypeOf(res) as object, needsResponseContext, scopeOfResponse);
    }
    als.run(scope, next);
  };
  // Its storage, for tests: whether the chain and the events run in the request's context.
  return Object.assign(middleware, { als });
}
