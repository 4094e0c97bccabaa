/**
 * `@deadline/server` — the server side of a hop on `node:http`: each request in its own deadline context,
 * answered 504 when it runs out, cancelled when its client leaves, logged once. `@deadline/fastify` and
 * `@deadline/express` are thin translations of it; `deadlineHandler` serves apps without a framework.
 * @packageDocumentation
 */

export type { AdmissionOptions } from '@deadline/core';
export type { RequestBudget } from './budget.js';
export { REQUEST_END_CHANNEL } from './diagnostics.js';
export { type DeadlineHandlerOptions, type DeadlineRequest, deadlineHandler } from './node-handler.js';
export type {
  DeadlineAnswerDetails,
  DeadlineAnswerShape,
  DeadlineServerOptions,
  ExpiredEvent,
  LineLogger,
  RouteLimits,
} from './options.js';
export type { RequestDeadline, RequestLine, RequestOutcome } from './request-deadline.js';
export type { DeadlineAnswer, DeadlineExceededBody, OverloadedBody } from './respond.js';
