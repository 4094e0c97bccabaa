/**
 * The host for adapters that answer on Node's raw response (express, plain node:http).
 */
import type { CancelledError, DeadlineExceededError } from '@deadline/core';
import { requestLogger } from './engine-paths.js';
import type { LineLogger } from './options.js';
import type { RequestHost, RequestState } from './request-deadline.js';
import { writeAnswer } from './respond.js';

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
      const answer = state.answerOf(error);
      // Inside the request's context, so lines the host logs while answering carry its trace.
      return state.context.run(writeAnswer, res, answer, error);
    },
  };
}
