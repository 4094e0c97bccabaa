/**
 * The middleware, for Hono on Node (`@hono/node-server`). Mounted on the app it owns the request's deadline and runs
 * the rest of the chain inside its context; mounted again on a route it narrows it to that route's limits (the
 * earlier deadline wins; one owner, one log line). The request's budget, its client leaving and the answer at the
 * deadline are Node's: the request and response `@hono/node-server` hands the app (`c.env.incoming`, `c.env.outgoing`)
 * — Hono's own `c.req.raw.signal` does not fire reliably on Node (never in older versions, nor over HTTP/2).
 */
import type { IncomingMessage } from 'node:http';
import { checkObject, monotonicNow } from '@deadline/core/internal';
import type { DeadlineServerOptions, LineLogger, RequestDeadline } from '@deadline/server';
import {
  admitRequest,
  budgetReader,
  createParser,
  isLongLived,
  RequestState,
  rawHost,
  resolveOptions,
  startRequest,
} from '@deadline/server/internal';
import type { HttpBindings } from '@hono/node-server';
import { RESPONSE_ALREADY_SENT } from '@hono/node-server/utils/response';
import type { Context, MiddlewareHandler, Next } from 'hono';
import { answerAfterRoutes } from './errors.js';
import { warnOnceOffNode } from './off-node.js';

/** What a middleware that answered on Node's response itself resolves with: `@hono/node-server` writes nothing more. */
const ALREADY_SENT = Promise.resolve(RESPONSE_ALREADY_SENT);

/**
 * The context variables the middleware sets: `c.var.deadline`, the request's deadline.
 *
 * @example
 * ```ts
 * const app = new Hono<{ Bindings: HttpBindings; Variables: DeadlineVariables }>();
 * app.get('/', (c) => c.json({ left: c.var.deadline?.remainingMs() }));
 * ```
 */
export interface DeadlineVariables {
  /** The request's deadline (set by `@deadline/hono`): its context, budget and remaining time. */
  deadline?: RequestDeadline | undefined;
}

/**
 * The environment the middleware reads and writes: Node's request and response (`@hono/node-server`'s bindings) and
 * `c.var.deadline`. An app typed with it sees both.
 *
 * @example
 * ```ts
 * const app = new Hono<DeadlineEnv>();
 * ```
 */
export interface DeadlineEnv {
  Bindings: HttpBindings;
  Variables: DeadlineVariables;
}

/**
 * Options of {@link deadline}: the server options (`trust` and `longLived` receive Node's request,
 * `c.env.incoming`), plus a logger for the end-of-request line.
 *
 * @example
 * ```ts
 * const options: HonoDeadlineOptions = { serviceName: 'orders', defaultMs: 2_000, logger: pino() };
 * ```
 */
export interface HonoDeadlineOptions extends DeadlineServerOptions<IncomingMessage> {
  /** Logger for the end-of-request line; `req.log` (on Node's request) is preferred when present. */
  logger?: LineLogger | undefined;
}

/**
 * Returns the middleware. Mount it first (`app.use(deadline(…))`), before body-reading middleware and routes: the
 * budget is anchored when the request reaches it. Pair it with `app.onError(deadlineErrors())`, so that a deadline
 * error escaping a route is answered 504 (499 for a cancellation) before Hono's error handler logs it.
 *
 * @example
 * ```ts
 * import { serve } from '@hono/node-server';
 * import { Hono } from 'hono';
 * import { deadline, type DeadlineEnv, deadlineErrors } from '@deadline/hono';
 *
 * const app = new Hono<DeadlineEnv>();
 * app.use(deadline({ serviceName: 'orders', defaultMs: 2_000 }));
 * app.onError(deadlineErrors());
 * app.get('/orders/:id', (c) => c.json({ left: c.var.deadline?.remainingMs() }));
 * serve({ fetch: app.fetch, port: 3000 });
 * ```
 */
export function deadline(options?: HonoDeadlineOptions): MiddlewareHandler<DeadlineEnv> {
  const resolved = resolveOptions<IncomingMessage>(options);
  const logger = checkObject('logger', options?.logger) as LineLogger | undefined;
  const host = rawHost(logger);
  const parser = createParser(resolved as never);
  const budgetOf = budgetReader<IncomingMessage>(resolved, parser, logger);
  const admission = resolved.admission;

  return function deadlineMiddleware(c, next) {
    const arrivedAt = monotonicNow();
    const existing = c.get('deadline');
    if (existing instanceof RequestState) {
      // A route's own limits: narrow the running deadline, never extend it (a long-lived request has no default
      // budget to narrow). A refusal was written on Node's response already.
      if (existing.longLived) return existing.context.run(next);
      const req = existing.req as IncomingMessage;
      const budget = budgetOf(req, req.headers, resolved.limits, existing.budget.trusted);
      return existing.narrow(budget, resolved.limits.minMs) ? existing.context.run(next) : ALREADY_SENT;
    }
    const incoming = c.env?.incoming;
    const outgoing = c.env?.outgoing;
    if (incoming === undefined || outgoing === undefined) {
      warnOnceOffNode();
      return next();
    }
    // Read once: on Node 20 each read of `req.headers` is a getter's call.
    const headers = incoming.headers;
    const limits = isLongLived(resolved.longLived, incoming, headers, logger, resolved.hop)
      ? resolved.longLivedLimits
      : resolved.limits;
    const budget = budgetOf(incoming, headers, limits);
    const state = startRequest(incoming, outgoing, headers, resolved as never, host, budget, arrivedAt, limits);
    c.set('deadline', state);
    // Refused (a budget below the route's minimum): answered already, nothing after this middleware runs.
    if (state.outcome !== undefined) return ALREADY_SENT;
    if (admission !== undefined) {
      const route = routeOf(c);
      if (!admitRequest(admission, state, incoming, headers, route.key, logger, route.longLived)) return ALREADY_SENT;
    }
    return state.context.run(runRest, c as Context<DeadlineEnv>, next, state);
  };
}

/**
 * The rest of the chain, inside the request's context, then what is left to do once the routes are done. A `then`
 * rather than an `async` function: one promise less a request, and on Node 20 and 22 every promise made inside a
 * context is a call to AsyncLocalStorage's hooks.
 */
function runRest(c: Context<DeadlineEnv>, next: Next, state: RequestState): Promise<void> {
  return next().then(() => answerAfterRoutes(c, state));
}

/**
 * Marks one route long-lived — server-sent events, a long poll, a stream: mounted on the route, after the app's
 * {@link deadline} middleware, it lifts the default budget for that route's requests, so they are not answered
 * 504 nor cut. A caller's budget, if one came, still bounds the route's outgoing calls; the work is still
 * cancelled when the client leaves.
 *
 * @example
 * ```ts
 * import { streamSSE } from 'hono/streaming';
 * import { longLived } from '@deadline/hono';
 *
 * app.get('/orders/events', longLived(), (c) =>
 *   streamSSE(c, async (stream) => {
 *     while (!stream.aborted) {
 *       await stream.writeSSE({ data: String(Date.now()) });
 *       await stream.sleep(1_000);
 *     }
 *   }),
 * );
 * ```
 */
export function longLived(): MiddlewareHandler<DeadlineEnv> {
  const longLivedRoute: MiddlewareHandler<DeadlineEnv> = (c, next: Next) => {
    const state = c.get('deadline');
    if (!(state instanceof RequestState)) return next();
    state.makeLongLived();
    return state.context.run(next);
  };
  LONG_LIVED_ROUTES.add(longLivedRoute);
  return longLivedRoute;
}

/** The handlers {@link longLived} made: admission finds them among a request's matched routes before any runs. */
const LONG_LIVED_ROUTES = new WeakSet<object>();

/**
 * The route a request is of, for admission: Hono matches every handler before the first runs, so the route is
 * known here — the last one matched that is not a middleware (`app.use`, method `ALL`; `*` when none is, a 404) — and
 * so is whether it is long-lived (a {@link longLived} among its handlers).
 */
function routeOf(c: Context): { key: string; longLived: boolean } {
  // matchedRoutes is deprecated for hono/route's helper, which Hono before 4.7 lacks; the getter is in every 4.x.
  const routes = c.req.matchedRoutes;
  let key: string | undefined;
  let longLived = false;
  for (let i = routes.length - 1; i >= 0; i--) {
    const route = routes[i];
    if (route === undefined) continue;
    if (LONG_LIVED_ROUTES.has(route.handler)) longLived = true;
    if (key === undefined && route.method !== 'ALL') key = `${c.req.method} ${route.path}`;
  }
  return { key: key ?? `${c.req.method} *`, longLived };
}
