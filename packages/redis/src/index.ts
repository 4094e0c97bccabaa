/**
 * `@deadline/redis` — Redis under the request deadline, on ioredis or node-redis: commands not sent without time
 * left, each bounded by the remaining budget, blocking commands bounded on the server and released when the
 * request dies, nothing popped and lost.
 * @packageDocumentation
 */

export type { PipelineLike, RedisLike } from './ioredis/types.js';
export type {
  NodeRedisClientLike,
  NodeRedisClusterLike,
  NodeRedisPoolLike,
  NodeRedisSentinelLike,
} from './node-redis/types.js';
export type { RedisDeadlineOptions } from './options.js';
export { withDeadline } from './with-deadline.js';
