/**
 * The middleware. Mounted on the app it owns the request's deadline; mounted again on a router it narrows it
 * to that router's limits (the earlier deadline wins; one owner, one log line).
 */
import type { IncomingHttpHeaders, IncomingMessage, ServerResponse } from 'node:http';
import { checkObject, monotonicNow } from '@deadline/core/internal';
import type { DeadlineServerOptions, LineLogger, RequestDeadline } from '@deadline/server';
import {
  admitRequest,
  budgetReader,
  createParser,
  emitInContext,
  finishWithResponse,
  isLongLived,
  LearnedRoutes,
  needsRequestContext,
  needsResponseContext,
  noteRequestStarts,
  RequestState,
  rawHost,
  requestTrace,
  resolveOptions,
  takeStartedRequest,
} from '@deadline/server/internal';
import { attach, isExpressExchange, newExchange, stateOf } from './engine-paths.js';

/** The request as express gives it to a middleware; kept structural so express 4 and 5 types both fit. */
type Request = IncomingMessage & { deadline?: RequestDeadline };
type Next = (error?: unknown) => void;

declare global {
  namespace Express {
    interface Request {
      /** The request's deadline (set by `@deadline/express`): its context, budget and remaining time. */
      deadline?: RequestDeadline;
    }
  }
}

/**
 * Options of {@link deadline}: the server options, plus a logger for the end-of-request line when no
 * `req.log` (pino-http) is there.
 *
 * @example
 * ```ts
 * const options: ExpressDeadlineOptions = { serviceName: 'orders', defaultMs: 2_000, logger: pino() };
 * ```
 */
export interface ExpressDeadlineOptions extends DeadlineServerOptions<IncomingMessage> {
  /** Logger for the end-of-request line; `req.log` (pino-http) is preferred when present. */
  logger?: LineLogger | undefined;
}

/**
 * Returns the middleware. Mount it before your routes (and before body parsers: the budget is anchored when the
 * request reaches it, so a slow upload spends budget). Add {@link deadlineErrors} after your routes so deadline
 * errors thrown by handlers get the same 504 answer.
 *
 * @example
 * ```ts
 * import express from 'express';
 * import { deadline, deadlineErrors } from '@deadline/express';
 *
 * const app = express();
 * app.use(deadline({ serviceName: 'orders', defaultMs: 2_000 }));
 * app.get('/orders/:id', async (req, res) => {
 *   res.json({ left: req.deadline?.remainingMs() });
 * });
 * app.use(deadlineErrors());
 * ```
 */
export function deadline(options?: ExpressDeadlineOptions) {
  const resolved = resolveOptions<IncomingMessage>(options);
  const logger = checkObject('logger', options?.logger) as LineLogger | undefined;
  const host = rawHost(logger);
  const parser = createParser(resolved as never);
  // The headers and socket of each request, as the server starts it (see @deadline/server's engine-paths.ts).
  noteRequestStarts();
  const budgetOf = budgetReader<Request>(resolved as never, parser, logger);
  const admission = resolved.admission;
  const routes = new LearnedRoutes<Request & { route?: { path?: unknown }; baseUrl?: string }>(
    (req) => (typeof req.route?.path === 'string' ? `${req.baseUrl ?? ''}${req.route.path}` : undefined),
    (req) => (req.deadline as { longLived?: boolean } | undefined)?.longLived === true,
  );

  // Every property read on express's req or res is a slow lookup (each has a hidden class of its own, see
  // engine-paths.ts): each is read once, and `req.log` only for a `trust` predicate.
  return function deadlineMiddleware(req: Request, res: ServerResponse, next: Next): void {
    const arrivedAt = monotonicNow();
    const express = isExpressExchange(req, res);
    // On express's objects `req.deadline` is a getter over the same state: `stateOf` spares the lookup.
    const existing = express ? stateOf(req) : req.deadline;
    // Read as the server started the request when it is the one just started (nearly always): see
    // @deadline/server's engine-paths.ts.
    const started = takeStartedRequest(req);
    const headers = started === undefined ? req.headers : (started.headers as IncomingHttpHeaders);
    const socket = started === undefined ? req.socket : started.socket;
    if (existing instanceof RequestState) {
      // A router's own limits: narrow the running deadline, never extend it (a long-lived request has no
      // default budget to narrow).
      if (existing.longLived) existing.context.run(next);
      else if (
        existing.narrow(budgetOf(req, headers, resolved.limits, existing.budget.trusted), resolved.limits.minMs)
      ) {
        existing.context.run(next);
      }
      return;
    }
    const limits = isLongLived(resolved.longLived, req, headers, logger, resolved.hop)
      ? resolved.longLivedLimits
      : resolved.limits;
    const budget = budgetOf(req, headers, limits);
    const trace = requestTrace(headers);
    const exchange = express ? newExchange() : undefined;
    const state = new RequestState(req, res, resolved as never, host, budget, arrivedAt, trace, exchange);
    state.longLived = limits.longLived;
    if (express) {
      attach(req, state);
    } else {
      req.deadline = state;
      emitInContext(req, state, needsRequestContext);
      emitInContext(res, state, needsResponseContext);
    }
    finishWithResponse(req, res, state, socket);
    if (!state.admit(resolved.limits.minMs)) return;
    if (admission !== undefined) {
      const route = routes.of(req.method ?? 'GET', (req as { originalUrl?: string }).originalUrl ?? req.url, res, req);
      if (!admitRequest(admission, state, req, headers, route.key, logger, route.longLived)) return;
    }
    state.context.run(next);
  };
}

/**
 * Marks one route long-lived — server-sent events, a long poll, a stream: mounted on the route, after the app's
 * {@link deadline} middleware, it lifts the default budget for that route's requests, so they are not answered
 * 504 nor cut. A caller's budget, if one came, still bounds the route's outgoing calls; the work is still
 * cancelled when the client leaves. Websocket upgrades need nothing: they never reach express's routes, and
 * `deadline()` treats an upgrade request as long-lived.
 *
 * @example
 * ```ts
 * import { deadline, longLived } from '@deadline/express';
 *
 * app.use(deadline({ serviceName: 'orders', defaultMs: 2_000 }));
 * app.get('/orders/events', longLived(), (req, res) => {
 *   res.writeHead(200, { 'content-type': 'text/event-stream' });
 *   const timer = setInterval(() => res.write(`data: ${Date.now()}\n\n`), 1_000);
 *   res.on('close', () => clearInterval(timer));
 * });
 * ```
 */
export function longLived() {
  return function longLivedRoute(req: Request, res: ServerResponse, next: Next): void {
    const state = isExpressExchange(req, res) ? stateOf(req) : req.deadline;
    if (!(state instanceof RequestState)) {
      next();
      return;
    }
    state.makeLongLived();
    state.context.run(next);
  };
}
