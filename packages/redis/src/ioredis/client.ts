/**
 * `withDeadline(redis)` for an ioredis client: the client a service already has, wrapped in a `Proxy` (never the
 * module patched). Inside a deadline context each command is one `OutgoingCall`: not sent without time left (nor
 * parked in the offline queue while the server is away), rejected with the typed error when its budget runs out —
 * ioredis keeps the command in its queue, so later replies still match their commands. A blocking command is bounded on the
 * server too, answered at its own timeout to the millisecond, and released with `CLIENT UNBLOCK` when the
 * request dies first (blocking-call.ts). Outside a context: ioredis's own, except that blocking commands take
 * their turn on the connection like the others (lane.ts), so that no UNBLOCK reaches one it was not sent for.
 */
import { OutgoingCall, runWithCall, storage } from '@deadline/core/internal';
import { isBlocking } from '../blocking.js';
import { blockingInTurn, boundedBlocking } from '../blocking-call.js';
import { boundedSend } from '../bounded-send.js';
import type { ResolvedRedisOptions } from '../options.js';
import { type Releaser, releaserOf } from '../release.js';
import { ioredisConnection } from './connection.js';
import { ioredisRoute, isCluster } from './route.js';
import type { ConnectionLike, PipelineLike, RedisLike } from './types.js';

/** Wraps `redis`: see the file's comment. @internal */
export function boundIoredis<R extends RedisLike>(redis: R, resolved: ResolvedRedisOptions): R {
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
        // A duplicate is bounded as its original is.
        if (property === 'duplicate') {
          return (...args: unknown[]) =>
            boundIoredis((target as unknown as ConnectionLike).duplicate(...(args as [])), resolved);
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
  const blocking = isBlocking(command, args as never);
  // Outside a context, and the callback style (its last argument a function): what ioredis does — a blocking
  // command only waits for its turn on the connection.
  if (storage.getStore() === undefined || typeof args[args.length - 1] === 'function') {
    const method = (redis as unknown as Record<string, ((...a: unknown[]) => Promise<unknown>) | undefined>)[
      buffers ? `${command}Buffer` : command
    ];
    const direct = (a: unknown[]) => method?.apply(redis, a) ?? send(a);
    return blocking ? blockingInTurn(ioredisRoute(redis), command, args, direct) : direct(args);
  }
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
  // With the call in OpenTelemetry's context: instrumentation-ioredis's span, made inside, is the call's.
  const sendInCall = (a: unknown[]) => runWithCall(call, () => send(a));
  const route = ioredisRoute(redis);
  if (blocking) return boundedBlocking(route, command, args, sendInCall, call);
  return boundedSend(call, route.beforeWrite, () => sendInCall(args));
}

/** A pipeline or MULTI: bounded as a whole; not sent at all without time left. */
function boundedPipeline(pipeline: PipelineLike, resolved: ResolvedRedisOptions, redis: RedisLike): PipelineLike {
  const exec = pipeline.exec.bind(pipeline) as (...args: unknown[]) => ReturnType<PipelineLike['exec']>;
  pipeline.exec = (...args: unknown[]) => {
    const releaser = blockingPipelineOf(pipeline, redis);
    // Outside a context, and the callback style: exactly what ioredis does (in its turn, if it may block).
    if (storage.getStore() === undefined || typeof args[0] === 'function') {
      return releaser === undefined ? exec(...args) : releaser.inTurn(() => exec(...args));
    }
    let call: OutgoingCall;
    try {
      call = OutgoingCall.start(`${resolved.name} PIPELINE`, resolved, resolved.guard);
    } catch (error) {
      return Promise.reject(error);
    }
    const send = () => (releaser === undefined ? exec() : releaser.inTurn(exec, (ready) => call.race(() => ready)));
    return boundedSend(call, ioredisRoute(redis).beforeWrite, send);
  };
  return pipeline;
}

/**
 * The releaser whose lane a pipeline takes its turn in: one that holds a blocking command blocks its connection
 * as the command alone would, so an UNBLOCK meant for another must not reach it either. Undefined for the rest,
 * and on a cluster, whose pipeline goes to the node of its keys. ioredis keeps a pipeline's commands in
 * `_queue`; a pipeline without it is taken not to block.
 */
function blockingPipelineOf(pipeline: PipelineLike, redis: RedisLike): Releaser | undefined {
  if (isCluster(redis)) return undefined;
  const queued = (pipeline as { _queue?: { name?: unknown; args?: unknown }[] })._queue;
  const blocks = queued?.some(
    (command) => typeof command.name === 'string' && isBlocking(command.name, (command.args ?? []) as never),
  );
  if (blocks !== true) return undefined;
  const connection = redis as ConnectionLike;
  return releaserOf(connection, () => ioredisConnection(connection));
}
