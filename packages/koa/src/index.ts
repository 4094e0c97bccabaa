/**
 * `@deadline/koa` — Koa middleware (Koa 2 and 3, `@koa/router`): each request runs inside its own deadline context,
 * answered 504 when it runs out, cancelled when its client leaves, logged once. A thin translation of
 * `@deadline/server` into Koa.
 * @packageDocumentation
 */

export type {
  DeadlineExceededBody,
  RequestBudget,
  RequestDeadline,
  RequestLine,
  RouteLimits,
} from '@deadline/server';
export { deadline, type KoaDeadlineOptions, longLived } from './middleware.js';
