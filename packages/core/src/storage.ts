/**
 * The one AsyncLocalStorage of the process. It lives on `globalThis` under a versioned `Symbol.for` key so that
 * two copies of this package in one app (a nested `node_modules`, an ESM import beside a CJS `require`) see the
 * same contexts. The version names the protocol between copies: the scope fields and methods that code from
 * another copy may call. Bump it only with an incompatible change to that protocol.
 *
 * Node has two implementations of AsyncLocalStorage: async_hooks (Node 20 and 22) and AsyncContextFrame (the
 * default from Node 24). This package uses only what they do alike — `run()` and `getStore()` — and never
 * `enterWith()`, `exit()` or `disable()`, whose edges differ (packages/core/test/async-context.test.ts pins
 * both what the library relies on and those differences).
 */
import { AsyncLocalStorage } from 'node:async_hooks';
import type { Scope } from './scope.js';

const kStorage = Symbol.for('@deadline/core/storage@1');

type WithStorage = typeof globalThis & { [kStorage]?: AsyncLocalStorage<Scope> };

/** The process-wide storage. Library code only ever calls `run()` on it, never `enterWith()`. */
export const storage: AsyncLocalStorage<Scope> = ((globalThis as WithStorage)[kStorage] ??=
  new AsyncLocalStorage<Scope>());

/**
 * Runs `fn` outside any context: for what outlives the request that happened to start it (a side connection,
 * a pooled socket), which must neither keep that request's context alive nor run anything in it.
 *
 * Not `storage.exit(fn)`: on async_hooks, `exit()` only switches the storage off for the moment, and a `run()`
 * inside `fn` (a hook, a diagnostics subscriber) switches it back on — the rest of `fn`, and every timer and
 * socket it starts after that, are in the caller's context again; an `enterWith()` inside `fn` even outlives
 * it. On AsyncContextFrame `exit()` is `run(undefined)`, which behaves the same on both.
 */
export function outsideContext<R>(fn: () => R): R {
  return storage.run(undefined as unknown as Scope, fn);
}
