/**
 * The Redis store: a hash per key and a hash of its steps beside it, both under one hash tag (one cluster slot).
 * Each operation is one Lua script, so it is atomic, and reads the time with `TIME` (the server's clock). The
 * record expires with Redis' own TTL. Scripts are sent with EVALSHA, and with EVAL when the server does not know
 * them yet (after a restart or a `SCRIPT FLUSH`).
 */
import { createHash } from 'node:crypto';
import { InvalidArgumentError } from '@deadline/core';
import type { Claim, IdempotencyStore } from './store.js';

/**
 * What `redisStore()` needs of an ioredis client: an ioredis `Redis` or `Cluster` (or `@deadline/redis`'s wrapper).
 *
 * @example
 * ```ts
 * const client: RedisScripting = new Redis(process.env.REDIS_URL);
 * ```
 */
export interface RedisScripting {
  /** A command whose bulk replies stay bytes (a stored body is not text). */
  callBuffer(command: string, args: (string | Buffer | number)[]): Promise<unknown>;
}

/**
 * What `redisStore()` needs of a node-redis client: a client, cluster or pool of the `redis` package (v5 or v6),
 * bounded by `@deadline/redis` or not.
 *
 * @example
 * ```ts
 * const client: NodeRedisScripting = await createClient({ url: process.env.REDIS_URL }).connect();
 * ```
 */
export interface NodeRedisScripting {
  /** `sendCommand(args, options)`; on a cluster `sendCommand(firstKey, isReadonly, args, options)`. */
  sendCommand(...args: never[]): Promise<unknown>;
}

type Args = (string | Buffer | number)[];
type CallBuffer = (command: string, args: Args) => Promise<unknown>;

/** node-redis's RESP type of a bulk string (`$`), whose replies are kept as Buffers. */
const BLOB_STRING = 36;
const AS_BUFFERS = { typeMapping: { [BLOB_STRING]: Buffer } };

/** How to send a script on `redis`, with bulk replies as Buffers; undefined for something else. */
function callBufferOf(redis: RedisScripting | NodeRedisScripting): CallBuffer | undefined {
  if (typeof (redis as RedisScripting | null)?.callBuffer === 'function') {
    const ioredis = redis as RedisScripting;
    return (command, args) => ioredis.callBuffer(command, args);
  }
  const send = (redis as { sendCommand?: unknown } | null)?.sendCommand;
  if (typeof send !== 'function') return undefined;
  // node-redis takes strings and Buffers only.
  const line = (command: string, args: Args) => [command, ...args.map((a) => (typeof a === 'number' ? String(a) : a))];
  const self = (redis as { _self?: { _slots?: unknown } })._self;
  if (self?._slots !== undefined) {
    // A cluster routes by the first key: EVALSHA's and EVAL's is after the script and the key count.
    return (command, args) => send.call(redis, args[2], false, line(command, args), AS_BUFFERS) as Promise<unknown>;
  }
  return (command, args) => send.call(redis, line(command, args), AS_BUFFERS) as Promise<unknown>;
}

/**
 * Options of {@link redisStore}.
 *
 * @example
 * ```ts
 * const options: RedisStoreOptions = { prefix: 'billing:idem:' };
 * ```
 */
export interface RedisStoreOptions {
  /** Prepended to every key. Default `deadline:idem:`. */
  prefix?: string | undefined;
}

const NOW = `local t = redis.call('TIME') local now = t[1] * 1000 + math.floor(t[2] / 1000)`;

/** KEYS: record, steps. ARGV: fingerprint, token, secret, lockMs, ttlMs. */
const CLAIM = `${NOW}
local cur = redis.call('HMGET', KEYS[1], 'fp', 'state', 'lock', 'secret', 'owners')
if not cur[1] then
  redis.call('DEL', KEYS[2])
  redis.call('HSET', KEYS[1], 'fp', ARGV[1], 'token', ARGV[2], 'secret', ARGV[3], 'state', 'running',
    'lock', now + tonumber(ARGV[4]), 'owners', 1)
  redis.call('PEXPIRE', KEYS[1], ARGV[5])
  return {'claimed', ARGV[3], 0}
end
if cur[1] ~= ARGV[1] then return {'mismatch'} end
if cur[2] == 'completed' then
  local r = redis.call('HMGET', KEYS[1], 'status', 'headers', 'body', 'bytes', 'stored')
  return {'completed', r[1], r[2], r[3] or '', r[4], r[5]}
end
local left = tonumber(cur[3]) - now
if left > 0 then return {'busy', left} end
redis.call('HSET', KEYS[1], 'token', ARGV[2], 'lock', now + tonumber(ARGV[4]), 'owners', tonumber(cur[5]) + 1)
return {'claimed', cur[4], 1, redis.call('HGETALL', KEYS[2])}`;

/** KEYS: record. ARGV: token, status, headers, body, bytes, stored. */
const COMPLETE = `${NOW}
if redis.call('HGET', KEYS[1], 'token') ~= ARGV[1] or redis.call('HGET', KEYS[1], 'state') ~= 'running' then return 0 end
redis.call('HSET', KEYS[1], 'state', 'completed', 'status', ARGV[2], 'headers', ARGV[3], 'body', ARGV[4],
  'bytes', ARGV[5], 'stored', ARGV[6], 'lock', now)
return 1`;

/** KEYS: record, steps. ARGV: token, name, result. */
const SAVE_STEP = `if redis.call('HGET', KEYS[1], 'token') ~= ARGV[1] or redis.call('HGET', KEYS[1], 'state') ~= 'running' then return 0 end
redis.call('HSET', KEYS[2], ARGV[2], ARGV[3])
local ttl = redis.call('PTTL', KEYS[1])
if ttl > 0 then redis.call('PEXPIRE', KEYS[2], ttl) end
return 1`;

/** KEYS: record. ARGV: token. */
const RELEASE = `${NOW}
if redis.call('HGET', KEYS[1], 'token') ~= ARGV[1] or redis.call('HGET', KEYS[1], 'state') ~= 'running' then return 0 end
redis.call('HSET', KEYS[1], 'lock', now)
return 1`;

interface Script {
  text: string;
  sha: string;
}

const script = (text: string): Script => ({ text, sha: createHash('sha1').update(text).digest('hex') });
const SCRIPTS = {
  claim: script(CLAIM),
  complete: script(COMPLETE),
  saveStep: script(SAVE_STEP),
  release: script(RELEASE),
};

/**
 * A store in Redis, on the client given: an ioredis `Redis` or `Cluster`, or a node-redis client, cluster or pool.
 *
 * @example
 * ```ts
 * import { Redis } from 'ioredis';
 * import { idempotency, redisStore } from '@deadline/idempotency';
 *
 * app.use(express.json(), idempotency({ store: redisStore(new Redis(process.env.REDIS_URL)) }));
 * ```
 */
export function redisStore(
  redis: RedisScripting | NodeRedisScripting,
  options: RedisStoreOptions = {},
): IdempotencyStore {
  const callBuffer = callBufferOf(redis);
  if (callBuffer === undefined) {
    throw new InvalidArgumentError(
      'redis',
      'an ioredis Redis or Cluster, or a node-redis client, cluster or pool',
      redis,
    );
  }
  const prefix = options.prefix ?? 'deadline:idem:';
  if (typeof prefix !== 'string') throw new InvalidArgumentError('prefix', 'a string', prefix);
  // One hash tag for both keys of a record: a script may only touch keys of one cluster slot.
  const record = (scope: string) => `${prefix}{${scope}}`;
  const steps = (scope: string) => `${prefix}{${scope}}:steps`;
  const run = async (s: Script, keys: string[], args: Args): Promise<unknown> => {
    try {
      return await callBuffer('EVALSHA', [s.sha, keys.length, ...keys, ...args]);
    } catch (error) {
      if (!String((error as Error | null)?.message).startsWith('NOSCRIPT')) throw error;
      return callBuffer('EVAL', [s.text, keys.length, ...keys, ...args]);
    }
  };

  return {
    async claim(input): Promise<Claim> {
      const reply = (await run(
        SCRIPTS.claim,
        [record(input.scope), steps(input.scope)],
        [input.fingerprint, input.token, input.secret, input.lockMs, input.ttlMs],
      )) as unknown[];
      const kind = String(reply[0]);
      if (kind === 'claimed') {
        const pairs = (reply[3] ?? []) as Buffer[];
        // No prototype: a step may be named `__proto__` (any text is a valid name), and must round-trip as one.
        const recorded: Record<string, string> = Object.create(null);
        for (let i = 0; i + 1 < pairs.length; i += 2) recorded[String(pairs[i])] = String(pairs[i + 1]);
        return { kind, secret: String(reply[1]), steps: recorded, resumed: Number(reply[2]) === 1 };
      }
      if (kind === 'mismatch') return { kind };
      if (kind === 'busy') return { kind, lockLeftMs: Number(reply[1]) };
      const stored = String(reply[5]) === '1';
      return {
        kind: 'completed',
        response: {
          status: Number(String(reply[1])),
          headers: JSON.parse(String(reply[2])) as Record<string, string>,
          body: stored ? (reply[3] as Buffer) : undefined,
          bodyBytes: Number(String(reply[4])),
        },
      };
    },
    async complete(scope, token, response) {
      const done = await run(
        SCRIPTS.complete,
        [record(scope)],
        [
          token,
          response.status,
          JSON.stringify(response.headers),
          response.body ?? '',
          response.bodyBytes,
          response.body === undefined ? 0 : 1,
        ],
      );
      return Number(done) === 1;
    },
    async saveStep(scope, token, name, result) {
      return Number(await run(SCRIPTS.saveStep, [record(scope), steps(scope)], [token, name, result])) === 1;
    },
    async release(scope, token) {
      await run(SCRIPTS.release, [record(scope)], [token]);
    },
  };
}
