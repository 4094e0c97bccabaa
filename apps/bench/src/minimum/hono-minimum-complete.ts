/**
 * The least a deadline middleware for Hono on Node (`@hono/node-server`) can do per request while doing what
 * `@deadline/hono` promises, by hand, for the instruction counts: the model's framework-free half
 * (minimum-deadlines.ts: the arrival, every budget header, the trace, a heap and one shared timer answering 504 on
 * Node's response, the response's end and the client's leaving, the end's log line), and:
 * - the caller is asked about only through a `trust` predicate when the service gave one;
 * - a deadline already on the context is looked for (a route's second mount narrows it, never starts another);
 * - `c.var.deadline` is set (`c.set`), and the rest of the chain runs in the context;
 * - the rest of the chain is followed to its end: a deadline error an error handler other than the library's
 *   answered still gets the deadline's answer.
 * It leaves out what needs no code on this path (errors' details, checks of options, route limits).
 * A count of it is a floor under any middleware that keeps those promises, not a design.
 */
import type { AsyncLocalStorage } from 'node:async_hooks';
import type { IncomingMessage, ServerResponse } from 'node:http';
import type { HttpBindings } from '@hono/node-server';
import type { Context, MiddlewareHandler, Next } from 'hono';
import { minimumDeadlines, now, type RequestScope } from './minimum-deadlines.js';

type Env = { Bindings: HttpBindings; Variables: { deadline?: RequestScope<ServerResponse> } };

/**
 * The complete minimal deadline middleware.
 *
 * @example
 * ```ts
 * const app = new Hono();
 * app.use(completeHonoDeadlineMinimum());
 * app.get('/', (c) => c.json({ hello: 'world' }));
 * ```
 */
export function completeHonoDeadlineMinimum(
  trust?: (req: IncomingMessage) => boolean,
): MiddlewareHandler<Env> & { readonly als: AsyncLocalStorage<RequestScope<ServerResponse>> } {
  const { als, start } = minimumDeadlines<ServerResponse>({
    raw: (res) => res,
    answerDeadline: (res) => {
      if (!res.headersSent) res.writeHead(504, { 'content-type': 'application/json' }).end('{"error":"deadline"}');
    },
    logger: () => undefined,
  });
  const rest = (c: Context<Env>, next: Next) =>
    next().then(() => {
      // A deadline error answered by another error handler: the deadline's answer instead (off this path).
      if ((c.error as { code?: unknown } | undefined)?.code === 'ERR_DEADLINE_EXCEEDED') c.res = c.json({}, 504);
    });

  const middleware: MiddlewareHandler<Env> = (c, next) => {
    const arrivedAt = now();
    const existing = c.get('deadline');
    // A route's second mount: the running deadline stays (narrowing it is off this path).
    if (existing !== undefined) return als.run(existing, next);
    const req = c.env.incoming;
    const trusted = trust?.(req) ?? false;
    const scope = start(req.headers, trusted, arrivedAt, c.env.outgoing, req.socket);
    c.set('deadline', scope);
    return als.run(scope, rest, c, next);
  };
  // Its storage, for tests: whether the chain runs in the request's context.
  return Object.assign(middleware, { als });
}
