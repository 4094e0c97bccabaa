/**
 * The parts of a node-redis client used (`redis` / `@redis/client` v5 and v6 is a peer, not imported: these are
 * structural). `createClient()` hands out an object whose prototype is the client itself, reached as `_self`:
 * every command, whichever object it is called on (`client`, `client.withTypeMapping(…)`, a `multi()`), is sent
 * by `_self.sendCommand`, and batches by `_self._executeMulti` / `_executePipeline`.
 */
import type { EventEmitter } from 'node:events';

/** A command's arguments as node-redis sends them, its name first. @internal */
export type NodeRedisArgs = readonly (string | Buffer)[];

/** node-redis's per-command options (the parts read here). @internal */
export interface NodeRedisCommandOptions {
  abortSignal?: AbortSignal;
  asap?: boolean;
  [option: string]: unknown;
}

/** One queued command of a `multi()`. @internal */
export interface NodeRedisQueuedCommand {
  args: NodeRedisArgs;
}

/**
 * A node-redis client (`createClient()`), as the object it hands out or as its `_self`.
 *
 * @example
 * ```ts
 * import { createClient } from 'redis';
 * const client: NodeRedisClientLike = await createClient({ url: process.env.REDIS_URL }).connect();
 * ```
 */
export interface NodeRedisClientLike extends EventEmitter {
  readonly isOpen: boolean;
  readonly isReady: boolean;
  sendCommand(args: NodeRedisArgs, options?: NodeRedisCommandOptions): Promise<unknown>;
  duplicate(overrides?: object): NodeRedisClientLike;
  connect(): Promise<unknown>;
  destroy(): void;
  unref(): void;
}

/** The client itself, behind the objects it hands out. @internal */
export interface NodeRedisSelf extends NodeRedisClientLike {
  readonly options?: { socket?: object; name?: string };
  _executeMulti(commands: NodeRedisQueuedCommand[], ...rest: unknown[]): Promise<unknown>;
  _executePipeline(commands: NodeRedisQueuedCommand[], ...rest: unknown[]): Promise<unknown>;
}

/** The client behind `client`. @internal */
export function selfOf(client: NodeRedisClientLike): NodeRedisSelf {
  return (client as unknown as { _self: NodeRedisSelf })._self;
}

/**
 * A node-redis cluster (`createCluster()`), as far as `withDeadline()` needs to tell it apart.
 *
 * @example
 * ```ts
 * import { createCluster } from 'redis';
 * const cluster: NodeRedisClusterLike = await createCluster({ rootNodes: [{ url: 'redis://10.0.0.1:7000' }] }).connect();
 * ```
 */
export interface NodeRedisClusterLike extends EventEmitter {
  readonly isOpen: boolean;
  readonly _slots: object;
}

/**
 * A node-redis pool (`createClientPool()`), as far as `withDeadline()` needs to tell it apart.
 *
 * @example
 * ```ts
 * import { createClientPool } from 'redis';
 * const pool: NodeRedisPoolLike = await createClientPool({ url: process.env.REDIS_URL }, { maximum: 10 }).connect();
 * ```
 */
export interface NodeRedisPoolLike extends EventEmitter {
  execute(fn: (client: NodeRedisClientLike) => unknown): Promise<unknown>;
}

/**
 * A node-redis Sentinel (`createSentinel()`), as far as `withDeadline()` needs to tell it apart.
 *
 * @example
 * ```ts
 * import { createSentinel } from 'redis';
 * const sentinel: NodeRedisSentinelLike = await createSentinel({ name: 'mymaster', sentinelRootNodes }).connect();
 * ```
 */
export interface NodeRedisSentinelLike extends EventEmitter {
  readonly isOpen: boolean;
  getMasterNode(): unknown;
}

/** Which node-redis object `value` is, if any. @internal */
export function nodeRedisKind(value: unknown): 'client' | 'cluster' | 'pool' | 'sentinel' | undefined {
  const self = (value as { _self?: unknown } | null)?._self as Record<string, unknown> | undefined;
  if (typeof self !== 'object' || self === null) return undefined;
  const slots = self._slots as Record<string, unknown> | undefined;
  if (typeof slots?.nodeClient === 'function' && typeof slots.getClientAndSlotNumber === 'function') return 'cluster';
  if (typeof self.getMasterNode === 'function' && typeof self._execute === 'function') return 'sentinel';
  if (typeof self.execute === 'function' && typeof self.sendCommand === 'function') return 'pool';
  if (typeof self.sendCommand === 'function' && typeof self._executeMulti === 'function') return 'client';
  return undefined;
}
