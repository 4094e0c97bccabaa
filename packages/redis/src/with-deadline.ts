/**
 * `withDeadline(client)`: one entry point for both clients. An ioredis client is wrapped in a `Proxy`
 * (ioredis/client.ts); a node-redis client is bounded in place (node-redis/client.ts). Either way, inside a
 * deadline context each command is bounded by the request's remaining budget and blocking commands are released
 * when the request dies (blocking-call.ts); outside a context the client is as it was.
 */
import { InvalidArgumentError } from '@deadline/core';
import { boundIoredis } from './ioredis/client.js';
import type { RedisLike } from './ioredis/types.js';
import { boundNodeRedis } from './node-redis/client.js';
import {
  boundNodeRedisCluster,
  boundNodeRedisPool,
  boundNodeRedisSentinel,
  type NodeRedisClusterSelf,
  type NodeRedisPoolSelf,
  type NodeRedisSentinelSelf,
} from './node-redis/topology.js';
import {
  type NodeRedisClientLike,
  type NodeRedisClusterLike,
  type NodeRedisPoolLike,
  type NodeRedisSentinelLike,
  nodeRedisKind,
} from './node-redis/types.js';
import { type RedisDeadlineOptions, resolveRedisOptions } from './options.js';

/**
 * Bounds a Redis client by the request's deadline: an ioredis `Redis` or `Cluster` (wrapped in a `Proxy`, returned),
 * or a node-redis client, cluster, pool or Sentinel (`createClient()`, `createCluster()`, `createClientPool()`,
 * `createSentinel()`: bounded in place, returned). Inside a deadline context its commands are bounded by the
 * remaining budget and not sent without time left; blocking commands get a server-side timeout within it and are
 * released when the request dies; pipelines and `multi()` are bounded as a whole. Outside a context the client is
 * as it was. Anything else is refused with an `InvalidArgumentError`.
 *
 * @example
 * ```ts
 * import { withDeadline } from '@deadline/redis';
 * import { Redis } from 'ioredis';
 * import { createClient } from 'redis';
 *
 * const sessions = withDeadline(new Redis(process.env.REDIS_URL), { name: 'sessions' });
 * const cache = withDeadline(await createClient({ url: process.env.REDIS_URL }).connect(), { name: 'cache' });
 * app.get('/me', async (request) => {
 *   return JSON.parse((await sessions.get(`session:${request.headers.cookie}`)) ?? 'null');
 * });
 * ```
 */
export function withDeadline<
  R extends RedisLike | NodeRedisClientLike | NodeRedisClusterLike | NodeRedisPoolLike | NodeRedisSentinelLike,
>(redis: R, options?: RedisDeadlineOptions): R {
  const resolved = resolveRedisOptions(options);
  const self = (redis as { _self?: unknown } | undefined)?._self;
  switch (nodeRedisKind(redis)) {
    case 'client':
      return boundNodeRedis(redis as NodeRedisClientLike, resolved) as R;
    case 'cluster':
      boundNodeRedisCluster(self as NodeRedisClusterSelf, resolved);
      return redis;
    case 'pool':
      boundNodeRedisPool(self as NodeRedisPoolSelf, resolved);
      return redis;
    case 'sentinel':
      boundNodeRedisSentinel(self as NodeRedisSentinelSelf, resolved);
      return redis;
    default:
      if (!isIoredis(redis)) {
        throw new InvalidArgumentError(
          'redis',
          'an ioredis Redis or Cluster, or a node-redis client, cluster, pool or Sentinel',
          redis,
        );
      }
      return boundIoredis(redis, resolved) as R;
  }
}

/** Whether `value` has what the ioredis wrapper uses of a client. */
function isIoredis(value: unknown): value is RedisLike {
  const client = value as Partial<RedisLike> | null;
  return typeof client?.call === 'function' && typeof client.getBuiltinCommands === 'function';
}
