/**
 * `@deadline/redis` — ioredis under the request deadline: commands not sent without time left, each bounded by
 * the remaining budget, blocking commands bounded on the server and released when the request dies, nothing
 * popped and lost.
 * @packageDocumentation
 */

export type { RedisDeadlineOptions } from './options.js';
export type { PipelineLike, RedisLike } from './types.js';
export { withDeadline } from './with-deadline.js';
