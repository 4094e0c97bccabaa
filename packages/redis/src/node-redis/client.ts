/**
 * `withDeadline(client)` for a node-redis client. node-redis sends every command through its client's own
 * `sendCommand` (its `_self`, behind whatever object the caller used), and every `multi()` through
 * `_executeMulti` / `_executePipeline`: those are replaced on that one client (never on the module), so that every
 * way of calling it is bounded — `client.get`, `client.withTypeMapping(…).get`, `sendCommand`, scripts, functions.
 *
 * Inside a deadline context a command is one `OutgoingCall`: not sent without time left (nor parked in the offline
 * queue while the server is away), given node-redis's `abortSignal` so that one still waiting to be written when
 * the call stops is taken out of the queue (from node-redis 6.2: see takesBackSafely), and answered at the stop if
 * it was written — node-redis keeps it in
 * its queue and discards its reply, so later replies still match their commands. Blocking commands are bounded on
 * the server and released (blocking-call.ts). Outside a context: node-redis's own, except that blocking commands
 * take their turn on the connection (lane.ts). Pub/sub (`SUBSCRIBE`, `MONITOR`) does not go through these: a
 * subscriber is long-lived and never cut.
 */
import {
  type OutgoingCall as Call,
  nextReady,
  OutgoingCall,
  outsideContext,
  runWithCall,
  storage,
} from '@deadline/core/internal';
import { isBlocking } from '../blocking.js';
import { type BlockingRoute, blockingInTurn, boundedBlocking } from '../blocking-call.js';
import { boundedSend } from '../bounded-send.js';
import type { ResolvedRedisOptions } from '../options.js';
import { releaserOf } from '../release.js';
import { nodeRedisConnection } from './connection.js';
import type {
  NodeRedisArgs,
  NodeRedisClientLike,
  NodeRedisCommandOptions,
  NodeRedisQueuedCommand,
  NodeRedisSelf,
} from './types.js';
import { selfOf } from './types.js';

/** What a bounded client reads on each call: its options, as last given. */
interface Bound {
  resolved: ResolvedRedisOptions;
}

const bound = new WeakMap<NodeRedisSelf, Bound>();

/**
 * Bounds `client` in place and returns it; a later call only changes the options.
 * @internal
 */
export function boundNodeRedis<C extends NodeRedisClientLike>(client: C, resolved: ResolvedRedisOptions): C {
  const self = selfOf(client);
  const existing = bound.get(self);
  if (existing !== undefined) {
    existing.resolved = resolved;
    return client;
  }
  const state: Bound = { resolved };
  bound.set(self, state);
  keepListeners(self);
  install(self, state);
  return client;
}

const keep = () => {};

/**
 * node-redis hands out `Object.create(client)`: a listener the app adds through that object (`client.on('error')`)
 * lands in the client's listener table but is counted on the object, not on the client. When the client's own
 * count falls back to 0 — our listeners (a wait for `ready`) coming off — Node's EventEmitter starts it a new,
 * empty table, and the app's `'error'` listener is gone: the next dropped connection would crash the process. One
 * listener of ours stays on the client for its life, so that its count never falls back to 0.
 */
function keepListeners(self: NodeRedisSelf): void {
  self.on('end', keep);
}

function install(self: NodeRedisSelf, state: Bound): void {
  const sendCommand = self.sendCommand;
  const executeMulti = self._executeMulti;
  const executePipeline = self._executePipeline;
  const duplicate = self.duplicate;
  const connect = self.connect;
  const port = () =>
    nodeRedisConnection(
      self,
      (args, options) => sendCommand.call(self, args, options),
      (overrides) => duplicate.call(self, overrides) as NodeRedisSelf,
    );
  const route = routeOf(self, () => releaserOf(self, port));
  const canTakeBack = takesBackSafely(self);

  const replacements = {
    sendCommand(this: NodeRedisClientLike, args: NodeRedisArgs, options?: NodeRedisCommandOptions) {
      const command = String(args[0]).toLowerCase();
      const rest = args.slice(1);
      const blocking = isBlocking(command, rest as never);
      const send = (a: unknown[], o = options) =>
        sendCommand.call(this, [args[0] as string, ...(a as NodeRedisArgs)], o);
      if (storage.getStore() === undefined) return blocking ? blockingInTurn(route, command, rest, send) : send(rest);
      let call: Call;
      try {
        // A blocking command waits by design: the breaker neither guards nor counts it (as for ioredis).
        call = OutgoingCall.start(
          `${state.resolved.name} ${command.toUpperCase()}`,
          state.resolved,
          blocking ? undefined : state.resolved.guard,
        );
      } catch (error) {
        return Promise.reject(error);
      }
      const [signalled, unlink] = canTakeBack ? withStopSignal(call, options) : [options, undefined];
      const sendInCall = (a: unknown[]) => runWithCall(call, () => send(a, signalled));
      const reply = blocking
        ? boundedBlocking(route, command, rest, sendInCall, call)
        : boundedSend(call, route.beforeWrite, () => sendInCall(rest));
      if (unlink !== undefined) reply.then(unlink, unlink);
      return reply;
    },
    _executeMulti(this: NodeRedisSelf, commands: NodeRedisQueuedCommand[], ...more: unknown[]) {
      // Inside MULTI a blocking command does not block: no turn to take.
      return boundedBatch(state, route, 'MULTI', false, () => executeMulti.call(this, commands, ...more));
    },
    _executePipeline(this: NodeRedisSelf, commands: NodeRedisQueuedCommand[], ...more: unknown[]) {
      const blocks = commands.some(({ args }) => isBlocking(String(args[0]).toLowerCase(), args.slice(1) as never));
      return boundedBatch(state, route, 'PIPELINE', blocks, () => executePipeline.call(this, commands, ...more));
    },
    // A duplicate is bounded as its original is.
    duplicate(this: NodeRedisClientLike, overrides?: object) {
      const copy = duplicate.call(this, overrides);
      return boundNodeRedis(copy, state.resolved);
    },
    // Outside the request's context: the socket's events (every reply, every reconnect, the ping timer) run in
    // the context it was made in, and a long-lived connection must not keep one request's context alive.
    connect(this: NodeRedisClientLike) {
      return outsideContext(() => connect.call(this));
    },
  };
  Object.assign(self, replacements);
}

/** A `multi()`'s `exec()` or `execAsPipeline()`: bounded as a whole; not sent at all without time left. */
function boundedBatch(
  state: Bound,
  route: BlockingRoute,
  kind: 'MULTI' | 'PIPELINE',
  blocks: boolean,
  send: () => Promise<unknown>,
): Promise<unknown> {
  // One that holds a blocking command blocks its connection as the command alone would: in its turn.
  const releaser = blocks ? route.releaser('', []) : undefined;
  if (storage.getStore() === undefined) return releaser === undefined ? send() : releaser.inTurn(send);
  let call: Call;
  try {
    call = OutgoingCall.start(`${state.resolved.name} ${kind}`, state.resolved, state.resolved.guard);
  } catch (error) {
    return Promise.reject(error);
  }
  const write = () => runWithCall(call, send);
  return boundedSend(call, route.beforeWrite, () =>
    releaser === undefined ? write() : releaser.inTurn(write, (ready) => call.race(() => ready)),
  );
}

/** How a node-redis client routes a blocking command: the client is the connection. */
function routeOf(self: NodeRedisSelf, releaser: BlockingRoute['releaser']): BlockingRoute {
  // Not into the offline queue while reconnecting: held here, within the call, until the client is ready.
  const beforeWrite = async (call: Call) => {
    if (call.timeoutMs === undefined || !self.isOpen || self.isReady) return;
    await call.race(() => nextReady(self)).catch(() => {});
  };
  return { beforeRouting: beforeWrite, releaser, beforeWrite };
}

/**
 * Whether this client's write queue can take back a command not yet written. Before node-redis 6.2.0 (all of 5.x),
 * taking out a queued command that had become the queue's head left the next one pointing back at it, and once
 * that one was taken out too, the queue lost every later command: they were never written, and the client hung
 * (redis/node-redis#3320, fixed in 6.2.0; seen here as a client that stopped writing under load). On those, the
 * command is not given an `abortSignal`: held here while the client reconnects, it is never sent late from there;
 * one queued behind a full socket at its deadline is still written when the socket drains. The HIMPORT commands
 * came in the same release, and mark it.
 */
function takesBackSafely(self: NodeRedisSelf): boolean {
  return typeof (self as unknown as Record<string, unknown>).HIMPORT_SET === 'function';
}

/**
 * The command's options with an `abortSignal` that aborts when the call stops (or when the caller's own does):
 * node-redis then takes the command out of its queue if it is not yet written. With the caller's own signal, also
 * the function that unlinks it once the command has settled (a long-lived signal keeps no listener per command).
 */
function withStopSignal(
  call: Call,
  options: NodeRedisCommandOptions | undefined,
): [NodeRedisCommandOptions, (() => void) | undefined] {
  const controller = new AbortController();
  const abort = () => controller.abort();
  call.onStop(abort);
  const own = options?.abortSignal;
  if (own === undefined) return [{ ...options, abortSignal: controller.signal }, undefined];
  if (own.aborted) abort();
  else own.addEventListener('abort', abort, { once: true });
  return [{ ...options, abortSignal: controller.signal }, () => own.removeEventListener('abort', abort)];
}
