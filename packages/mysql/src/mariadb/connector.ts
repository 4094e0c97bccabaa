/**
 * The `mariadb` connector (npm `mariadb`, 3.x) as this package sees it. Every API of the connector — promise and
 * callback, connection, pool and cluster — ends in the methods of one class, `lib/connection.js`, each called as
 * `method(cmdParam, resolve, reject)`.
 *
 * The module does not export that class, and since 3.5 it is an ES module whose `exports` map allows no deep
 * import, with a bundled CommonJS build beside it (a class of its own). So the class is taken from the module
 * handed over, whichever build that is: its `createConnection()` is asked for a connection, and stopped inside
 * the class's constructor, at the constructor's first listener, before any socket is made.
 */
import { EventEmitter } from 'node:events';
import type { Socket } from 'node:net';
import { InvalidArgumentError } from '@deadline/core';

/** @internal What a statement method takes: the SQL, its values, and the caller's per-statement options. */
export interface CmdParam {
  sql?: unknown;
  values?: unknown;
  opts?: unknown;
}

/** @internal The connector's `method(cmdParam, resolve, reject)`. */
export type Method = (
  this: MariadbConnection,
  cmdParam: CmdParam,
  resolve: (value?: unknown) => void,
  reject: (error: unknown) => void,
) => void;

/** @internal The methods this package patches or calls on the connector's connection. */
export interface MariadbMethods {
  query: Method;
  prepareExecute: Method;
  batch: Method;
  changeTransaction: Method;
  ping: Method;
  reset: Method;
  end: Method;
}

/** @internal The connector's connection (`lib/connection.js`). */
export interface MariadbConnection extends MariadbMethods {
  /** Where it is in its life: {@link INIT_CMD} while the connector sends its own statements after logging in. */
  readonly status: number;
  connect(): Promise<unknown>;
  destroy(): void;
  readonly threadId: number | null;
  readonly info: { serverVersion?: { raw?: unknown } | null } | null;
  readonly socket: Socket | null | undefined;
  /** The connection's parsed options (host, user, ssl, …), on an event emitter of the connector's. */
  readonly opts: Record<string, unknown>;
  on(event: 'end' | 'error', listener: () => void): unknown;
}

/** @internal The connector's pool (`lib/pool.js`): its promise, callback and cluster APIs all check out here. */
export interface MariadbPoolClass {
  prototype: { getConnection: (cmdParam: unknown, callback?: unknown) => void };
}

/**
 * @internal The status of a connection logged in and running the connector's own statements (session variables,
 * charset, time zone, `initSql`): the same number in every 3.x release.
 */
export const INIT_CMD = 4;

/** @internal The class itself: `new Connection(options)` makes an unconnected one. */
export interface MariadbConnectionClass {
  new (options: object): MariadbConnection;
  prototype: MariadbConnection;
}

/**
 * The `mariadb` module (`import mariadb from 'mariadb'`, `import * as mariadb`, `require('mariadb')`, or
 * `mariadb/callback`): the copy your ORM loads. Since mariadb 3.5, `import` and `require()` load two builds with
 * a class each: pass the one the ORM uses (Sequelize `require()`s it; Prisma's adapter, imported as an ES module,
 * imports it).
 *
 * @example
 * ```ts
 * import mariadb from 'mariadb';
 * const module: MariadbModule = mariadb;
 * ```
 */
export type MariadbModule = object;

const METHODS = ['query', 'prepareExecute', 'batch', 'changeTransaction', 'ping', 'reset', 'end'] as const;

function isConnectionClass(value: unknown): value is MariadbConnectionClass {
  const prototype = (value as { prototype?: Record<string, unknown> } | null | undefined)?.prototype;
  return typeof value === 'function' && METHODS.every((method) => typeof prototype?.[method] === 'function');
}

function isPoolClass(value: unknown): value is MariadbPoolClass {
  return typeof (value as { prototype?: { getConnection?: unknown } } | null)?.prototype?.getConnection === 'function';
}

/**
 * The class of what `module[factory]` begins to make, stopped in its constructor where it adds its first listener,
 * `firstListener` (`close_prepare` for a connection, `_idle` for a pool).
 */
function classMadeBy(module: object, factory: string, firstListener: string): unknown {
  const make = (module as Record<string, unknown>)[factory];
  if (typeof make !== 'function') return undefined;
  const stop = new Error('stopped in the constructor');
  const on = EventEmitter.prototype.on;
  let made: object | undefined;
  // Synchronous: nothing else runs while the listener method is replaced.
  EventEmitter.prototype.on = function caught(this: object, event, listener) {
    if (event === firstListener && made === undefined) {
      made = this;
      throw stop;
    }
    return on.call(this, event, listener);
  };
  try {
    // Were the constructor ever to add no such listener: an address that refuses at once, nothing reached.
    const returned = make.call(module, { host: '127.0.0.1', port: 1, connectTimeout: 1, connectionLimit: 1 });
    void Promise.resolve(returned).catch(() => {});
    (returned as { end?: (callback?: () => void) => unknown } | undefined)?.end?.(() => {});
  } catch (error) {
    if (error !== stop) return undefined;
  } finally {
    EventEmitter.prototype.on = on;
  }
  return made?.constructor;
}

/** @internal The classes every API of one copy of the connector ends in. */
export interface Connector {
  Connection: MariadbConnectionClass;
  Pool: MariadbPoolClass;
}

/** @internal The classes of the `mariadb` copy `mariadb` is; throws naming the argument otherwise. */
export function connectorOf(mariadb: unknown): Connector {
  if (typeof mariadb === 'object' && mariadb !== null) {
    // `import * as mariadb` hands over a namespace: its functions are the module's.
    const Connection = classMadeBy(mariadb, 'createConnection', 'close_prepare');
    const Pool = classMadeBy(mariadb, 'createPool', '_idle');
    if (isConnectionClass(Connection) && isPoolClass(Pool)) return { Connection, Pool };
  }
  throw new InvalidArgumentError('mariadb', 'the mariadb module (import mariadb from "mariadb")', mariadb);
}
