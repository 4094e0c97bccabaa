/**
 * `npm run start -w apps/inventory`: inventory alone. DATABASE_URL (default the loopback Postgres) and PORT.
 */
import { deadlineMixin, logCalls } from '@deadline/pino';
import pg from 'pg';
import pino from 'pino';
import { startInventory } from './service.js';

const logger = pino({ mixin: deadlineMixin() });
logCalls(logger);
const pool = new pg.Pool({
  connectionString: process.env.DATABASE_URL ?? 'postgres://postgres@127.0.0.1:5432/postgres',
});
const inventory = await startInventory({ port: Number(process.env.PORT ?? 0), pool, logger });
logger.info({ url: inventory.url }, 'inventory listening');
for (const signal of ['SIGINT', 'SIGTERM'] as const) {
  process.once(signal, async () => {
    await inventory.close();
    await pool.end();
  });
}
