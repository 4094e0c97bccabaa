/**
 * `@deadline/express` — express 4 and 5 middleware: every request runs inside its own deadline context,
 * enforced and logged. A thin translation of `@deadline/server` into express's middleware.
 * @packageDocumentation
 */

export type { DeadlineExceededBody, RequestBudget, RequestDeadline, RequestLine, RouteLimits } from '@deadline/server';
export { deadlineErrors } from './errors.js';
export { deadline, type ExpressDeadlineOptions, longLived } from './middleware.js';
