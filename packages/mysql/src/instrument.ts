/**
 * `instrumentMysql(mysql2)`: every connection the mysql2 module makes, whoever makes it — an ORM (Knex, TypeORM,
 * Sequelize, MikroORM, Drizzle, Kysely), a pool, the app itself, through the callback API or `mysql2/promise` —
 * bounded by the request's deadline.
 *
 * The patch is on the core connection's `query()` and `execute()` (`mysql2.Connection.prototype`), which every
 * API of the module ends in: a promise connection calls them with a callback, a pool's `query()` hands its
 * connection a prepared Query command. Inside a deadline context a statement with a callback runs through the
 * same Session as a wrapped pool's: the belt, the answer at the stop, `KILL QUERY` on a side connection, and the
 * gate that keeps the connection's next statement behind the KILL. Outside one, mysql2's own code runs, and a
 * statement sent on a connection whose KILL is still on its way waits for it.
 *
 * The connection is the ORM's: never released here, and closed only when it cannot be used safely (gone without
 * mysql2 having heard, or a KILL for it still on the server: session.ts). A statement stopped inside the ORM's
 * transaction fails (the server rolls back that statement); the ORM rolls the transaction back on the error.
 */
import { InvalidArgumentError } from '@deadline/core';
import { isUnpatched, replaceMethods, storage } from '@deadline/core/internal';
import type { Connection, FieldPacket, QueryResult } from 'mysql2/promise';
import { Backend } from './backend.js';
import type { Core } from './core-connection.js';
import {
  backendIn,
  boundedCheckout,
  type Checkout,
  CLEANUP,
  cleanupOf,
  type Instrumentation,
  instrumentOnce,
  metAlive,
  noteBounded,
  type PoolSide,
} from './instrumented.js';
import { type MysqlInstrumentOptions, resolveOptions } from './options.js';
import { type Kind, Session } from './session.js';
import { mysql2Sides } from './side-connection.js';
import type { ExecuteValues, QueryValues, Sql } from './types.js';
import { underCall } from './under-call.js';

/**
 * The parts of the `mysql2` module patched (`import mysql from 'mysql2'` fits; `mysql2/promise` runs on it).
 *
 * @example
 * ```ts
 * import mysql from 'mysql2';
 * const module: Mysql2Module = mysql;
 * ```
 */
export interface Mysql2Module {
  Connection: { prototype: object };
  /** Its pool: a caller's wait for a connection is bounded by its deadline, and called back in its context. */
  Pool?: { prototype: object } | undefined;
}

type Callback = (error: unknown, rows?: unknown, fields?: unknown) => void;
type CreateQuery = (sql: unknown, values: unknown, callback: unknown, config: object) => QueryCommand;
type Method = (this: CoreConnection, sql: unknown, values?: unknown, callback?: unknown) => unknown;

/** A mysql2 core connection, as the patch sees it. */
type CoreConnection = Core & {
  config: { host?: string; port?: number; socketPath?: string; user?: string; database?: string };
  threadId: number | null;
};

/** mysql2's Query command: what a pool's `query()` hands its connection, and what `query()` returns. */
interface QueryCommand {
  sql: string;
  values?: unknown;
  /** The options it was built with (`rowsAsArray`, `nestTables`, `typeCast`, …): mysql2 keeps them so. */
  _queryOptions?: object;
  /** Set by a pool from its configuration when the caller did not. */
  namedPlaceholders?: boolean;
  onResult?: Callback | undefined;
  emit(event: string, ...args: unknown[]): boolean;
  constructor: unknown;
}

/** mysql2's own methods, as they were before the patch. */
interface Originals {
  readonly query: Method;
  readonly execute: Method;
}

const PATCH = Symbol.for('@deadline/mysql.instrumentMysql');

/** Each connection's session (its gate persists from one statement to the next). */
const sessions = new WeakMap<object, Session>();

/**
 * Bounds every statement of every connection that `mysql2` makes, by the deadline of the context it is made in,
 * as `withDeadline()` bounds a wrapped pool's: not sent without time left, the server's own limit as a belt,
 * `KILL QUERY` on a side connection at the stop, the typed error. Outside a deadline context nothing changes.
 * Covers the callback API and `mysql2/promise` (which runs on it), pools and single connections. One side
 * connection per server and user sends the KILLs.
 *
 * Patches `mysql2.Connection.prototype.query` and `.execute` when called, never on import. Calling it again
 * changes only the options; it returns the function that undoes it.
 *
 * @example
 * ```ts
 * import mysql from 'mysql2';
 * import { Sequelize } from 'sequelize';
 * import { instrumentMysql } from '@deadline/mysql';
 *
 * instrumentMysql(mysql); // once, before the ORM connects
 * const sequelize = new Sequelize(process.env.DATABASE_URL, { dialect: 'mysql', dialectModule: mysql });
 * ```
 */
export function instrumentMysql(mysql2: Mysql2Module, options?: MysqlInstrumentOptions): () => void {
  const prototype = (mysql2 as Partial<Mysql2Module> | null | undefined)?.Connection?.prototype as
    | { query?: unknown; execute?: unknown }
    | undefined;
  if (typeof prototype?.query !== 'function' || typeof prototype.execute !== 'function') {
    throw new InvalidArgumentError('mysql2', 'the mysql2 module (import mysql from "mysql2")', mysql2);
  }
  resolveOptions(options, undefined); // a bad option fails here, naming it
  const target = prototype as Originals;
  const originals: Originals = { query: target.query, execute: target.execute };
  return instrumentOnce(prototype, PATCH, options, (state) => {
    const restoreConnection = replaceMethods(prototype, {
      query: bounded(state, originals, 'query'),
      execute: bounded(state, originals, 'execute'),
    });
    const pool = mysql2.Pool?.prototype as { getConnection?: unknown } | undefined;
    const restorePool =
      typeof pool?.getConnection === 'function'
        ? replaceMethods(pool, {
            getConnection: boundedCheckout(pool.getConnection as Checkout, mysql2PoolSide(state)),
          })
        : () => true;
    return () => restoreConnection() && restorePool();
  });
}

/** The backend of the server and user `core` is connected to (created with the first such connection). */
function backendFor(state: Instrumentation, core: CoreConnection): Backend {
  return backendOfConfig(state, core.config);
}

/** The backend of the server and user a connection configuration names (a connection's, or a pool's). */
function backendOfConfig(state: Instrumentation, config: CoreConnection['config']): Backend {
  const { host, port, socketPath, user, database } = config;
  return backendIn(
    state.backends,
    [host, port, socketPath, user, database],
    () => new Backend(resolveOptions(state.options, database), mysql2Sides(config)),
  );
}

/** mysql2's pool as the bounded checkout sees it: its connections' configuration, and how one goes back. */
function mysql2PoolSide(state: Instrumentation): PoolSide {
  return {
    backendOf: (pool) =>
      backendOfConfig(
        state,
        (pool as { config: { connectionConfig: CoreConnection['config'] } }).config.connectionConfig,
      ),
    release: (_pool, connection) => (connection as { release(): void }).release(),
  };
}

function isCommand(value: unknown): value is QueryCommand {
  const candidate = value as Partial<QueryCommand> | null;
  return (
    typeof candidate === 'object' &&
    candidate !== null &&
    typeof candidate.emit === 'function' &&
    typeof candidate.sql === 'string'
  );
}

/** `query()` or `execute()`, bounded inside a deadline context when called with a callback. */
function bounded(state: Instrumentation, originals: Originals, kind: Kind): Method {
  const original = originals[kind];
  return function statement(this: CoreConnection, sql, values, callback) {
    // Sent by withDeadline()'s wrapper, which bounds it already.
    if (isUnpatched()) return original.call(this, sql, values, callback);
    const pending = cleanupOf(this);
    const scope = storage.getStore();
    // Outside a deadline with no KILL pending (most statements of most apps): one store read, nothing parsed.
    if (pending === undefined && (scope === undefined || scope.deadline.isNone || !state.enabled)) {
      return original.call(this, sql, values, callback);
    }
    const command = kind === 'query' && isCommand(sql) ? sql : undefined;
    const done = command !== undefined ? command.onResult : typeof values === 'function' ? values : callback;
    const text = command?.sql ?? (typeof sql === 'string' ? sql : (sql as { sql?: unknown } | null)?.sql);
    const ours =
      state.enabled &&
      scope !== undefined &&
      !scope.deadline.isNone &&
      typeof done === 'function' &&
      typeof text === 'string' &&
      !CLEANUP.test(text);
    if (!ours) {
      // A streamed statement (no callback) is the driver's business, at once; one with a callback waits for the
      // KILL still on its way, if any, so that it cannot be what that KILL stops.
      if (pending === undefined || typeof done !== 'function') return original.call(this, sql, values, callback);
      if (kind === 'execute') {
        // Block bodies: a mysql2 command is a thenable that throws when adopted by a promise.
        void pending.then(() => {
          original.call(this, sql, values, callback);
        });
        return commandFor(this, '', undefined, undefined);
      }
      const later = command ?? commandFor(this, sql, values, callback);
      void pending.then(() => {
        original.call(this, later);
      });
      return later;
    }
    const session = sessionOf(this, state, originals);
    const met = metAlive(this, pingOf(this));
    // A pool's query() hands over a command built from the caller's arguments: its options and values.
    const statementSql = command !== undefined ? optionsOf(command) : (sql as Sql);
    const args = command !== undefined ? command.values : typeof values === 'function' ? undefined : values;
    const run = underCall(backendFor(state, this), async (call) => {
      // A stop meanwhile is the session's to answer: a call already stopped sends nothing.
      if (met !== undefined) await call.race(() => met).catch(() => {});
      return session.run<QueryResult>(kind, statementSql, args as QueryValues | ExecuteValues | undefined, call);
    });
    noteBounded(this, session, run);
    // What mysql2 returns is a command the caller may hold (Sequelize sets its listener limit): one that is
    // never sent, and ends when the statement's caller has its answer (a pool's query() releases on it).
    const returned = command ?? commandFor(this, '', undefined, undefined);
    const end = () => process.nextTick(() => returned.emit('end'));
    // The caller's callback outside the promise chain, as mysql2 calls it: what it throws is thrown.
    run.then(
      ([rows, fields]: [QueryResult, FieldPacket[]]) => {
        process.nextTick(done as Callback, null, rows, fields);
        end();
      },
      (error: unknown) => {
        process.nextTick(done as Callback, error);
        end();
      },
    );
    return returned;
  };
}

/** The statement a pool's command stands for: its text, with the options it was built with. */
function optionsOf(command: QueryCommand): Sql {
  const options: Record<string, unknown> = { ...command._queryOptions, sql: command.sql };
  delete options.values; // passed on their own
  if (command.namedPlaceholders !== undefined) options.namedPlaceholders = command.namedPlaceholders;
  return options as unknown as Sql;
}

/** A Query command from `query()`'s arguments, as mysql2 builds one (not sent). */
function commandFor(core: CoreConnection, sql: unknown, values: unknown, callback: unknown): QueryCommand {
  const build = (core.constructor as unknown as { createQuery: CreateQuery }).createQuery;
  return build(sql, values, callback, core.config);
}

/** mysql2's COM_PING for a connection logged in; `undefined` before (its handshake is its sighting then). */
function pingOf(core: CoreConnection): ((done: () => void) => void) | undefined {
  const ready = core as unknown as { authorized?: boolean; ping?: (callback: () => void) => unknown };
  if (ready.authorized !== true || typeof ready.ping !== 'function') return undefined;
  return (done) => ready.ping?.(done);
}

/**
 * The connection's session, sending through mysql2's own (unpatched) methods: a promise connection's shape over
 * the core one, as the Session expects.
 */
function sessionOf(core: CoreConnection, state: Instrumentation, originals: Originals): Session {
  let session = sessions.get(core);
  if (session === undefined) {
    const send =
      (method: Method) =>
      (sql: unknown, values?: unknown): Promise<[QueryResult, FieldPacket[]]> =>
        new Promise((resolve, reject) => {
          method.call(core, sql, values, (error: unknown, rows: unknown, fields: unknown) =>
            error ? reject(error) : resolve([rows as QueryResult, fields as FieldPacket[]]),
          );
        });
    const facade = {
      connection: core,
      get threadId() {
        return core.threadId;
      },
      query: send(originals.query),
      execute: send(originals.execute),
    } as unknown as Connection;
    session = new Session(facade, backendFor(state, core));
    sessions.set(core, session);
  }
  return session;
}
