/**
 * Whether a pool's idle connections are as a fresh connection would be: no statement time limit left behind by a
 * statement that was stopped between setting it and resetting it (`@deadline/pg`'s `statement_timeout`,
 * `@deadline/mysql`'s session `max_statement_time` where a driver sets one). A connection left that way would cut
 * the next borrower's statement, whatever its own budget — the kind of damage a soak's faults are there to find.
 *
 * Every idle connection is checked out at once (so each is a different one), asked, and given back.
 */
import type { Pool as MysqlPool, RowDataPacket } from 'mysql2/promise';
import type pg from 'pg';

/** What the check found: how many idle connections it asked, and how many carried a limit of their own. */
export interface PoolSettings {
  connections: number;
  /** Each connection whose limit differs from what a new session gets: its value. */
  altered: string[];
}

/**
 * The idle connections of a pg pool: `statement_timeout` against the value `RESET` would restore.
 *
 * @example
 * ```ts
 * const { connections, altered } = await pgPoolSettings(pool);
 * if (altered.length > 0) console.log(`${altered.length} of ${connections} keep a statement_timeout`);
 * ```
 */
export async function pgPoolSettings(pool: pg.Pool): Promise<PoolSettings> {
  const clients = await Promise.all(Array.from({ length: pool.idleCount }, () => pool.connect()));
  try {
    const values = await Promise.all(
      clients.map(async (client) => {
        const { rows } = await client.query<{ setting: string; reset_val: string }>(
          "SELECT setting, reset_val FROM pg_settings WHERE name = 'statement_timeout'",
        );
        const row = rows[0];
        return row === undefined || row.setting === row.reset_val ? undefined : `statement_timeout=${row.setting}ms`;
      }),
    );
    return { connections: clients.length, altered: values.filter((v): v is string => v !== undefined) };
  } finally {
    for (const client of clients) client.release();
  }
}

/**
 * The idle connections of a mysql2 promise pool: the session's `max_statement_time` (MariaDB) or
 * `max_execution_time` (MySQL) against the server's global value.
 *
 * @example
 * ```ts
 * const { altered } = await mysqlPoolSettings(pool);
 * ```
 */
export async function mysqlPoolSettings(pool: MysqlPool): Promise<PoolSettings> {
  const idle = (pool as unknown as { pool?: { _freeConnections?: { length: number } } }).pool?._freeConnections;
  const connections = await Promise.all(Array.from({ length: idle?.length ?? 0 }, () => pool.getConnection()));
  try {
    const values = await Promise.all(
      connections.map(async (connection) => {
        const [rows] = await connection.query<RowDataPacket[]>('SELECT VERSION() AS version');
        const variable = /mariadb/i.test(String(rows[0]?.version)) ? 'max_statement_time' : 'max_execution_time';
        const [limits] = await connection.query<RowDataPacket[]>(
          `SELECT @@session.${variable} AS session, @@global.${variable} AS global`,
        );
        const limit = limits[0];
        return limit === undefined || String(limit.session) === String(limit.global)
          ? undefined
          : `${variable}=${limit.session}`;
      }),
    );
    return { connections: connections.length, altered: values.filter((v): v is string => v !== undefined) };
  } finally {
    for (const connection of connections) connection.release();
  }
}
