/**
 * The least a deadline middleware for Koa can do per request while doing what `@deadline/koa` promises, by hand, for
 * the instruction counts: the model's framework-free half (minimum-deadlines.ts: the arrival, every budget header,
 * the trace, a heap and one shared timer answering 504, the response's end and the client's leaving, the end's log
 * line through `req.log` when a logger middleware put one there), and:
 * - the caller is asked about only through a `trust` predicate when the service gave one;
 * - a deadline already on the context is looked for (a route's second mount narrows it, never starts another);
 * - `ctx.deadline` is set, and the rest of the chain runs in the context;
 * - the rest of the chain is followed to its end: a deadline error it ends with is answered (504) rather than left
 *   to the app's catch-all and Koa's `'error'` event, and a streamed body it leaves is read in the context.
 * It leaves out what needs no code on this path (errors' details, checks of options, route limits).
 * A count of it is a floor under any middleware that keeps those promises, not a design.
 */
import type { AsyncLocalStorage } from 'node:async_hooks';
import type { IncomingMessage } from 'node:http';
import type { Context, Middleware, Next } from 'koa';
import { minimumDeadlines, now, type RequestScope } from './minimum-deadlines.js';

type Raw = Context['res'];

/**
 * The complete minimal deadline middleware.
 *
 * @example
 * ```ts
 * const app = new Koa();
 * app.use(completeKoaDeadlineMinimum());
 * app.use((ctx) => {
 *   ctx.body = { hello: 'world' };
 * });
 * ```
 */
export function completeKoaDeadlineMinimum(
  trust?: (req: IncomingMessage) => boolean,
): Middleware & { readonly als: AsyncLocalStorage<RequestScope<Raw>> } {
  const { als, start } = minimumDeadlines<Raw>({
    raw: (res) => res,
    answerDeadline: (res) => {
      if (!res.headersSent) res.writeHead(504, { 'content-type': 'application/json' }).end('{"error":"deadline"}');
    },
    logger: (res) => (res.req as { log?: { info(fields: object, message: string): void } }).log,
  });
  const rest = (ctx: Context, next: Next) =>
    next().then(
      () => {
        // A streamed body: its reads bound to the context (off this path: the body is an object).
        const body = ctx.body as { _read?: unknown } | null | undefined;
        if (typeof body?._read === 'function') throw new Error('not measured');
      },
      (error: { code?: unknown }) => {
        if (error?.code !== 'ERR_DEADLINE_EXCEEDED') throw error;
        ctx.status = 504;
      },
    );

  const middleware: Middleware = (ctx, next) => {
    const arrivedAt = now();
    const existing = (ctx as { deadline?: unknown }).deadline;
    // A route's second mount: the running deadline stays (narrowing it is off this path).
    if (existing !== undefined) return als.run(existing as never, next);
    const req = ctx.req;
    const trusted = trust?.(req) ?? false;
    const scope = start(req.headers, trusted, arrivedAt, ctx.res, req.socket);
    (ctx as { deadline?: unknown }).deadline = scope;
    return als.run(scope, rest, ctx, next);
  };
  // Its storage, for tests: whether the chain runs in the request's context.
  return Object.assign(middleware, { als });
}
