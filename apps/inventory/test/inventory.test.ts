/** inventory alone, on the loopback Postgres: a stock answer in time; a query cut at its budget, on the server too. */
import { Writable } from 'node:stream';
import pg from 'pg';
import pino from 'pino';
import { request } from 'undici';
import { afterAll, describe, expect, it } from 'vitest';
import { POSTGRES, requireService } from '../../../test/support/services.ts';
import { startInventory } from '../src/service.ts';

const available = await requireService(POSTGRES);
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
