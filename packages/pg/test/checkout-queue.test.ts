/**
 * Who gets a connection when the pool has none free: in arrival order while the queue keeps up with the
 * deadlines, newest first once it does not, and a waiter without time for a statement leaves without touching
 * the database. On the PostgreSQL
 * running here, with pg's own Pool.
 */
import { DeadlineExceededError, InvalidArgumentError, runWithDeadline } from '@deadline/core';
import pg from 'pg';
import { afterAll, describe, expect, it } from 'vitest';
import { POSTGRES, requireService } from '../../../test/support/services.ts';
import { untilTrue } from '../../../test/support/turns.ts';
import { withDeadline } from '../src/index.ts';

const available = await requireService(POSTGRES);

const pools: pg.Pool[] = [];
function newPool(max: number): pg.Pool {
  const pool = new pg.Pool({ connectionString: POSTGRES.url, max });
  pools.push(pool);
  return pool;
}

/**
 * Queues `names` one after another (each query queues synchronously) behind a connection held for `holdMs`,
 * each with `budgetMs`; resolves with the order they were served in.
 */
async function servedOrder(names: string[], budgetMs: number, holdMs: number): Promise<string[]> {
  const pool = newPool(1);
  const db = withDeadline(pool);
  const held = await pool.connect();
  const order: string[] = [];
  const queries = names.map((name) =>
    runWithDeadline(budgetMs, () => db.query('SELECT $1::text AS name', [name])).then(() => order.push(name)),
  );
  // Time in the queue is the condition under test: the waiters age while the connection is held.
  if (holdMs > 0) await new Promise((resolve) => setTimeout(resolve, holdMs));
  held.release();
  await Promise.all(queries);
  return order;
}

describe.runIf(available)('@deadline/pg checkout order (PostgreSQL)', () => {
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
    const held = await pool.connect();
    const short = runWithDeadline(100, () => db.query('SELECT 1')).catch((e: unknown) => e);
    const long = runWithDeadline(10_000, () => db.query<{ n: number }>('SELECT 2 AS n'));
    expect(await short).toBeInstanceOf(DeadlineExceededError);
    // It waited in our queue, not pg-pool's: nothing is left behind for the connection to be handed to.
    expect(pool.waitingCount).toBe(0);
    held.release();
    expect((await long).rows[0]?.n).toBe(2);
    expect(pool.totalCount).toBe(1);
  });

  it('a waiter leaves once its time left no longer covers a typical statement: before-call, ahead of its deadline', async () => {
    const pool = newPool(1);
    const db = withDeadline(pool, { name: 'stock-db' });
    // Teach it what a statement here takes: ~150 ms.
    for (let i = 0; i < 3; i++) await runWithDeadline(10_000, () => db.query('SELECT pg_sleep(0.15)'));
    const held = await pool.connect();
    try {
      const started = performance.now();
      const late = await runWithDeadline(1_000, () => db.query('SELECT 1')).catch((e: unknown) => e);
      expect(late).toBeInstanceOf(DeadlineExceededError);
      expect(late).toMatchObject({ phase: 'before-call', target: 'stock-db' });
      expect((late as Error).message).toMatch(/less than its work takes/);
      // It queued (it was not refused at once) and left ahead of its deadline — about one typical statement
      // before it; how much before depends on how long pg_sleep(0.15) took on this machine, so no tighter bound.
      expect(performance.now() - started).toBeGreaterThanOrEqual(300);
      // With less than that left already, it does not queue at all.
      const hopeless = await runWithDeadline(100, () => db.query('SELECT 1')).catch((e: unknown) => e);
      expect(hopeless).toMatchObject({ phase: 'before-call' });
      expect(pool.waitingCount).toBe(0);
    } finally {
      held.release();
    }
  });

  it("pg-pool's own waiters (queries outside any deadline) are not starved by ours", async () => {
    const pool = newPool(1);
    const db = withDeadline(pool);
    const held = await pool.connect();
    const ours = runWithDeadline(10_000, () => db.query<{ n: number }>('SELECT 1 AS n'));
    const plain = pool.query('SELECT 2 AS n');
    await untilTrue(() => pool.waitingCount === 1);
    held.release();
    const [a, b] = await Promise.all([ours, plain]);
    expect([a.rows[0]?.n, (b.rows[0] as { n: number }).n]).toEqual([1, 2]);
  });

  it('200 queries on a pool of 3: every one served, never more than 3 connections, nothing left waiting', async () => {
    const pool = newPool(3);
    const db = withDeadline(pool);
    let peak = 0;
    pool.on('acquire', () => {
      peak = Math.max(peak, pool.totalCount);
    });
    const results = await Promise.all(
      Array.from({ length: 200 }, (_, i) =>
        runWithDeadline(30_000, () => db.query<{ n: number }>('SELECT $1::int AS n', [i])),
      ),
    );
    expect(results.map((r) => r.rows[0]?.n)).toEqual(Array.from({ length: 200 }, (_, i) => i));
    expect(peak).toBeLessThanOrEqual(3);
    expect(pool.waitingCount).toBe(0);
    expect(pool.idleCount).toBe(pool.totalCount);
  });

  it("checkoutOrder 'fifo' leaves the order to pg-pool", async () => {
    const pool = newPool(1);
    const db = withDeadline(pool, { checkoutOrder: 'fifo' });
    const held = await pool.connect();
    const query = runWithDeadline(10_000, () => db.query('SELECT 1'));
    await untilTrue(() => pool.waitingCount === 1);
    held.release();
    await query;
  });

  it('bad options fail when the pool is wrapped, naming the option', () => {
    const pool = newPool(1);
    expect(() => withDeadline(pool, { checkoutOrder: 'lifo' as 'fifo' })).toThrow(InvalidArgumentError);
    expect(() => withDeadline(pool, { checkoutOrder: 'lifo' as 'fifo' })).toThrow(/checkoutOrder/);
  });
});
