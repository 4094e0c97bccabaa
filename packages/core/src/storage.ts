/**
 * The one AsyncLocalStorage of the process. It lives on `globalThis` under a versioned `Symbol.for` key so that
 * two copies of this package in one app (a nested `node_modules`, an ESM import beside a CJS `require`) see the
 * same contexts. The version names the protocol between copies: the scope fields and methods that code from
 * another copy may call. Bump it only with an incompatible change to that protocol.
 */
import { AsyncLocalStorage } from 'node:async_hooks';
import type { Scope } from './scope.js';

const kStorage = Symbol.for('@deadline/core/storage@1');

type WithStorage = typeof globalThis & { [kStorage]?: AsyncLocalStorage<Scope> };

/** The process-wide storage. Library code only ever calls `run()` on it, never `enterWith()`. */
export const storage: AsyncLocalStorage<Scope> = ((globalThis as WithStorage)[kStorage] ??=
  new AsyncLocalStorage<Scope>());
