/**
 * The four clients the conformance suite runs against, each driven through its own API: what the suite asks
 * (`blpop(key, 0)`) is written as that client's users write it (`redis.blpop(key, 0)` on ioredis,
 * `client.blPop(key, 0)` on node-redis), so the suite meets each client where its users do.
 */
import { Redis as IORedis5 } from 'ioredis';
import { Redis as IORedis6 } from 'ioredis6';
import { createClient as createClient6 } from 'redis';
import { createClient as createClient5 } from 'redis5';

/** How a test client is opened. */
export interface OpenOptions {
  /** Its connection name (`CLIENT SETNAME`), to find and kill it on the server. */
  name?: string | undefined;
  keyPrefix?: string | undefined;
  /** The protocol; the client's default when absent. */
  resp?: 2 | 3 | undefined;
  /** Reconnect at once, forever (a fault test waits for the reconnect). */
  quickReconnect?: boolean | undefined;
  /** The app's own `'error'` listener (one that ignores them when absent). */
  onError?: ((error: Error) => void) | undefined;
}

/** What the suite does with a client, in that client's own API. */
export interface ClientOps {
  get(key: string): Promise<string | null>;
  set(key: string, value: string): Promise<unknown>;
  incr(key: string): Promise<number>;
  /** Resolves `[key, element]`, or null at its timeout. */
  blpop(key: string, seconds: number): Promise<[string, string] | null>;
  /** Resolves the member popped, or null at its timeout. */
  bzpopmin(key: string, seconds: number): Promise<string | null>;
  /** XREAD BLOCK on one stream from `$`: the entries' ids, or null at its timeout. */
  xreadBlock(key: string, ms: number): Promise<string[] | null>;
  blmove(from: string, to: string, seconds: number): Promise<string | null>;
  /** WAIT for `replicas` replicas (none here: it waits to its timeout, or the deadline). */
  wait(replicas: number, ms: number): Promise<number>;
  /** MULTI SET GET EXEC: the GET's reply. */
  multiSetGet(key: string, value: string): Promise<string | null>;
  /** The same as a pipeline (`pipeline()` on ioredis, `execAsPipeline()` on node-redis). */
  pipelineSetGet(key: string, value: string): Promise<string | null>;
  /** EVAL `return redis.call('GET', KEYS[1])`. */
  evalGet(key: string): Promise<string | null>;
  /** FCALL of `fn` (loaded by the suite) with one key. */
  fcall(fn: string, key: string): Promise<unknown>;
  clientId(): Promise<string>;
  /** A duplicate of the client, connected (its options kept). */
  duplicate(): Promise<unknown>;
  /** Subscribes (on this client, which becomes a subscriber), calling `onMessage` with each message. */
  subscribe(channel: string, onMessage: (message: string) => void): Promise<void>;
  publish(channel: string, message: string): Promise<unknown>;
  /** The client's `'error'` listeners. */
  errorListeners(): number;
}

export interface RedisDriver {
  readonly label: string;
  readonly family: 'ioredis' | 'node-redis';
  /** A connected raw client (resolves once it is ready). */
  open(url: string, options?: OpenOptions): Promise<unknown>;
  /** A raw client for a server that is not there: trying to connect, its errors kept quiet. */
  openDown(url: string): unknown;
  /** Whether the client has a `keyPrefix` option (node-redis from 6). */
  readonly keyPrefix: boolean;
  close(client: unknown): void;
  ops(client: unknown): ClientOps;
}

type IORedis = IORedis5 | IORedis6;

function ioredisDriver(label: string, Client: typeof IORedis5 | typeof IORedis6): RedisDriver {
  return {
    label,
    family: 'ioredis',
    async open(url, options = {}) {
      const client: IORedis = new (Client as typeof IORedis5)(url, {
        connectionName: options.name,
        keyPrefix: options.keyPrefix,
        maxRetriesPerRequest: options.quickReconnect ? null : 1,
        ...(options.resp === undefined ? {} : { protocol: options.resp }),
        ...(options.quickReconnect ? { retryStrategy: () => 10 } : {}),
      } as never);
      client.on('error', options.onError ?? (() => {}));
      await client.ping();
      return client;
    },
    openDown(url) {
      const client: IORedis = new (Client as typeof IORedis5)(url);
      client.on('error', () => {});
      return client;
    },
    keyPrefix: true,
    close: (client) => (client as IORedis).disconnect(),
    ops(client) {
      const redis = client as IORedis;
      return {
        get: (key) => redis.get(key),
        set: (key, value) => redis.set(key, value),
        incr: (key) => redis.incr(key),
        blpop: (key, seconds) => redis.blpop(key, seconds),
        bzpopmin: async (key, seconds) => ((await redis.bzpopmin(key, seconds)) as string[] | null)?.[1] ?? null,
        xreadBlock: async (key, ms) => {
          const reply = (await redis.xread('BLOCK', ms, 'STREAMS', key, '$')) as
            | [string, [string, string[]][]][]
            | null;
          return reply === null ? null : (reply[0]?.[1] ?? []).map(([id]) => id);
        },
        blmove: (from, to, seconds) => redis.blmove(from, to, 'LEFT', 'RIGHT', seconds),
        wait: (replicas, ms) => redis.wait(replicas, ms),
        multiSetGet: async (key, value) => {
          const results = await redis.multi().set(key, value).get(key).exec();
          return (results?.[1]?.[1] as string | null) ?? null;
        },
        pipelineSetGet: async (key, value) => {
          const results = await redis.pipeline().set(key, value).get(key).exec();
          return (results?.[1]?.[1] as string | null) ?? null;
        },
        evalGet: (key) => redis.eval("return redis.call('GET', KEYS[1])", 1, key) as Promise<string | null>,
        fcall: (fn, key) => redis.fcall(fn, 1, key),
        clientId: async () => String(await redis.client('ID')),
        duplicate: async () => {
          const copy = redis.duplicate();
          copy.on('error', () => {});
          await copy.ping();
          return copy;
        },
        subscribe: async (channel, onMessage) => {
          redis.on('message', (_channel: string, message: string) => onMessage(message));
          await redis.subscribe(channel);
        },
        publish: (channel, message) => redis.publish(channel, message),
        errorListeners: () => redis.listenerCount('error'),
      };
    },
  };
}

type NodeRedis = ReturnType<typeof createClient6>;

function nodeRedisDriver(
  label: string,
  create: typeof createClient6 | typeof createClient5,
  keyPrefix: boolean,
): RedisDriver {
  return {
    label,
    family: 'node-redis',
    async open(url, options = {}) {
      const client = (create as typeof createClient6)({
        url,
        name: options.name,
        ...(options.keyPrefix === undefined ? {} : { keyPrefix: options.keyPrefix }),
        // node-redis 5 refuses some commands' RESP3 replies (XREAD's) unless told they may change.
        ...(options.resp === undefined ? {} : { RESP: options.resp, unstableResp3: true }),
        ...(options.quickReconnect ? { socket: { reconnectStrategy: () => 10 } } : {}),
      } as never) as NodeRedis;
      client.on('error', options.onError ?? (() => {}));
      await client.connect();
      return client;
    },
    openDown(url) {
      const client = (create as typeof createClient6)({ url }) as NodeRedis;
      client.on('error', () => {});
      client.connect().catch(() => {});
      return client;
    },
    keyPrefix,
    close: (client) => (client as NodeRedis).destroy(),
    ops(client) {
      const redis = client as NodeRedis;
      return {
        get: (key) => redis.get(key) as Promise<string | null>,
        set: (key, value) => redis.set(key, value),
        incr: (key) => redis.incr(key),
        blpop: async (key, seconds) => {
          const reply = await redis.blPop(key, seconds);
          return reply === null ? null : [reply.key as string, reply.element as string];
        },
        bzpopmin: async (key, seconds) => {
          const reply = (await redis.bzPopMin(key, seconds)) as { value: string } | null;
          return reply?.value ?? null;
        },
        xreadBlock: async (key, ms) => {
          const reply = (await redis.xRead({ key, id: '$' }, { BLOCK: ms })) as
            | { messages: { id: string }[] }[]
            | Record<string, unknown>
            | null;
          if (reply === null) return null;
          const streams = Array.isArray(reply) ? reply : Object.values(reply);
          return (streams[0] as { messages: { id: string }[] } | undefined)?.messages.map(({ id }) => id) ?? [];
        },
        blmove: (from, to, seconds) => redis.blMove(from, to, 'LEFT', 'RIGHT', seconds) as Promise<string | null>,
        wait: (replicas, ms) => redis.wait(replicas, ms) as Promise<number>,
        multiSetGet: async (key, value) => {
          const results = await redis.multi().set(key, value).get(key).exec();
          return (results[1] as unknown as string | null) ?? null;
        },
        pipelineSetGet: async (key, value) => {
          const results = await redis.multi().set(key, value).get(key).execAsPipeline();
          return (results[1] as unknown as string | null) ?? null;
        },
        evalGet: (key) => redis.eval("return redis.call('GET', KEYS[1])", { keys: [key] }) as Promise<string | null>,
        fcall: (fn, key) => redis.fCall(fn, { keys: [key] }),
        clientId: async () => String(await redis.clientId()),
        duplicate: async () => {
          const copy = redis.duplicate();
          copy.on('error', () => {});
          await copy.connect();
          return copy;
        },
        subscribe: (channel, onMessage) => redis.subscribe(channel, (message) => onMessage(String(message))),
        publish: (channel, message) => redis.publish(channel, message),
        errorListeners: () => redis.listenerCount('error'),
      };
    },
  };
}

export const IOREDIS_5 = ioredisDriver('ioredis 5', IORedis5);
export const IOREDIS_6 = ioredisDriver('ioredis 6', IORedis6);
export const NODE_REDIS_5 = nodeRedisDriver('node-redis 5', createClient5, false);
export const NODE_REDIS_6 = nodeRedisDriver('node-redis 6', createClient6, true);
