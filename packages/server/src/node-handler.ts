/**
 * For services without a framework: wrap a plain `node:http` request handler.
 */
import type { IncomingMessage, RequestListener, ServerResponse } from 'node:http';
import { ErrorCode, findDeadlineError } from '@deadline/core';
import { checkObject, findErrorWithCode, monotonicNow } from '@deadline/core/internal';
import { admitRequest } from './admission.js';
import { createParser, isLongLived, isTrusted, resolveBudget } from './budget.js';
import { requestLogger } from './engine-paths.js';
import { emitInContext, needsRequestContext, needsResponseContext } from './events-in-context.js';
import { type DeadlineServerOptions, type LineLogger, type ResolvedOptions, resolveOptions } from './options.js';
import { rawHost } from './raw-host.js';
import { type RequestDeadline, type RequestState, startRequest } from './request-deadline.js';
import { writeAnswer } from './respond.js';

/**
 * Options of {@link deadlineHandler}: the server options, plus where to log.
 *
 * @example
 * ```ts
 * const options: DeadlineHandlerOptions = { serviceName: 'orders', defaultMs: 2_000, logger: pino() };
 * ```
 */
export interface DeadlineHandlerOptions extends DeadlineServerOptions<IncomingMessage> {
  /** Logger for the end-of-request line (a pino logger fits). Default: none. */
  logger?: LineLogger | undefined;
}

/** The request as a wrapped handler sees it: `req.deadline` is set. @example `(req: DeadlineRequest, res) => res.end(String(req.deadline.remainingMs()))` */
export type DeadlineRequest = IncomingMessage & { deadline: RequestDeadline };

/**
 * Wraps a `node:http` request handler so that each request runs inside its own deadline context: budget from
 * the caller's headers or `defaultMs`, 504 when it runs out, work cancelled when the client leaves, one log line
 * per request. A returned promise that rejects with a deadline error answers 504 (499 for a cancellation);
 * a circuit breaker's refusal answers 503 with its `Retry-After`; any other rejection answers 500.
 *
 * @example
 * ```ts
 * import { createServer } from 'node:http';
 * import { deadlineHandler } from '@deadline/server';
 *
 * createServer(
 *   deadlineHandler(async (req, res) => {
 *     const stock = await fetch('http://inventory/stock', { signal: req.deadline.context.signal ?? null });
 *     res.end(await stock.text());
 *   }, { serviceName: 'orders', defaultMs: 2_000 }),
 * ).listen(3000);
 * ```
 */
export function deadlineHandler(
  handler: (req: DeadlineRequest, res: ServerResponse) => unknown,
  options?: DeadlineHandlerOptions,
): RequestListener {
  const resolved = resolveOptions<IncomingMessage>(options);
  const logger = checkObject('logger', options?.logger) as LineLogger | undefined;
  const host = rawHost(logger);
  const parser = createParser(resolved as ResolvedOptions<never>);
  const trust = resolved.trust;
  const admission = resolved.admission;

  return function handleWithDeadline(req: IncomingMessage, res: ServerResponse): void {
    const arrivedAt = monotonicNow();
    const headers = req.headers;
    const limits = isLongLived(resolved.longLived, req, headers, logger, resolved.hop)
      ? resolved.longLivedLimits
      : resolved.limits;
    const budget = resolveBudget(headers, isTrusted(trust, req, logger, resolved.hop), parser, limits);
    const state = startRequest(req, res, headers, resolved as never, host, budget, arrivedAt, limits);
    (req as DeadlineRequest).deadline = state;
    if (state.outcome !== undefined) return;
    // Without a router, a route is a method: the handler's requests told apart as far as can be known here.
    if (admission !== undefined && !admitRequest(admission, state, req, headers, req.method ?? 'GET', logger)) return;
    emitInContext(req, state, needsRequestContext);
    emitInContext(res, state, needsResponseContext);
    state.context.run(invoke, handler, req as DeadlineRequest, res, state);
  };
}

function invoke(
  handler: (req: DeadlineRequest, res: ServerResponse) => unknown,
  req: DeadlineRequest,
  res: ServerResponse,
  state: RequestState,
): void {
  let result: unknown;
  try {
    result = handler(req, res);
  } catch (error) {
    fail(state, req, res, error);
    return;
  }
  if (result instanceof Promise) result.catch((error: unknown) => fail(state, req, res, error));
}

/** `req` and `res` passed along: a handler may fail after the response closed, when the state has let go of them. */
function fail(state: RequestState, req: IncomingMessage, res: ServerResponse, error: unknown): void {
  const typed = findDeadlineError(error);
  state.recordError(typed);
  if (typed !== undefined) {
    const answer = state.answerOf(typed);
    if (writeAnswer(res, answer, typed)) state.answeredWith = answer.statusCode;
    return;
  }
  const refusal = findErrorWithCode(error, ErrorCode.CircuitOpen);
  if (refusal !== undefined && !res.headersSent) {
    // A circuit breaker refused the call: 503 with its Retry-After, not a 500.
    res.writeHead(refusal.statusCode, { 'content-type': 'text/plain; charset=utf-8', ...refusal.headers });
    res.end(refusal.message);
  } else if (!res.headersSent) {
    res.writeHead(500, { 'content-type': 'text/plain; charset=utf-8' });
    res.end('Internal Server Error');
  } else if (!res.writableEnded) {
    res.destroy(error instanceof Error ? error : undefined);
  }
  const logger = requestLogger(req, state.host.logger(state));
  logger?.warn({ err: error, hop: state.options.hop }, 'deadline: the handler failed');
}
