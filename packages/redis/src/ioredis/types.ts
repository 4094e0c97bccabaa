/** The parts of an ioredis client used (ioredis is a peer, not imported: these are structural). */
import type { EventEmitter } from 'node:events';

/**
 * An ioredis client, a `Redis` or a `Cluster`: the generic `call`, `callBuffer`, its status and events.
 *
 * @example
 * ```ts
 * import Redis from 'ioredis';
 * const client: RedisLike = new Redis(process.env.REDIS_URL);
 * ```
 */
export interface RedisLike extends EventEmitter {
  status: string;
  call(command: string, ...args: unknown[]): Promise<unknown>;
  callBuffer(command: string, ...args: unknown[]): Promise<unknown>;
  getBuiltinCommands(): string[];
  connect(): Promise<void>;
  disconnect(): void;
  pipeline(commands?: unknown[][]): PipelineLike;
  multi(commands?: unknown[][] | { pipeline?: boolean }): PipelineLike;
}

/**
 * An ioredis `Pipeline` (also what `multi()` returns): commands queue here and go out on `exec()`.
 *
 * @example
 * ```ts
 * const [[, a], [, b]] = (await redis.pipeline().get('a').get('b').exec()) ?? [];
 * ```
 */
export interface PipelineLike {
  exec(callback?: never): Promise<[Error | null, unknown][] | null>;
}

/** One server connection: a `Redis` client, or a node's inside a `Cluster`. @internal */
export interface ConnectionLike extends RedisLike {
  duplicate(override?: SideOptions): ConnectionLike;
}

/** The ioredis options a side connection overrides (see side-connection.ts). @internal */
export interface SideOptions {
  keyPrefix?: string;
  lazyConnect?: boolean;
  enableOfflineQueue?: boolean;
  autoResendUnfulfilledCommands?: boolean;
  maxRetriesPerRequest?: number;
  retryStrategy?: (attempt: number) => number;
  connectionName?: string;
}
