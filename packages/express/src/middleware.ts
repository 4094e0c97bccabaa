/**
 * The middleware. Mounted on the app it owns the request's deadline; mounted again on a router it narrows it
 * to that router's limits (the earlier deadline wins; one owner, one log line).
 */
import type { IncomingMessage, ServerResponse } from 'node:http';
import { checkObject, monotonicNow } from '@deadline/core/internal';
import type { DeadlineServerOptions, LineLogger, RequestDeadline } from '@deadline/server';
import {
  createParser,
  emitInContext,
  isTrusted,
  REQUEST_EVENTS,
  RESPONSE_EVENTS,
  RequestState,
  rawHost,
  resolveBudget,
  resolveOptions,
  startRequest,
} from '@deadline/server/internal';
import { attach, stateOf } from './prototypes.js';

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
  const parse = createParser(resolved as never);
  const trust = resolved.trust;

  return function deadlineMiddleware(req: Request, res: ServerResponse, next: Next): void {
    const trusted = isTrusted(trust, req, (req as { log?: LineLogger }).log ?? logger, resolved.hop);
    const existing = stateOf(req) ?? req.deadline;
    if (existing instanceof RequestState) {
      // A router's own limits: narrow the running deadline, never extend it.
      if (existing.narrow(resolveBudget(req.headers, trusted, parse, resolved.limits), resolved.limits.minMs)) {
        existing.context.run(next);
      }
      return;
    }
    const arrivedAt = monotonicNow();
    const budget = resolveBudget(req.headers, trusted, parse, resolved.limits);
    const state = startRequest(req, res, resolved as never, host, budget, arrivedAt);
    if (!attach(req, res, state)) {
      // Not express's objects (plain connect, a test double): wire this request's own objects instead.
      req.deadline = state;
      emitInContext(req, state, REQUEST_EVENTS);
      emitInContext(res, state, RESPONSE_EVENTS);
    }
    if (state.outcome !== undefined) return;
    state.context.run(next);
  };
}
