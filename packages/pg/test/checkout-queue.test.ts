/**
 * Who gets a connection when the pool has none free, on the PostgreSQL running here, with pg's own Pool: the
 * shared checkout-order suite (test/support/checkout-queue-conformance.ts), through pg-pool's counts. pg-pool
 * has nothing of its own to test here beyond that suite.
 */
import pg from 'pg';
import { checkoutQueueConformance } from '../../../test/support/checkout-queue-conformance.ts';
import { POSTGRES, requireService } from '../../../test/support/services.ts';
import { withDeadline } from '../src/index.ts';

const available = await requireService(POSTGRES);

checkoutQueueConformance<pg.Pool, ReturnType<typeof withDeadline<pg.Pool>>>({
  name: '@deadline/pg (PostgreSQL, pg-pool)',
  available,
  newPool: (max) => new pg.Pool({ connectionString: POSTGRES.url, max }),
  wrap: (pool, options) => withDeadline(pool, options),
  hold: (pool) => pool.connect(),
  select: async (db, value) => {
    const sql = typeof value === 'number' ? 'SELECT $1::int AS v' : 'SELECT $1::text AS v';
    return (await db.query<{ v: string | number }>(sql, [value])).rows[0]?.v as string | number;
  },
  run: (db, sql) => db.query(sql),
  sleepSql: 'SELECT pg_sleep(0.15)',
  plainSelect: async (pool, value) => ((await pool.query(`SELECT ${Number(value)} AS n`)).rows[0] as { n: number }).n,
  onAcquire: (pool, listener) => pool.on('acquire', listener),
  counts: (pool) => ({ waiting: pool.waitingCount, open: pool.totalCount, idle: pool.idleCount }),
  idleAfterAnswer: false,
  end: (pool) => pool.end(),
});
