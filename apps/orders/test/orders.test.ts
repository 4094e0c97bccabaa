/** orders alone, in front of a real inventory, on the loopback Postgres: an order read through the whole hop. */
import { Writable } from 'node:stream';
import { startInventory } from '@deadline/demo-inventory';
import pg from 'pg';
import pino from 'pino';
import { request } from 'undici';
import { afterAll, describe, expect, it } from 'vitest';
import { POSTGRES, requireService } from '../../../test/support/services.ts';
import { startOrders } from '../src/service.ts';

const available = await requireService(POSTGRES);
const quiet = pino(new Writable({ write: (_c, _e, done) => done() }));

describe.runIf(available)('orders', () => {
  const pool = new pg.Pool({ connectionString: POSTGRES.url, max: 5 });
  afterAll(() => pool.end());

  it('reads an order and its stock; a budget too small for inventory ends in a 504 naming the hop', async () => {
    const inventory = await startInventory({ pool, logger: quiet });
    const orders = await startOrders({ inventoryUrl: inventory.url, pool, logger: quiet });
    try {
      const ok = await request(`${orders.url}/orders/5`, { headers: { 'x-request-deadline': '2000' } });
      expect(ok.statusCode).toBe(200);
      expect(await ok.body.json()).toMatchObject({ order: { id: 5 }, stock: { sku: 'sku-5' }, cached: false });
      const cut = await request(`${orders.url}/orders/5?workMs=3000`, { headers: { 'x-request-deadline': '300' } });
      expect(cut.statusCode).toBe(504);
      await cut.body.dump();
    } finally {
      await orders.close();
      await inventory.close();
    }
  });
});
