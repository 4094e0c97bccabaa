/**
 * The middleware. Mounted on the app it owns the request's deadline and runs the rest of the chain inside its
 * context; mounted again on a route (`@koa/router`) it narrows it to that route's limits (the earlier deadline
 * wins; one owner, one log line).
 */
import type { IncomingMessage } from 'node:http';
import { checkObject, monotonicNow } from '@deadline/core/internal';
import type { DeadlineServerOptions, LineLogger, RequestDeadline } from '@deadline/server';
import {
  admitRequest,
  budgetReader,
  createParser,
  isLongLived,
  LearnedRoutes,
  RequestState,
  rawHost,
  resolveOptions,
  startRequest,
} from '@deadline/server/internal';
import type { Context, Middleware, Next } from 'koa';
import { answerDeadlineError, quietKoaErrors } from './errors.js';
import { readInContext } from './stream-body.js';

declare module 'koa' {
  interface ExtendableContext {
    /** The request's deadline (set by `@deadline/koa`): its context, budget and remaining time. */
    deadline?: RequestDeadline | undefined;
  }
}

/**
 * Options of {@link deadline}: the server options (`trust` and `longLived` receive Node's request, `ctx.req`),
 * plus a logger for the end-of-request line when the request has no `req.log` (koa-pino-logger sets one).
 *
 * @example
 * ```ts
 * const options: KoaDeadlineOptions = { serviceName: 'orders', defaultMs: 2_000, logger: pino() };
 * ```
 */
export interface KoaDeadlineOptions extends DeadlineServerOptions<IncomingMessage> {
  /** Logger for the end-of-request line; `req.log` (koa-pino-logger, pino-http) is preferred when present. */
  logger?: LineLogger | undefined;
}

/**
 * Returns the middleware. Mount it before body parsers and routes: the budget is anchored when the request
 * reaches it, so a slow upload spends budget. A deadline error that escapes the routes — this hop's, a
 * downstream's 504, a call refused for lack of time — is answered here, 504 with `X-Deadline-Exceeded-By` (499
 * for a cancellation), and never reaches `app.on('error')`; every other error goes on as before.
 *
 * @example
 * ```ts
 * import Koa from 'koa';
 * import Router from '@koa/router';
 * import { deadline } from '@deadline/koa';
 *
 * const app = new Koa();
 * const router = new Router();
 * router.get('/orders/:id', async (ctx) => {
 *   ctx.body = { left: ctx.deadline?.remainingMs() };
 * });
 * app.use(deadline({ serviceName: 'orders', defaultMs: 2_000 }));
 * app.use(router.routes());
 * app.listen(3000);
 * ```
 */
export function deadline(options?: KoaDeadlineOptions): Middleware {
  const resolved = resolveOptions<IncomingMessage>(options);
  const logger = checkObject('logger', options?.logger) as LineLogger | undefined;
  const host = rawHost(logger);
  const parser = createParser(resolved as never);
  const budgetOf = budgetReader<IncomingMessage>(resolved, parser, logger);
  const admission = resolved.admission;
  // @koa/router names the route that answered on the context (`_matchedRoute`), once it ran.
  const routes = new LearnedRoutes<Context & { _matchedRoute?: unknown }>(
    (ctx) => (typeof ctx._matchedRoute === 'string' ? ctx._matchedRoute : undefined),
    (ctx) => (ctx.deadline as { longLived?: boolean } | undefined)?.longLived === true,
  );

  return function deadlineMiddleware(ctx: Context, next: Next): Promise<unknown> | undefined {
    const arrivedAt = monotonicNow();
    const req = ctx.req;
    const existing = ctx.deadline;
    if (existing instanceof RequestState) {
      // A route's own limits: narrow the running deadline, never extend it (a long-lived request has no default
      // budget to narrow).
      if (existing.longLived) return existing.context.run(next);
      const budget = budgetOf(req, req.headers, resolved.limits, existing.budget.trusted);
      return existing.narrow(budget, resolved.limits.minMs) ? existing.context.run(next) : undefined;
    }
    // Read once: on Node 20 each read of `req.headers` is a getter's call.
    const headers = req.headers;
    const limits = isLongLived(resolved.longLived, req, headers, logger, resolved.hop)
      ? resolved.longLivedLimits
      : resolved.limits;
    const budget = budgetOf(req, headers, limits);
    const state = startRequest(req, ctx.res, headers, resolved as never, host, budget, arrivedAt, limits);
    ctx.deadline = state;
    quietKoaErrors(ctx);
    // Refused (a budget below the route's minimum): answered already, nothing after this middleware runs.
    if (state.outcome !== undefined) return undefined;
    if (admission !== undefined) {
      const route = routes.of(req.method ?? 'GET', ctx.originalUrl, ctx.res, ctx);
      if (!admitRequest(admission, state, req, headers, route.key, logger, route.longLived)) return undefined;
    }
    return state.context.run(runRest, ctx, next, state);
  };
}

/**
 * The rest of the chain, inside the request's context: a deadline error it ends with is answered here; a streamed
 * body it leaves is read in the context. A `then` rather than an `async` function: one promise less a request, and
 * on Node 20 and 22 every promise made inside a context is a call to AsyncLocalStorage's hooks.
 */
function runRest(ctx: Context, next: Next, state: RequestState): Promise<void> {
  return next().then(
    () => readInContext(ctx.body, state),
    (error: unknown) => answerDeadlineError(ctx, state, error),
  );
}

/**
 * Marks one route long-lived — server-sent events, a long poll, a stream: mounted on the route, after the app's
 * {@link deadline} middleware, it lifts the default budget for that route's requests, so they are not answered
 * 504 nor cut. A caller's budget, if one came, still bounds the route's outgoing calls; the work is still
 * cancelled when the client leaves.
 *
 * @example
 * ```ts
 * import { PassThrough } from 'node:stream';
 * import { longLived } from '@deadline/koa';
 *
 * router.get('/orders/events', longLived(), (ctx) => {
 *   const events = new PassThrough();
 *   const timer = setInterval(() => events.write(`data: ${Date.now()}\n\n`), 1_000);
 *   ctx.req.on('close', () => clearInterval(timer));
 *   ctx.type = 'text/event-stream';
 *   ctx.body = events;
 * });
 * ```
 */
export function longLived(): Middleware {
  return function longLivedRoute(ctx: Context, next: Next): Promise<unknown> {
    const state = ctx.deadline;
    if (!(state instanceof RequestState)) return next();
    state.makeLongLived();
    return state.context.run(next);
  };
}
