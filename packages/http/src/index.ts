/**
 * `@deadline/http` — outgoing HTTP inside a request's deadline: every call carries the remaining budget, is not
 * made without time left, and is cut off (socket closed) when the budget runs out or the request is cancelled.
 * @packageDocumentation
 */

export { createFetch, fetch } from './fetch.js';
export { type DispatcherOptions, installGlobalDispatcher } from './global-dispatcher.js';
export { deadlineInterceptor } from './interceptor.js';
export type { HttpDeadlineOptions } from './options.js';
export { describeTarget, type TargetRequest } from './target.js';
