/**
 * `npm run start -w apps/orders`: orders alone. INVENTORY_URL (required), DATABASE_URL, REDIS_URL (optional).
 */
import { deadlineMixin, logCalls } from '@deadline/pino';
import { Redis } from 'ioredis';
import pg from 'pg';
import pino from 'pino';
import { startOrders } from './service.js';

const logger = pino({ mixin: deadlineMixin() });
logCalls(logger);
const inventoryUrl = process.env.INVENTORY_URL;
if (inventoryUrl === undefined)
  throw new Error('set INVENTORY_URL (start inventory first: npm run start -w apps/inventory)');
const pool = new pg.Pool({
  connectionString: process.env.DATABASE_URL ?? 'postgres://postgres@127.0.0.1:5432/postgres',
});
const redis =
  process.env.REDIS_URL === undefined ? undefined : new Redis(process.env.REDIS_URL, { maxRetriesPerRequest: 1 });
const orders = await startOrders({ port: Number(process.env.PORT ?? 0), inventoryUrl, pool, logger, redis });
logger.info({ url: orders.url }, 'orders listening');
for (const signal of ['SIGINT', 'SIGTERM'] as const) {
  process.once(signal, async () => {
    await orders.close();
    await pool.end();
    redis?.disconnect();
  });
}
