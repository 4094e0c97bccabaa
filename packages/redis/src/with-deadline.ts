/**
 * `withDeadline(redis)`: the client a service already has, wrapped (never the module patched). Inside a
 * deadline context each command is one `OutgoingCall`: not sent without time left (nor parked in the offline
 * queue while the server is away), rejected with the typed error when its budget runs out — ioredis keeps the
 * command in its queue, so later replies still match their commands — and, for a blocking command, bounded on
 * the server too and released with `CLIENT UNBLOCK` when the request dies first. Outside a context: unchanged.
 */
import type { CancelledError, DeadlineExceededError } from '@deadline/core';
import { OutgoingCall, storage } from '@deadline/core/internal';
import { clampTimeout, isBlocking } from './blocking.js';
import { type RedisDeadlineOptions, type ResolvedRedisOptions, resolveRedisOptions } from './options.js';
import { type Releaser, releaserOf } from './release.js';
import { connectionOf, isCluster } from './route.js';
import type { PipelineLike, RedisLike } from './types.js';

type Stop = DeadlineExceededError | CancelledError;

/**
 * A blocking command's server-side timeout ends this much before the call's: the server answers "nothing came"
 * by itself, and the connection is never left blocked by a reply that crossed our own timer.
 */
const SERVER_EARLY_MS = 20;

/**
 * Wraps an ioredis client: inside a deadline context its commands are bounded by the request's remaining
 * budget; blocking commands get a server-side timeout within it and are released when the request dies;
 * pipelines and `multi()` are bounded as a whole and not sent without time left.
 *
 * @example
 * ```ts
 * import Redis from 'ioredis';
 * import { withDeadline } from '@deadline/redis';
 *
 * const redis = withDeadline(new Redis(process.env.REDIS_URL), { name: 'sessions' });
 * app.get('/me', async (request) => {
 *   return JSON.parse((await redis.get(`session:${request.headers.cookie}`)) ?? 'null');
 * });
 * ```
 */
export function withDeadline<R extends RedisLike>(redis: R, options?: RedisDeadlineOptions): R {
  const resolved = resolveRedisOptions(options);
  const commands = new Set(redis.getBuiltinCommands());
  const run = (command: string, args: unknown[], buffers: boolean) =>
    runCommand(redis, resolved, command, args, buffers);
  return new Proxy(redis, {
    get(target, property) {
      if (typeof property === 'string') {
        if (property === 'pipeline' || property === 'multi') {
          return (...args: unknown[]) => {
            const pipeline = (target[property] as (...a: unknown[]) => unknown).apply(target, args);
            // `multi({ pipeline: false })` sends MULTI at once and returns a promise: nothing to bound.
            return typeof (pipeline as PipelineLike | null)?.exec === 'function'
              ? boundedPipeline(pipeline as PipelineLike, resolved, target)
              : pipeline;
          };
        }
        if (property === 'call' || property === 'callBuffer') {
          return (command: string, ...args: unknown[]) => run(command.toLowerCase(), args, property === 'callBuffer');
        }
        const buffers = property.endsWith('Buffer');
        const command = buffers ? property.slice(0, -'Buffer'.length) : property;
        if (commands.has(command)) return (...args: unknown[]) => run(command, args, buffers);
      }
      const value = Reflect.get(target, property, target);
      return typeof value === 'function' ? value.bind(target) : value;
    },
  });
}

function runCommand(
  redis: RedisLike,
  resolved: ResolvedRedisOptions,
  command: string,
  args: unknown[],
  buffers: boolean,
): Promise<unknown> {
  const send = (a: unknown[]) => (buffers ? redis.callBuffer(command, ...a) : redis.call(command, ...a));
  // Outside a context, and the callback style (its last argument a function): exactly what ioredis does.
  if (storage.getStore() === undefined || typeof args[args.length - 1] === 'function') {
    return (
      (redis as unknown as Record<string, (...a: unknown[]) => Promise<unknown>>)[
        buffers ? `${command}Buffer` : command
      ]?.(...args) ?? send(args)
    );
  }
  const blocking = isBlocking(command, args as never);
  let call: OutgoingCall;
  try {
    // A blocking command waits by design, to its timeout or the deadline: not a sign of a failing server, so
    // the breaker neither guards nor counts it.
    call = OutgoingCall.start(
      `${resolved.name} ${command.toUpperCase()}`,
      resolved,
      blocking ? undefined : resolved.guard,
    );
  } catch (error) {
    // No time left (or the circuit is open): nothing is written; rejected like any command, not thrown.
    return Promise.reject(error);
  }
  return new Promise((resolve, reject) => {
    let settled = false;
    /** The arguments as sent, once sent (a released blocking pop's reply is put back from them). */
    let sent: unknown[] | undefined;
    let clientId: Promise<number | undefined> | undefined;
    /** What releases the connection the blocking command blocks, when known. */
    let releaser: Releaser | undefined;
    call.onStop((error: Stop) => {
      if (settled) return;
      settled = true;
      call.end(error);
      reject(error);
      // A blocked connection holds every command queued behind it: release it on the server.
      if (sent !== undefined && releaser !== undefined && clientId !== undefined) void releaser.unblock(clientId);
    });
    const start = async () => {
      // Reconnecting: wait for the server within the budget, rather than leave the command in ioredis's
      // offline queue, which would send it whenever the server comes back — long after anyone waits.
      if (call.timeoutMs !== undefined && !READY_OR_IDLE.has(redis.status)) await untilReady(redis, call);
      // A cluster routes by its slot map: a blocking command waits for it, to know which node it blocks.
      if (blocking && isCluster(redis) && redis.status !== 'ready') await untilClusterReady(redis, call);
      if (settled) return;
      let a = args;
      if (blocking) {
        const connection = connectionOf(redis, command, args);
        releaser = connection === undefined ? undefined : releaserOf(connection);
        clientId = releaser?.idOf();
        await clientId;
        if (settled) return;
        const left = (call.timeoutMs ?? Number.POSITIVE_INFINITY) - call.elapsedMs() - SERVER_EARLY_MS;
        if (Number.isFinite(left)) a = clampTimeout(command, args as never, Math.max(1, left));
      }
      sent = a;
      send(a).then(
        (value) => {
          if (!settled) {
            settled = true;
            call.end();
            resolve(value);
            return;
          }
          // Released after the caller was answered, with an element popped in the race: put it back.
          if (blocking) void releaser?.pushBack(command, a, value);
        },
        (error: unknown) => {
          if (settled) return;
          settled = true;
          call.end(error);
          reject(error);
        },
      );
    };
    start().catch((error: unknown) => {
      if (settled) return;
      settled = true;
      call.end(error);
      reject(error);
    });
  });
}

/** Statuses in which a command goes out (or ioredis answers it at once) instead of into the offline queue. */
const READY_OR_IDLE = new Set(['ready', 'wait', 'end', 'close']);

/** One wait per client and reconnection, however many commands wait on it: resolves on `ready` or `end`. */
const readiness = new WeakMap<RedisLike, Promise<void>>();
function nextReady(redis: RedisLike): Promise<void> {
  let ready = readiness.get(redis);
  if (ready === undefined) {
    ready = new Promise<void>((resolve) => {
      const done = () => {
        redis.off('ready', done);
        redis.off('end', done);
        readiness.delete(redis);
        resolve();
      };
      redis.on('ready', done);
      redis.on('end', done);
    });
    readiness.set(redis, ready);
  }
  return ready;
}

/** Resolves when the client is ready (or ended), or the call stops first (the caller then checks the stop). */
function untilReady(redis: RedisLike, call: OutgoingCall): Promise<void> {
  return call.race(() => nextReady(redis)).catch(() => {});
}

/** As {@link untilReady}, first starting a lazy cluster's connection, as its own first command would. */
function untilClusterReady(redis: RedisLike, call: OutgoingCall): Promise<void> {
  if (redis.status === 'wait') redis.connect().catch(() => {});
  return untilReady(redis, call);
}

/** A pipeline or MULTI: bounded as a whole; not sent at all without time left. */
function boundedPipeline(pipeline: PipelineLike, resolved: ResolvedRedisOptions, redis: RedisLike): PipelineLike {
  const exec = pipeline.exec.bind(pipeline) as (...args: unknown[]) => ReturnType<PipelineLike['exec']>;
  pipeline.exec = (...args: unknown[]) => {
    // Outside a context, and the callback style: exactly what ioredis does.
    if (storage.getStore() === undefined || typeof args[0] === 'function') return exec(...args);
    let call: OutgoingCall;
    try {
      call = OutgoingCall.start(`${resolved.name} PIPELINE`, resolved, resolved.guard);
    } catch (error) {
      return Promise.reject(error);
    }
    // Not into the offline queue while reconnecting: it would be sent whenever the server comes back.
    const send = async () => {
      if (call.timeoutMs !== undefined && !READY_OR_IDLE.has(redis.status)) await untilReady(redis, call);
      if (call.stopReason !== undefined) throw call.stopReason;
      return exec();
    };
    return call.race(send).then(
      (results) => {
        call.end();
        return results;
      },
      (error: unknown) => {
        call.end(error);
        throw error;
      },
    );
  };
  return pipeline;
}
