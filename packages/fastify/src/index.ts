/**
 * `@deadline/fastify` — a fastify 5 plugin: every request runs inside its own deadline context, enforced and
 * logged. A thin translation of `@deadline/server` into fastify's hooks.
 * @packageDocumentation
 */

export type { DeadlineExceededBody, RequestBudget, RequestDeadline, RequestLine, RouteLimits } from '@deadline/server';
export { type FastifyDeadlineOptions, fastifyDeadline, fastifyDeadline as default } from './plugin.js';
