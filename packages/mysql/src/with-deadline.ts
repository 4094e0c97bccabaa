/**
 * The entry point: wraps the mysql2 promise pool or connection the application created (nothing is patched, the
 * original keeps working as before) in one whose statements are bounded by the request's deadline.
 */
import { InvalidArgumentError } from '@deadline/core';
import type { Connection, Pool } from 'mysql2/promise';
import { Backend } from './backend.js';
import { SingleConnection } from './connection.js';
import { type MysqlDeadlineOptions, resolveOptions } from './options.js';
import { DeadlinePoolImpl } from './pool.js';
import { mysql2Sides } from './side-connection.js';
import type { DeadlineConnection, DeadlinePool } from './types.js';

/** What we read of mysql2's parsed connection config. */
type ConnectionConfig = { database?: unknown };

function isObject(value: unknown): value is Record<string, unknown> {
  return typeof value === 'object' && value !== null;
}

/** mysql2/promise's pool: the callback pool behind `.pool`, whose config holds the connections' config. */
function poolConfig(value: Record<string, unknown>): ConnectionConfig | undefined {
  if (typeof value.getConnection !== 'function' || !isObject(value.pool)) return undefined;
  const config = value.pool.config;
  return isObject(config) && isObject(config.connectionConfig) ? config.connectionConfig : undefined;
}

/** mysql2/promise's connection: the callback connection behind `.connection`, with its config. */
function connectionConfig(value: Record<string, unknown>): ConnectionConfig | undefined {
  if (typeof value.query !== 'function' || !isObject(value.connection)) return undefined;
  const config = value.connection.config;
  return isObject(config) ? config : undefined;
}

/**
 * Wraps a mysql2 promise pool (`createPool` from `mysql2/promise`) or promise connection, so that every statement
 * run through the returned object is bounded by the current request's deadline:
 *
 * - not sent when too little time is left (`DeadlineExceededError`, phase `before-call`; the pool is not touched);
 * - the pool checkout waits at most for what is left, in a queue that serves newest first once the oldest waiters
 *   cannot be served in time (`checkoutOrder`);
 * - the statement carries a server-side limit (MariaDB `max_statement_time`, MySQL `MAX_EXECUTION_TIME`);
 * - when the budget runs out, or the request is cancelled, `KILL QUERY` stops it on the server and the promise
 *   rejects at once with `DeadlineExceededError` (`during-call`) or `CancelledError`.
 *
 * Outside a deadline context, statements run exactly as mysql2 runs them. Options are checked at once; a bad
 * value throws `InvalidArgumentError` naming it.
 *
 * @example
 * ```ts
 * import { withDeadline } from '@deadline/mysql';
 * import { createPool } from 'mysql2/promise';
 *
 * const db = withDeadline(createPool({ host: 'db', user: 'app', database: 'orders', connectionLimit: 10 }), {
 *   marginMs: 20,
 * });
 *
 * app.get('/orders/:id', async (request) => {
 *   const [rows] = await db.execute<RowDataPacket[]>('SELECT * FROM orders WHERE id = ?', [request.params.id]);
 *   return rows[0];
 * });
 * ```
 */
export function withDeadline(pool: Pool, options?: MysqlDeadlineOptions): DeadlinePool;
export function withDeadline(connection: Connection, options?: MysqlDeadlineOptions): DeadlineConnection;
export function withDeadline(
  poolOrConnection: Pool | Connection,
  options?: MysqlDeadlineOptions,
): DeadlinePool | DeadlineConnection {
  const value = poolOrConnection as unknown;
  if (isObject(value)) {
    const fromPool = poolConfig(value);
    if (fromPool !== undefined) {
      const resolved = resolveOptions(options, fromPool.database);
      const backend = new Backend(resolved, mysql2Sides(fromPool));
      return new DeadlinePoolImpl(poolOrConnection as Pool, backend, resolved.checkoutOrder);
    }
    const fromConnection = connectionConfig(value);
    if (fromConnection !== undefined) {
      const backend = new Backend(resolveOptions(options, fromConnection.database), mysql2Sides(fromConnection));
      return new SingleConnection(poolOrConnection as Connection, backend);
    }
  }
  throw new InvalidArgumentError(
    'poolOrConnection',
    'a Pool or Connection from mysql2/promise (for a callback-style one, pass its .promise())',
    value,
  );
}
