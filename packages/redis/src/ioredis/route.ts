/**
 * Which connection a blocking command blocks. A `Redis` client is one connection. A `Cluster` sends each
 * command to a node's connection, chosen by the slot of its keys: `CLIENT ID` and `CLIENT UNBLOCK` have no key,
 * so sent through the cluster they would reach an arbitrary node; they must go to the node that holds the
 * blocked connection. The slot is computed by ioredis's own `Command`, as the cluster computes it — loaded when a
 * cluster first needs it, so that a service on node-redis alone need not install ioredis.
 */

import { createRequire } from 'node:module';
import type { OutgoingCall } from '@deadline/core/internal';
import type { BlockingRoute } from '../blocking-call.js';
import { releaserOf } from '../release.js';
import { ioredisConnection } from './connection.js';
import { mustWaitForReady, untilClusterReady, untilReady } from './ready.js';
import type { ConnectionLike, RedisLike } from './types.js';

/** The parts of an ioredis `Cluster` that route a command. @internal */
interface ClusterLike extends RedisLike {
  isCluster: true;
  options: { keyPrefix?: string; scaleReads?: unknown };
  /** Slot → node keys (`host:port`), the master first. */
  slots: (string[] | undefined)[];
  nodes(role?: 'all' | 'master' | 'slave'): (ConnectionLike & { options: { host: string; port: number } })[];
}

/** @internal */
export function isCluster(redis: RedisLike): redis is ClusterLike {
  return (redis as { isCluster?: unknown }).isCluster === true;
}

/**
 * The connection `command` is sent on, or `undefined` when the cluster does not decide it by key: `WAIT` (no
 * key), `XREAD` when reads may go to replicas (`scaleReads`), or before the cluster knows its slots. Such a
 * command is still bounded on the server; it is only not released early.
 * @internal
 */
export function connectionOf(redis: RedisLike, command: string, args: unknown[]): ConnectionLike | undefined {
  // A `Redis` client is itself the connection.
  if (!isCluster(redis)) return redis as ConnectionLike;
  let slot: number | null;
  try {
    const prefix = redis.options.keyPrefix;
    Command ??= (createRequire(import.meta.url)('ioredis') as { Command: CommandClass }).Command;
    slot = new Command(command, args as never, prefix === undefined ? {} : { keyPrefix: prefix }).getSlot();
  } catch {
    return undefined;
  }
  if (slot === null) return undefined;
  // Writes (every blocking command but XREAD) always go to the slot's master; reads too unless scaleReads.
  const scaleReads = redis.options.scaleReads ?? 'master';
  if (command === 'xread' && scaleReads !== 'master') return undefined;
  const master = redis.slots[slot]?.[0];
  if (master === undefined) return undefined;
  return redis.nodes('master').find((node) => `${node.options.host}:${node.options.port}` === master);
}

type CommandClass = new (name: string, args: never, options: { keyPrefix?: string }) => { getSlot(): number | null };
let Command: CommandClass | undefined;

const routes = new WeakMap<RedisLike, BlockingRoute>();

/** How an ioredis client routes a blocking command (made once per client). @internal */
export function ioredisRoute(redis: RedisLike): BlockingRoute {
  let route = routes.get(redis);
  if (route === undefined) routes.set(redis, (route = routeOf(redis)));
  return route;
}

function routeOf(redis: RedisLike): BlockingRoute {
  const beforeWrite = async (call: OutgoingCall) => {
    if (mustWaitForReady(redis, call)) await untilReady(redis, call);
  };
  return {
    beforeRouting: async (call) => {
      await beforeWrite(call);
      // A cluster routes by its slot map: a blocking command waits for it, to know which node it blocks.
      if (isCluster(redis) && redis.status !== 'ready') await untilClusterReady(redis, call);
    },
    releaser: (command, args) => {
      const connection = connectionOf(redis, command, args);
      return connection === undefined ? undefined : releaserOf(connection, () => ioredisConnection(connection));
    },
    beforeWrite,
  };
}
