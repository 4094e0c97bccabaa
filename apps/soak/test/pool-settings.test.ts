/** A connection left with a statement limit of its own is found among a pool's idle ones; a clean pool is clean. */
import { createPool } from 'mysql2/promise';
import pg from 'pg';
import { describe, expect, it } from 'vitest';
import { MARIADB, POSTGRES, requireService } from '../../../test/support/services.ts';
import { mysqlPoolSettings, pgPoolSettings } from '../src/pool-settings.ts';

const onPostgres = await requireService(POSTGRES);
const onMariadb = await requireService(MARIADB);

describe.runIf(onPostgres)('pgPoolSettings', () => {
  it('asks every idle connection, and names the one that keeps a statement_timeout', async () => {
    const pool = new pg.Pool({ connectionString: POSTGRES.url, max: 3 });
    try {
      const clients = await Promise.all([pool.connect(), pool.connect(), pool.connect()]);
      await clients[1]?.query('SET statement_timeout = 1234');
      for (const client of clients) client.release();
      expect(await pgPoolSettings(pool)).toEqual({ connections: 3, altered: ['statement_timeout=1234ms'] });
      // RESET, as the library does after its statement: clean again.
      const again = await Promise.all([pool.connect(), pool.connect(), pool.connect()]);
      for (const client of again) await client.query('RESET statement_timeout');
      for (const client of again) client.release();
      expect(await pgPoolSettings(pool)).toEqual({ connections: 3, altered: [] });
    } finally {
      await pool.end();
    }
  });
});

describe.runIf(onMariadb)('mysqlPoolSettings', () => {
  it('asks every idle connection, and names the one that keeps a max_statement_time', async () => {
    const pool = createPool({ uri: MARIADB.url, connectionLimit: 3 });
    try {
      const connections = await Promise.all([pool.getConnection(), pool.getConnection(), pool.getConnection()]);
      await connections[2]?.query('SET SESSION max_statement_time = 5');
      for (const connection of connections) connection.release();
      const found = await mysqlPoolSettings(pool);
      expect(found.connections).toBe(3);
      expect(found.altered).toHaveLength(1);
      expect(found.altered[0]).toMatch(/^max_statement_time=5(\.0+)?$/);
    } finally {
      await pool.end();
    }
  });
});
