/**
 * `instrumentMariadb(mariadb)`: every connection the `mariadb` connector makes, whoever makes it — Prisma's
 * MariaDB adapter, Sequelize's `mariadb` dialect, a pool, the app itself, promise or callback API — bounded by
 * the request's deadline, as `instrumentMysql()` bounds mysql2's.
 *
 * The patch is on the connector's connection class, whose methods every API ends in: `query()` (text protocol),
 * `prepareExecute()` (`execute()`), `batch()`. Inside a deadline context each runs through the same Session as
 * mysql2's statements: the belt, the answer at the stop, `KILL QUERY` on a side connection (made by the connector,
 * with the connection's own options), and the gate that keeps the connection's next statement behind the KILL.
 * What the connector or a pool does between statements (a transaction's COMMIT or ROLLBACK on release, the
 * validation ping, `reset()`) waits for that KILL too. Outside a deadline context the connector's own code runs.
 *
 * Streams (`queryStream()`) are the connector's business, as with mysql2. The connection is the application's:
 * never destroyed or released here.
 */
import { isUnpatched, replaceMethods, storage } from '@deadline/core/internal';
import { Backend } from '../backend.js';
import { OWN_LIMIT } from '../belt.js';
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
} from '../instrumented.js';
import { type MysqlInstrumentOptions, resolveOptions } from '../options.js';
import { type Kind, Session } from '../session.js';
import type { Sql } from '../types.js';
import { underCall } from '../under-call.js';
import {
  connectorOf,
  INIT_CMD,
  type MariadbConnection,
  type MariadbConnectionClass,
  type MariadbMethods,
  type MariadbModule,
  type Method,
} from './connector.js';
import { asBatch, sessionViewOf } from './session-view.js';
import { mariadbSides } from './side-connection.js';

/** The connector's class, and its own methods as they were before the patch. */
interface Driver {
  readonly Connection: MariadbConnectionClass;
  readonly original: MariadbMethods;
}

const PATCH = Symbol.for('@deadline/mysql.instrumentMariadb');

/** Each connection's session (its gate persists from one statement to the next). */
const sessions = new WeakMap<object, Session>();

/**
 * Bounds every statement of every connection that the `mariadb` connector makes, by the deadline of the context
 * it is made in: not sent without time left, the server's own limit as a belt, `KILL QUERY` on a side connection
 * at the stop, the typed error. Outside a deadline context nothing changes. Covers `query()`, `execute()` and
 * `batch()` of connections, pools and clusters, promise and callback APIs.
 *
 * Patches the connector's connection class when called, never on import. Calling it again changes only the
 * options; it returns the function that undoes it. Pass the copy of `mariadb` your ORM loads (Prisma's adapter
 * pins one: with npm it is the top-level `mariadb` when the application does not pin another).
 *
 * @example
 * ```ts
 * import mariadb from 'mariadb';
 * import { PrismaMariaDb } from '@prisma/adapter-mariadb';
 * import { instrumentMariadb } from '@deadline/mysql';
 *
 * instrumentMariadb(mariadb); // once, before the first query
 * const prisma = new PrismaClient({ adapter: new PrismaMariaDb(process.env.DATABASE_URL) });
 * ```
 */
export function instrumentMariadb(mariadb: MariadbModule, options?: MysqlInstrumentOptions): () => void {
  const { Connection, Pool } = connectorOf(mariadb);
  resolveOptions(options, undefined); // a bad option fails here, naming it
  const { query, prepareExecute, batch, changeTransaction, ping, reset, end } = Connection.prototype;
  const driver: Driver = {
    Connection,
    original: { query, prepareExecute, batch, changeTransaction, ping, reset, end },
  };
  return instrumentOnce(Connection.prototype, PATCH, options, (state) => {
    const restoreConnection = replaceMethods(Connection.prototype, {
      query: bounded(state, driver, 'query', query),
      prepareExecute: bounded(state, driver, 'execute', prepareExecute),
      batch: bounded(state, driver, 'batch', batch),
      changeTransaction: afterCleanup(changeTransaction),
      ping: afterCleanup(ping),
      reset: afterCleanup(reset),
    });
    const restorePool = replaceMethods(Pool.prototype, {
      getConnection: boundedCheckout(Pool.prototype.getConnection as Checkout, mariadbPoolSide(state, driver)),
    });
    return () => restoreConnection() && restorePool();
  });
}

/** The backend of the server and user `conn` is connected to (created with the first such connection). */
function backendFor(state: Instrumentation, driver: Driver, conn: MariadbConnection): Backend {
  return backendOfOptions(state, driver, conn.opts);
}

/** The backend of the server and user connection options name (a connection's, or a pool's `connOptions`). */
function backendOfOptions(state: Instrumentation, driver: Driver, opts: Record<string, unknown>): Backend {
  const { host, port, socketPath, user, database } = opts;
  return backendIn(
    state.backends,
    [host, port, socketPath, user, database],
    () => new Backend(resolveOptions(state.options, database), mariadbSides(driver.Connection, opts)),
  );
}

/** The connector's pool as the bounded checkout sees it: its connections' options, and its own release. */
function mariadbPoolSide(state: Instrumentation, driver: Driver): PoolSide {
  return {
    backendOf: (pool) =>
      backendOfOptions(state, driver, (pool as { opts: { connOptions: Record<string, unknown> } }).opts.connOptions),
    release: (pool, connection) => (pool as { release(connection: unknown): void }).release(connection),
  };
}

/** A method that does its work once the KILL for the connection's last bounded statement, if any, is done. */
function afterCleanup(original: Method): Method {
  return function afterKill(cmdParam, resolve, reject) {
    const pending = cleanupOf(this);
    if (pending === undefined) return original.call(this, cmdParam, resolve, reject);
    void pending.then(() => original.call(this, cmdParam, resolve, reject));
  };
}

/** `query()`, `prepareExecute()` or `batch()`, bounded inside a deadline context. */
function bounded(state: Instrumentation, driver: Driver, kind: Kind | 'batch', original: Method): Method {
  const later = afterCleanup(original);
  return function statement(cmdParam, resolve, reject) {
    // Sent by a wrapper that bounds it already.
    if (isUnpatched()) return original.call(this, cmdParam, resolve, reject);
    const scope = storage.getStore();
    const ours =
      state.enabled &&
      scope !== undefined &&
      !scope.deadline.isNone &&
      typeof cmdParam?.sql === 'string' &&
      !CLEANUP.test(cmdParam.sql) &&
      // What the connector sends as it logs in (session variables, initSql) is its own; a caller's statement
      // queued before then is the caller's.
      this.status !== INIT_CMD;
    if (!ours) return later.call(this, cmdParam, resolve, reject);
    const session = sessionOf(this, state, driver);
    const met = metAlive(this, (done) => driver.original.ping.call(this, {}, done, done));
    // A batch is prepared and executed, as execute() is: the session's limit is set around it. A statement with
    // a `timeout` of its own gets the connector's `SET STATEMENT … FOR` as it is sent: none of ours besides.
    const own = typeof (cmdParam.opts as { timeout?: unknown } | undefined)?.timeout === 'number';
    const marked = own ? { ...cmdParam, [OWN_LIMIT]: true } : cmdParam;
    const param = kind === 'batch' ? asBatch({ ...marked }) : marked;
    const run = underCall(backendFor(state, driver, this), async (call) => {
      // A stop meanwhile is the session's to answer: a call already stopped sends nothing.
      if (met !== undefined) await call.race(() => met).catch(() => {});
      return session.run(kind === 'batch' ? 'execute' : kind, param as Sql, undefined, call);
    });
    noteBounded(this, session, run);
    // The caller's callbacks outside the promise chain, as the connector calls them.
    run.then(
      ([rows]) => process.nextTick(resolve, rows),
      (error: unknown) => process.nextTick(reject, error),
    );
  };
}

/** The connection's session, sending through the connector's own (unpatched) methods. */
function sessionOf(conn: MariadbConnection, state: Instrumentation, driver: Driver): Session {
  let session = sessions.get(conn);
  if (session === undefined) {
    session = new Session(sessionViewOf(conn, driver.original), backendFor(state, driver, conn));
    sessions.set(conn, session);
  }
  return session;
}
