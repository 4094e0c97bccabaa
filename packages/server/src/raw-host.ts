/**
 * The host for adapters that answer on Node's raw response (express, plain node:http).
 */
import type { CancelledError, DeadlineExceededError } from '@deadline/core';
import { monotonicNow } from '@deadline/core/internal';
import type { LineLogger } from './options.js';
import type { RequestHost, RequestState } from './request-deadline.js';
import { deadlineAnswer, writeAnswer } from './respond.js';
import { READS_OF_SWAPPED_REQUESTS_ARE_SLOW } from './swapped-requests.js';

/**
 * @internal Answers on `state.res` directly. Logs with `req.log` when a middleware put one there (pino-http),
 * else with `logger`.
 */
export function rawHost(logger: LineLogger | undefined): RequestHost {
  return {
    logger(state: RequestState): LineLogger | undefined {
      return requestLogger(state.req, logger);
    },
    answer(state: RequestState, error: DeadlineExceededError | CancelledError): boolean {
      const res = state.res;
      if (res === undefined) return false;
      const answer = deadlineAnswer(error, state.budget.budgetMs, monotonicNow() - state.arrivedAt, state.options.hop);
      // Inside the request's context, so lines the host logs while answering carry its trace.
      return state.context.run(writeAnswer, res, answer, error);
    },
  };
}

/**
 * @internal The logger for `req`'s lines: its own `log` (pino-http sets one on each request), else `fallback` — on
 * every Node, so that lines go to the same logger on each. On Node 20 and 22, `Object.hasOwn` first: on an express
 * request without one, the read walks its whole prototype chain with V8's caches missing (~10k instructions a
 * request on Node 20, callgrind). From Node 24 on the read is cached and `Object.hasOwn` the dearer (~0.2k a request,
 * express): it is asked only when there is a `log` to tell own from inherited.
 */
export function requestLogger(req: object | undefined, fallback: LineLogger | undefined): LineLogger | undefined {
  if (req === undefined) return fallback;
  if (READS_OF_SWAPPED_REQUESTS_ARE_SLOW) {
    return Object.hasOwn(req, 'log') ? ((req as { log?: LineLogger }).log ?? fallback) : fallback;
  }
  const log = (req as { log?: LineLogger }).log;
  return log !== undefined && Object.hasOwn(req, 'log') ? log : fallback;
}
