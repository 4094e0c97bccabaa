/**
 * inventory alone, on the loopback Postgres or MariaDB: a stock answer in time; a query cut at its budget, on the
 * server too.
 */
import { Writable } from 'node:stream';
import { createPool } from 'mysql2/promise';
import pg from 'pg';
import pino from 'pino';
import { request } from 'undici';
import { afterAll, describe, expect, it } from 'vitest';
import { MARIADB, POSTGRES, requireService } from '../../../test/support/services.ts';
import { startInventory } from '../src/service.ts';

const available = await requireService(POSTGRES);
const onMariadb = await requireService(MARIADB);
const quiet = pino(new Writable({ write: (_c, _e, done) => done() }));

describe.runIf(available)('inventory', () => {
  const pool = new pg.Pool({ connectionString: POSTGRES.url, max: 3 });
  afterAll(() => pool.end());

  it('answers in time, and stops its query at the budget it was sent', async () => {
    const inventory = await startInventory({ pool, logger: quiet });
    try {
      const ok = await request(`${inventory.url}/stock/a?workMs=10`, { headers: { 'x-request-deadline': '2000' } });
      expect(ok.statusCode).toBe(200);
      expect(await ok.body.json()).toEqual({ sku: 'a', available: 7 });
      const cut = await request(`${inventory.url}/stock/b?workMs=3000`, { headers: { 'x-request-deadline': '200' } });
      expect(cut.statusCode).toBe(504);
      await cut.body.dump();
      // The 504 leaves at the deadline; the query's cancellation is confirmed a few ms later.
      while (inventory.reports[1]?.endedAt === 0) await new Promise((resolve) => setImmediate(resolve));
      expect(inventory.reports.map((r) => r.outcome)).toEqual(['finished', 'stopped']);
      expect(inventory.reports[1]?.budgetMs).toBe(200);
    } finally {
      await inventory.close();
    }
  });
});

describe.runIf(onMariadb)('inventory on MariaDB', () => {
  const mariadb = createPool({ uri: MARIADB.url, connectionLimit: 3 });
  afterAll(() => mariadb.end());

  it('answers in time, and kills its query at the budget it was sent', async () => {
    const inventory = await startInventory({ mariadb, logger: quiet });
    try {
      const ok = await request(`${inventory.url}/stock/a?workMs=10`, { headers: { 'x-request-deadline': '2000' } });
      expect(ok.statusCode).toBe(200);
      expect(await ok.body.json()).toEqual({ sku: 'a', available: 7 });
      // A name of its own: other test files run SLEEPs on the same server at the same time.
      const sku = `cut-${process.pid}-${Date.now()}`;
      const cut = await request(`${inventory.url}/stock/${sku}?workMs=10000`, {
        headers: { 'x-request-deadline': '200' },
      });
      expect(cut.statusCode).toBe(504);
      await cut.body.dump();
      while (inventory.reports[1]?.endedAt === 0) await new Promise((resolve) => setImmediate(resolve));
      expect(inventory.reports.map((r) => r.outcome)).toEqual(['finished', 'stopped']);
      // Killed on the server, long before its 10 s: the KILL lands a few ms after the answer (the server has been
      // seen to hold one up for seconds on a busy machine, hence the room).
      const running = async () => {
        const [rows] = await mariadb.query(
          'SELECT COUNT(*) AS n FROM information_schema.PROCESSLIST WHERE INFO LIKE ? AND INFO NOT LIKE ?',
          [`%${sku}%SLEEP%`, '%PROCESSLIST%'],
        );
        return Number((rows as { n: number }[])[0]?.n);
      };
      const limit = performance.now() + 6_000;
      while ((await running()) > 0) if (performance.now() > limit) throw new Error('the stock query still runs');
    } finally {
      await inventory.close();
    }
  });

  it.runIf(available)('with both databases, ?db=mariadb chooses MariaDB; keepReports: false keeps none', async () => {
    // Fresh pools: which of them opened a connection tells where each query ran.
    const pool = new pg.Pool({ connectionString: POSTGRES.url, max: 2 });
    const both = createPool({ uri: MARIADB.url, connectionLimit: 2 });
    const opened = () => ({
      postgres: pool.totalCount,
      mariadb: (both as unknown as { pool: { _allConnections: { length: number } } }).pool._allConnections.length,
    });
    const inventory = await startInventory({ pool, mariadb: both, logger: quiet, keepReports: false });
    try {
      const ask = async (query: string) => {
        const answer = await request(`${inventory.url}/stock/s?workMs=5${query}`, {
          headers: { 'x-request-deadline': '2000' },
        });
        expect(answer.statusCode).toBe(200);
        expect(await answer.body.json()).toEqual({ sku: 's', available: 7 });
      };
      await ask('&db=mariadb');
      expect(opened()).toEqual({ postgres: 0, mariadb: 1 });
      await ask('');
      expect(opened()).toEqual({ postgres: 1, mariadb: 1 });
      expect(inventory.reports).toEqual([]);
    } finally {
      await inventory.close();
      await pool.end();
      await both.end();
    }
  });

  it('needs a database', async () => {
    await expect(startInventory({ logger: quiet })).rejects.toThrow(/needs a database/);
  });
});
