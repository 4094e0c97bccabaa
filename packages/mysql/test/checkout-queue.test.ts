/**
 * Who gets a connection when a mysql2 pool has none free: in arrival order while the queue keeps up with the
 * deadlines, newest first once it does not, and a waiter without time for a statement leaves without touching
 * the database. On the MariaDB running here, with mysql2's own pool.
 */
import { DeadlineExceededError, InvalidArgumentError, runWithDeadline } from '@deadline/core';
import { createPool, type Pool, type PoolOptions, type RowDataPacket } from 'mysql2/promise';
import { afterAll, describe, expect, it } from 'vitest';
import { MARIADB, requireService } from '../../../test/support/services.ts';
import { untilTrue } from '../../../test/support/turns.ts';
import { withDeadline } from '../src/index.ts';
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

type NameRow = RowDataPacket & { name: string };

/**
 * Queues `names` one after another behind the only connection, held for `holdMs`, each with `budgetMs`; resolves
 * with the order they were served in.
 */
async function servedOrder(names: string[], budgetMs: number, holdMs: number): Promise<string[]> {
  const pool = newPool(1);
  const db = withDeadline(pool);
  const held = await pool.getConnection();
  const order: string[] = [];
  const queries = names.map((name) =>
    runWithDeadline(budgetMs, () => db.query<NameRow[]>('SELECT ? AS name', [name])).then(() => order.push(name)),
  );
  // Time in the queue is the condition under test: the waiters age while the connection is held.
  if (holdMs > 0) await new Promise((resolve) => setTimeout(resolve, holdMs));
  held.release();
  await Promise.all(queries);
  return order;
}

describe.runIf(available)('@deadline/mysql checkout order (MariaDB, mysql2 pool)', () => {
  afterAll(async () => {
    await Promise.all(pools.map((p) => p.end()));
  });

  it('while the queue keeps up with the deadlines: first come, first served', async () => {
    expect(await servedOrder(['a', 'b', 'c', 'd'], 10_000, 300)).toEqual(['a', 'b', 'c', 'd']);
  });

  it('once the oldest has waited as long as it has left: newest first', async () => {
    // Held 1.2 s of a 2 s budget: the oldest has waited longer than the 0.8 s it has left.
    expect(await servedOrder(['a', 'b', 'c', 'd'], 2_000, 1_200)).toEqual(['d', 'c', 'b', 'a']);
  });

  it('a waiter whose deadline passes leaves the queue, the database untouched; the next one is served', async () => {
    const pool = newPool(1);
    const db = withDeadline(pool);
    const held = await pool.getConnection();
    const short = runWithDeadline(100, () => db.query('SELECT 1')).catch((e: unknown) => e);
    const long = runWithDeadline(10_000, () => db.query<(RowDataPacket & { n: number })[]>('SELECT 2 AS n'));
    expect(await short).toBeInstanceOf(DeadlineExceededError);
    // It waited in our queue, not mysql2's: nothing is left behind for the connection to be handed to.
    expect(lists(pool).waiting).toBe(0);
    held.release();
    expect((await long)[0][0]?.n).toBe(2);
    expect(lists(pool).open).toBe(1);
  });

  it('a waiter leaves once its time left no longer covers a typical statement: before-call, ahead of its deadline', async () => {
    const pool = newPool(1);
    const db = withDeadline(pool, { name: 'stock-db' });
    // Teach it what a statement here takes: ~150 ms.
    for (let i = 0; i < 3; i++) await runWithDeadline(10_000, () => db.query('SELECT SLEEP(0.15)'));
    const held = await pool.getConnection();
    try {
      const started = performance.now();
      const late = await runWithDeadline(1_000, () => db.query('SELECT 1')).catch((e: unknown) => e);
      expect(late).toBeInstanceOf(DeadlineExceededError);
      expect(late).toMatchObject({ phase: 'before-call', target: 'stock-db' });
      expect((late as Error).message).toMatch(/less than its work takes/);
      // It queued (it was not refused at once) and left ahead of its deadline, about one typical statement before.
      expect(performance.now() - started).toBeGreaterThanOrEqual(300);
      // With less than that left already, it does not queue at all.
      const hopeless = await runWithDeadline(100, () => db.query('SELECT 1')).catch((e: unknown) => e);
      expect(hopeless).toMatchObject({ phase: 'before-call' });
      expect(lists(pool).waiting).toBe(0);
    } finally {
      held.release();
    }
  });

  it("mysql2's own waiters (statements outside any deadline) are not starved by ours", async () => {
    const pool = newPool(1);
    const db = withDeadline(pool);
    const held = await pool.getConnection();
    const ours = runWithDeadline(10_000, () => db.query<(RowDataPacket & { n: number })[]>('SELECT 1 AS n'));
    const plain = pool.query<(RowDataPacket & { n: number })[]>('SELECT 2 AS n');
    await untilTrue(() => lists(pool).waiting === 1);
    held.release();
    const [a, b] = await Promise.all([ours, plain]);
    expect([a[0][0]?.n, b[0][0]?.n]).toEqual([1, 2]);
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

  it('200 statements on a pool of 3: every one served, never more than 3 connections, nothing left waiting', async () => {
    const pool = newPool(3);
    const db = withDeadline(pool);
    let peak = 0;
    pool.on('acquire', () => {
      peak = Math.max(peak, lists(pool).open);
    });
    const results = await Promise.all(
      Array.from({ length: 200 }, (_, i) =>
        runWithDeadline(30_000, () => db.query<(RowDataPacket & { n: number })[]>('SELECT ? AS n', [i])),
      ),
    );
    expect(results.map(([rows]) => Number(rows[0]?.n))).toEqual(Array.from({ length: 200 }, (_, i) => i));
    expect(peak).toBeLessThanOrEqual(3);
    // Connections go back once each session's cleanup is done (a microtask or two after the answer).
    await untilTrue(() => lists(pool).idle === lists(pool).open);
    expect(lists(pool).waiting).toBe(0);
  });

  it("checkoutOrder 'fifo', a pool without a connection limit, or one that does not wait: mysql2's queue alone", async () => {
    const fifo = newPool(1);
    const db = withDeadline(fifo, { checkoutOrder: 'fifo' });
    const held = await fifo.getConnection();
    const query = runWithDeadline(10_000, () => db.query('SELECT 1'));
    await untilTrue(() => lists(fifo).waiting === 1);
    held.release();
    await query;
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

  it('bad options fail when the pool is wrapped, naming the option', () => {
    const pool = newPool(1);
    expect(() => withDeadline(pool, { checkoutOrder: 'lifo' as 'fifo' })).toThrow(InvalidArgumentError);
    expect(() => withDeadline(pool, { checkoutOrder: 'lifo' as 'fifo' })).toThrow(/checkoutOrder/);
  });
});
