/**
 * `@deadline/hono` — Hono middleware for Node (`@hono/node-server`): each request runs inside its own deadline
 * context, answered 504 when it runs out, cancelled when its client leaves, logged once; `deadlineErrors()` answers
 * deadline errors in `app.onError`. A thin translation of `@deadline/server` into Hono.
 * @packageDocumentation
 */

export type {
  DeadlineExceededBody,
  RequestBudget,
  RequestDeadline,
  RequestLine,
  RouteLimits,
} from '@deadline/server';
export { deadlineErrors } from './errors.js';
export {
  type DeadlineEnv,
  type DeadlineVariables,
  deadline,
  type HonoDeadlineOptions,
  longLived,
} from './middleware.js';
