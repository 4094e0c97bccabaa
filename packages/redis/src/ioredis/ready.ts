/**
 * Waiting for a reconnecting client within the call's budget, rather than leaving the command in ioredis's
 * offline queue, which would send it whenever the server comes back — long after anyone waits.
 */
import { nextReady, type OutgoingCall } from '@deadline/core/internal';
import type { RedisLike } from './types.js';

/** Statuses in which a command goes out (or ioredis answers it at once) instead of into the offline queue. */
const READY_OR_IDLE = new Set(['ready', 'wait', 'end', 'close']);

/** Whether a command under a deadline must wait for the client before it is sent. @internal */
export function mustWaitForReady(redis: RedisLike, call: OutgoingCall): boolean {
  return call.timeoutMs !== undefined && !READY_OR_IDLE.has(redis.status);
}

/**
 * Resolves when the client is ready (or ended), or the call stops first (the caller then checks the stop).
 * @internal
 */
export function untilReady(redis: RedisLike, call: OutgoingCall): Promise<void> {
  return call.race(() => nextReady(redis)).catch(() => {});
}

/** As {@link untilReady}, first starting a lazy cluster's connection, as its own first command would. @internal */
export function untilClusterReady(redis: RedisLike, call: OutgoingCall): Promise<void> {
  if (redis.status === 'wait') redis.connect().catch(() => {});
  return untilReady(redis, call);
}
