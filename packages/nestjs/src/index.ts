/**
 * `@deadline/nestjs` — a Nest module (on express or fastify): each request runs inside its own deadline context from
 * its arrival, answered 504 when it runs out through Nest's exception layer, cancelled when its client leaves,
 * logged once through Nest's `Logger`; `@Deadline()` gives a route its own limits.
 * @packageDocumentation
 */

export type {
  DeadlineExceededBody,
  RequestBudget,
  RequestDeadline,
  RequestLine,
  RouteLimits,
} from '@deadline/server';
export { Deadline } from './deadline.decorator.js';
export { DeadlineExceptionFilter } from './exception-filter.js';
export { DeadlineInterceptor } from './interceptor.js';
export { DeadlineModule, type DeadlineModuleAsyncOptions } from './module.js';
export type { DeadlineModuleOptions, NestRequest } from './options.js';
