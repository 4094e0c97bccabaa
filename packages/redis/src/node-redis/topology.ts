/**
 * node-redis's cluster (`createCluster()`), pool (`createClientPool()`) and Sentinel (`createSentinel()`): none
 * sends a command itself. Each hands it to one of its clients — a cluster to the client of the node its key lives
 * on, a pool to an idle client, a Sentinel to its current master's (or a replica's) — and that client sends it. So
 * each client handed out is bounded as a single client is (client.ts), with the options of the cluster, pool or
 * Sentinel: its commands, its blocking commands' release on that node (its side connection is its own
 * `duplicate()`, to the same node), its batches.
 *
 * What each adds is a wait before the client: for the cluster's slot map while it (re)discovers the nodes, for a
 * free client in a pool, for the master's client while a Sentinel finds or fails over to it. Inside a deadline
 * context that wait ends when the request's context stops: the caller gets the typed error at once (phase
 * `before-call`: nothing was sent; target `<name> cluster routing`, `<name> pool checkout` or `<name> sentinel
 * routing`), and a command whose turn comes afterwards finds no time left and is not sent.
 */
import { CancelledError, DeadlineExceededError, type StopListener, type StopReason } from '@deadline/core';
import { type Scope, storage, untilStopped } from '@deadline/core/internal';
import type { ResolvedRedisOptions } from '../options.js';
import { boundNodeRedis } from './client.js';
import type { NodeRedisClientLike } from './types.js';

/** The parts of a node-redis cluster used: its slot map, which hands out the node clients. @internal */
export interface NodeRedisClusterSelf {
  _slots: {
    nodeClient(node: unknown): Promise<NodeRedisClientLike> | NodeRedisClientLike;
    getClientAndSlotNumber(...args: unknown[]): Promise<{ client: NodeRedisClientLike }>;
  };
}

/** The parts of a node-redis pool used. @internal */
export interface NodeRedisPoolSelf {
  execute<T>(fn: (client: NodeRedisClientLike) => T): Promise<Awaited<T>>;
}

/** The parts of a node-redis Sentinel (or a client lease of it) used. @internal */
export interface NodeRedisSentinelSelf {
  _execute<T>(isReadonly: unknown, fn: (client: NodeRedisClientLike) => T): Promise<Awaited<T>>;
}

const bound = new WeakMap<object, { resolved: ResolvedRedisOptions }>();

/** Re-reads `resolved` when `self` was bounded already; else remembers it. Whether it was new. */
function remember(self: object, resolved: ResolvedRedisOptions): { resolved: ResolvedRedisOptions } | undefined {
  const existing = bound.get(self);
  if (existing !== undefined) {
    existing.resolved = resolved;
    return undefined;
  }
  const state = { resolved };
  bound.set(self, state);
  return state;
}

/** Bounds every node client the cluster hands out. @internal */
export function boundNodeRedisCluster(self: NodeRedisClusterSelf, resolved: ResolvedRedisOptions): void {
  const state = remember(self, resolved);
  if (state === undefined) return;
  const slots = self._slots;
  const nodeClient = slots.nodeClient;
  const clientFor = slots.getClientAndSlotNumber;
  // Every way to a node's client (a command's, a redirect's, the app's own `nodeClient()`) goes through here.
  slots.nodeClient = function (this: unknown, node: unknown) {
    return Promise.resolve(nodeClient.call(this, node)).then((client) => boundNodeRedis(client, state.resolved));
  };
  // A command's way: its wait for the slot map ends with the request's context (the cluster's own rediscovery,
  // which asks for node clients too, is not cut).
  slots.getClientAndSlotNumber = function (this: unknown, ...args: unknown[]) {
    const scope = storage.getStore();
    if (scope === undefined) return clientFor.apply(this, args);
    return whileWaiting(scope, `${state.resolved.name} cluster routing`, (got) =>
      clientFor.apply(this, args).then((found) => {
        got();
        return found;
      }),
    );
  };
}

/** Bounds every client the pool hands out, and the wait for one. @internal */
export function boundNodeRedisPool(self: NodeRedisPoolSelf, resolved: ResolvedRedisOptions): void {
  const state = remember(self, resolved);
  if (state === undefined) return;
  const execute = self.execute;
  self.execute = function <T>(this: NodeRedisPoolSelf, fn: (client: NodeRedisClientLike) => T) {
    return handedOut(state, 'pool checkout', fn, (task) => execute.call(this, task));
  } as NodeRedisPoolSelf['execute'];
}

/** Bounds every client a Sentinel hands out (its master's, a replica's), and the wait for one. @internal */
export function boundNodeRedisSentinel(self: NodeRedisSentinelSelf, resolved: ResolvedRedisOptions): void {
  const state = remember(self, resolved);
  if (state === undefined) return;
  const execute = self._execute;
  self._execute = function <T>(
    this: NodeRedisSentinelSelf,
    isReadonly: unknown,
    fn: (client: NodeRedisClientLike) => T,
  ) {
    return handedOut(state, 'sentinel routing', fn, (task) => execute.call(this, isReadonly, task));
  } as NodeRedisSentinelSelf['_execute'];
}

/**
 * `fn` run, by `execute`, on the client handed out, bounded as a single client. Inside a deadline context the
 * wait for that client ends with the request (`waiting`: what the target names), and `fn` runs in its caller's
 * context: the client may come free in another request's (the one that hands it back).
 */
function handedOut<T>(
  state: { resolved: ResolvedRedisOptions },
  waiting: string,
  fn: (client: NodeRedisClientLike) => T,
  execute: (task: (client: NodeRedisClientLike) => T) => Promise<unknown>,
): Promise<unknown> {
  const scope = storage.getStore();
  if (scope === undefined) return execute((client) => fn(boundNodeRedis(client, state.resolved)));
  return whileWaiting(scope, `${state.resolved.name} ${waiting}`, (got) =>
    execute((client) => {
      got();
      return storage.run(scope, () => fn(boundNodeRedis(client, state.resolved)));
    }),
  );
}

/**
 * `wait(got)`'s result; if `scope` stops before `got()` is called, the typed error for a call to `target` that was
 * never made, at once. After `got()`, the command's own call answers for the stop.
 */
function whileWaiting<T>(scope: Scope, target: string, wait: (got: () => void) => Promise<T>): Promise<T> {
  let waiting = true;
  let stopped: StopReason | undefined;
  const untilGot = { onStop: (listener: StopListener) => scope.onStop((reason) => waiting && listener(reason)) };
  const got = () => {
    waiting = false;
  };
  return untilStopped(
    untilGot,
    () => wait(got),
    (reason) => (stopped = reason),
  ).catch((error: unknown) => {
    throw stopped !== undefined && error === stopped ? notCalled(stopped, target) : error;
  });
}

function notCalled(reason: StopReason, target: string): DeadlineExceededError | CancelledError {
  if (reason instanceof CancelledError) {
    return new CancelledError(`not calling ${target}: ${reason.message}`, { reason: reason.reason });
  }
  return new DeadlineExceededError({
    budgetMs: reason.budgetMs,
    elapsedMs: reason.elapsedMs,
    phase: 'before-call',
    target,
    whose: reason.whose,
    hop: reason.hop,
  });
}
