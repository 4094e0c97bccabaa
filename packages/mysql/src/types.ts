/**
 * The shapes `withDeadline()` returns: mysql2's promise signatures for `query()` and `execute()`, plus what each
 * kind of wrapped object adds (a pool's checkout and transactions, a pooled connection's release).
 */
import type { Connection, FieldPacket, Pool, PoolConnection, QueryOptions, QueryResult } from 'mysql2/promise';

/** @internal The statement: SQL text, or mysql2's options object with `sql` in it. */
export type Sql = string | QueryOptions;
/** @internal Placeholder values, as mysql2's `query()` takes them (whatever the installed version's types say). */
export type QueryValues = Parameters<Connection['query']>[1];
/** @internal Placeholder values, as mysql2's `execute()` takes them. */
export type ExecuteValues = Parameters<Connection['execute']>[1];

/**
 * `query()` and `execute()` with mysql2's promise signatures and results, each bounded by the current request's
 * deadline: not sent without time left, stopped on the server (KILL QUERY) when the budget runs out or the
 * request is cancelled. Outside a deadline context they run exactly as mysql2 runs them.
 *
 * @example
 * ```ts
 * async function stock(db: DeadlineQueryable, sku: string) {
 *   const [rows] = await db.execute<RowDataPacket[]>('SELECT qty FROM stock WHERE sku = ?', [sku]);
 *   return rows[0]?.qty ?? 0;
 * }
 * ```
 */
export interface DeadlineQueryable {
  /** mysql2's `query()` (text protocol; values are escaped into the SQL by mysql2), under the deadline. */
  query<T extends QueryResult = QueryResult>(
    sql: string | QueryOptions,
    values?: QueryValues,
  ): Promise<[T, FieldPacket[]]>;
  /** mysql2's `execute()` (a prepared statement, cached per connection by mysql2), under the deadline. */
  execute<T extends QueryResult = QueryResult>(
    sql: string | QueryOptions,
    values?: ExecuteValues,
  ): Promise<[T, FieldPacket[]]>;
}

/**
 * The statements of one transaction, run by {@link DeadlinePool.transaction}: all on the transaction's connection,
 * all under its one budget. Usable only inside the callback.
 *
 * @example
 * ```ts
 * await db.transaction(async (tx: DeadlineTransaction) => {
 *   await tx.execute('UPDATE stock SET qty = qty - ? WHERE sku = ?', [1, 'A-1']);
 *   await tx.execute('INSERT INTO orders (sku) VALUES (?)', ['A-1']);
 * });
 * ```
 */
export type DeadlineTransaction = DeadlineQueryable;

/**
 * A mysql2 promise pool under the deadline, as {@link withDeadline} returns it.
 *
 * @example
 * ```ts
 * import { withDeadline } from '@deadline/mysql';
 * import { createPool } from 'mysql2/promise';
 *
 * const db: DeadlinePool = withDeadline(createPool({ host: 'db', user: 'app', database: 'orders' }));
 * const [rows] = await db.query<RowDataPacket[]>('SELECT * FROM orders WHERE id = ?', [42]);
 * ```
 */
export interface DeadlinePool extends DeadlineQueryable {
  /** The mysql2 pool given to `withDeadline()`: using it directly bypasses the deadline. */
  readonly pool: Pool;
  /**
   * Checks out a connection, waiting for one at most as long as the budget allows. Its `query()` and `execute()`
   * are bounded like the pool's; give it back with `release()`.
   */
  getConnection(): Promise<DeadlinePoolConnection>;
  /**
   * Runs `fn` in a transaction: `START TRANSACTION`, `fn`, `COMMIT`; `ROLLBACK` if `fn` throws. The whole of it,
   * checkout included, is one call under the current deadline: when the budget runs out or the request is
   * cancelled, the running statement is killed, the promise rejects at once with the typed error, and the
   * transaction is rolled back behind it (the connection is destroyed if its state is unknown).
   */
  transaction<R>(fn: (tx: DeadlineTransaction) => Promise<R>): Promise<R>;
  /** Closes the side connection used for KILLs, then the pool (mysql2's `pool.end()`). Idempotent. */
  end(): Promise<void>;
}

/**
 * A connection checked out with {@link DeadlinePool.getConnection}.
 *
 * @example
 * ```ts
 * const conn: DeadlinePoolConnection = await db.getConnection();
 * try {
 *   await conn.query('SET @batch = ?', [7]);
 *   await conn.execute('UPDATE jobs SET batch = @batch WHERE state = ?', ['ready']);
 * } finally {
 *   conn.release();
 * }
 * ```
 */
export interface DeadlinePoolConnection extends DeadlineQueryable {
  /** The mysql2 pool connection: using it directly bypasses the deadline. */
  readonly connection: PoolConnection;
  /**
   * Gives the connection back to the pool once its last statement's cleanup is done; destroys it instead when a
   * KILL left it in a state that cannot be vouched for. Idempotent.
   */
  release(): void;
  /** Closes the connection and removes it from the pool. */
  destroy(): void;
}

/**
 * A single mysql2 promise connection under the deadline, as {@link withDeadline} returns it.
 *
 * @example
 * ```ts
 * import { withDeadline } from '@deadline/mysql';
 * import { createConnection } from 'mysql2/promise';
 *
 * const db: DeadlineConnection = withDeadline(await createConnection({ host: 'db', user: 'app', database: 'orders' }));
 * await db.execute('DELETE FROM carts WHERE updated_at < NOW() - INTERVAL 1 DAY');
 * ```
 */
export interface DeadlineConnection extends DeadlineQueryable {
  /** The mysql2 connection given to `withDeadline()`: using it directly bypasses the deadline. */
  readonly connection: Connection;
  /**
   * As {@link DeadlinePool.transaction}, on this connection. Statements run on the connection itself while the
   * transaction is open become part of it: run them through `tx`.
   */
  transaction<R>(fn: (tx: DeadlineTransaction) => Promise<R>): Promise<R>;
  /** Closes the side connection used for KILLs, then the connection (mysql2's `end()`). Idempotent. */
  end(): Promise<void>;
}
