/**
 * Who gets a connection when a mysql2 pool has none free, on the MariaDB running here, with mysql2's own pool:
 * the shared checkout-order suite (test/support/checkout-queue-conformance.ts), through mysql2's lists; and what
 * is mysql2's own — it announces no removal of a connection, so one destroyed or killed must still make room,
 * and a pool without a limit or that does not wait keeps mysql2's queue alone.
 */
import { runWithDeadline } from '@deadline/core';
import { createPool, type Pool, type PoolOptions, type RowDataPacket } from 'mysql2/promise';
import { afterAll, describe, expect, it } from 'vitest';
import { checkoutQueueConformance } from '../../../test/support/checkout-queue-conformance.ts';
import { MARIADB, requireService } from '../../../test/support/services.ts';
import { type DeadlinePool, withDeadline } from '../src/index.ts';
import { serverOptions } from './support.ts';

const available = await requireService(MARIADB);

const pools: Pool[] = [];
function newPool(connectionLimit: number, overrides: PoolOptions = {}): Pool {
  const pool = createPool(serverOptions({ connectionLimit, ...overrides }));
  pools.push(pool);
  return pool;
}

/** mysql2's own lists, read the way the queue reads them: what waits in mysql2's queue, what is open and idle. */
function lists(pool: Pool): { waiting: number; open: number; idle: number } {
  const core = (pool as unknown as { pool: Record<string, { length: number }> }).pool;
  return {
    waiting: core._connectionQueue?.length ?? -1,
    open: core._allConnections?.length ?? -1,
    idle: core._freeConnections?.length ?? -1,
  };
}

checkoutQueueConformance<Pool, DeadlinePool>({
  name: '@deadline/mysql (MariaDB, mysql2 pool)',
  available,
  newPool: (max) => createPool(serverOptions({ connectionLimit: max })),
  wrap: (pool, options) => withDeadline(pool, options),
  hold: (pool) => pool.getConnection(),
  select: async (db, value) => {
    const [rows] = await db.query<(RowDataPacket & { v: string | number })[]>('SELECT ? AS v', [value]);
    return rows[0]?.v as string | number;
  },
  run: (db, sql) => db.query(sql),
  sleepSql: 'SELECT SLEEP(0.15)',
  plainSelect: async (pool, value) =>
    (await pool.query<(RowDataPacket & { n: number })[]>(`SELECT ${Number(value)} AS n`))[0][0]?.n as number,
  onAcquire: (pool, listener) => pool.on('acquire', listener),
  counts: lists,
  // Connections go back once each session's cleanup is done (a microtask or two after the answer).
  idleAfterAnswer: true,
  end: (pool) => pool.end(),
});

describe.runIf(available)("@deadline/mysql checkout order: what is mysql2's own (MariaDB, mysql2 pool)", () => {
  afterAll(async () => {
    await Promise.all(pools.map((p) => p.end()));
  });

  it('a connection destroyed by its holder makes room: the next waiter is served on a new one', async () => {
    const pool = newPool(1);
    const db = withDeadline(pool);
    const held = await db.getConnection();
    const waiting = runWithDeadline(10_000, () => db.query<(RowDataPacket & { n: number })[]>('SELECT 3 AS n'));
    // mysql2 announces no removal: the wrapper's own destroy says a place came free.
    held.destroy();
    expect((await waiting)[0][0]?.n).toBe(3);
    expect(lists(pool)).toMatchObject({ waiting: 0, open: 1 });
  });

  it('the connection a statement holds is killed on the server (KILL CONNECTION): the waiter behind it is served on a new one', async () => {
    const pool = newPool(1);
    const db = withDeadline(pool);
    const admin = createPool(serverOptions({ connectionLimit: 1 }));
    pools.push(admin);
    try {
      await db.query('SELECT 1');
      const [[held]] = await pool.query<(RowDataPacket & { id: number })[]>('SELECT CONNECTION_ID() AS id');
      const holder = runWithDeadline(10_000, () => db.query('SELECT SLEEP(5)')).catch((e: unknown) => e);
      const waiter = runWithDeadline(10_000, () => db.query<(RowDataPacket & { n: number })[]>('SELECT 4 AS n'));
      // The SLEEP runs on that connection, on the server: the waiter is queued behind it.
      const sleeping = async () => {
        const [rows] = await admin.query<RowDataPacket[]>(
          "SELECT COUNT(*) AS n FROM information_schema.PROCESSLIST WHERE ID = ? AND INFO LIKE '%SLEEP(5)%'",
          [Number(held?.id)],
        );
        return Number(rows[0]?.n) === 1;
      };
      while (!(await sleeping()));
      const started = performance.now();
      await admin.query(`KILL CONNECTION ${Number(held?.id)}`);
      expect(await holder).toBeInstanceOf(Error);
      expect((await waiter)[0][0]?.n).toBe(4);
      // Served once the dead connection was given back (destroyed), not at its own deadline nor after the SLEEP.
      expect(performance.now() - started).toBeLessThan(3_000);
      expect(lists(pool)).toMatchObject({ waiting: 0, open: 1 });
    } finally {
      await admin.end();
      pools.splice(pools.indexOf(admin), 1);
    }
  });

  it("a pool without a connection limit, or one that does not wait: mysql2's queue alone", async () => {
    // No limit: never a queue of ours to wait in, every statement gets its connection.
    const unlimited = withDeadline(newPool(0));
    await Promise.all(Array.from({ length: 5 }, () => runWithDeadline(10_000, () => unlimited.query('SELECT 1'))));
    // waitForConnections false: mysql2's refusal is the answer, as without the wrapper.
    const noWait = newPool(1, { waitForConnections: false });
    const busy = await noWait.getConnection();
    try {
      const refused = await runWithDeadline(10_000, () => withDeadline(noWait).query('SELECT 1')).catch(
        (e: unknown) => e,
      );
      expect((refused as Error).message).toMatch(/No connections available/);
    } finally {
      busy.release();
    }
  });
});
