/**
 * The checkout order every database adapter with a pool must show, on a live database through the driver's own
 * pool: who gets a connection when the pool has none free — in arrival order while the queue keeps up with the
 * deadlines, newest first once it does not — and a waiter without time for a statement leaves without touching
 * the database. The policy itself is the core's (CheckoutQueue, WaitQueue: unit-tested in
 * packages/core/test/checkout-queue.test.ts); this suite checks that each adapter puts it in front of its pool.
 * Each adapter's checkout-queue test runs it with its own driver, and keeps beside it what is its pool's own.
 */
import { DeadlineExceededError, InvalidArgumentError, runWithDeadline } from '@deadline/core';
import { afterAll, describe, expect, it } from 'vitest';
import { untilTrue } from './turns.ts';

/** The pool's own lists, as the adapter's queue reads them. */
export interface PoolCounts {
  /** Callers waiting in the pool's own queue. */
  waiting: number;
  /** Connections open, idle or in use. */
  open: number;
  /** Connections open and idle. */
  idle: number;
}

/** What the suite needs of a database adapter and its driver's pool. */
export interface CheckoutQueueDriver<Pool, Db> {
  /** The suite's name: the adapter and the database it runs on. */
  name: string;
  /** Whether the database is there (the suite is skipped otherwise). */
  available: boolean;
  /** A pool of the driver's own, with at most `max` connections. */
  newPool(max: number): Pool;
  /** The pool through the adapter (`withDeadline`). */
  wrap(pool: Pool, options?: { name?: string; checkoutOrder?: 'fifo' }): Db;
  /** A connection checked out of the pool directly, held until released. */
  hold(pool: Pool): Promise<{ release(): void }>;
  /** A statement through the adapter that answers `value`: resolves with the value it read back. */
  select(db: Db, value: string | number): Promise<string | number>;
  /** A statement through the adapter, its answer ignored. */
  run(db: Db, sql: string): Promise<unknown>;
  /** A statement of ~150 ms on the server (`SELECT pg_sleep(0.15)`, `SELECT SLEEP(0.15)`). */
  sleepSql: string;
  /** A statement straight on the pool, outside the adapter, that answers `value`. */
  plainSelect(pool: Pool, value: number): Promise<number>;
  /** Calls `listener` each time the pool hands out a connection. */
  onAcquire(pool: Pool, listener: () => void): void;
  counts(pool: Pool): PoolCounts;
  /**
   * Whether connections go back to the pool's idle list a moment after the answer (mysql2: once each session's
   * cleanup is done, a microtask or two later), rather than by the time the statement's promise resolves.
   */
  idleAfterAnswer: boolean;
  end(pool: Pool): Promise<void>;
}

export function checkoutQueueConformance<Pool, Db>(driver: CheckoutQueueDriver<Pool, Db>): void {
  describe.runIf(driver.available)(`${driver.name}: checkout order conformance`, () => {
    const pools: Pool[] = [];
    const newPool = (max: number): Pool => {
      const pool = driver.newPool(max);
      pools.push(pool);
      return pool;
    };
    afterAll(async () => {
      await Promise.all(pools.map((p) => driver.end(p)));
    });

    /**
     * Queues `names` one after another (each statement queues synchronously) behind the only connection, held
     * for `holdMs`, each with `budgetMs`; resolves with the order they were served in.
     */
    async function servedOrder(names: string[], budgetMs: number, holdMs: number): Promise<string[]> {
      const pool = newPool(1);
      const db = driver.wrap(pool);
      const held = await driver.hold(pool);
      const order: string[] = [];
      const queries = names.map((name) =>
        runWithDeadline(budgetMs, () => driver.select(db, name)).then(() => order.push(name)),
      );
      // Time in the queue is the condition under test: the waiters age while the connection is held.
      if (holdMs > 0) await new Promise((resolve) => setTimeout(resolve, holdMs));
      held.release();
      await Promise.all(queries);
      return order;
    }

    it('while the queue keeps up with the deadlines: first come, first served', async () => {
      expect(await servedOrder(['a', 'b', 'c', 'd'], 10_000, 300)).toEqual(['a', 'b', 'c', 'd']);
    });

    it('once the oldest has waited as long as it has left: newest first', async () => {
      // Held 1.2 s of a 2 s budget: the oldest has waited longer than the 0.8 s it has left.
      expect(await servedOrder(['a', 'b', 'c', 'd'], 2_000, 1_200)).toEqual(['d', 'c', 'b', 'a']);
    });

    it('a waiter whose deadline passes leaves the queue, the database untouched; the next one is served', async () => {
      const pool = newPool(1);
      const db = driver.wrap(pool);
      const held = await driver.hold(pool);
      const short = runWithDeadline(100, () => driver.run(db, 'SELECT 1')).catch((e: unknown) => e);
      const long = runWithDeadline(10_000, () => driver.select(db, 2));
      expect(await short).toBeInstanceOf(DeadlineExceededError);
      // It waited in our queue, not the pool's own: nothing is left behind for the connection to be handed to.
      expect(driver.counts(pool).waiting).toBe(0);
      held.release();
      expect(await long).toBe(2);
      expect(driver.counts(pool).open).toBe(1);
    });

    it('a waiter leaves once its time left no longer covers a typical statement: before-call, ahead of its deadline', async () => {
      const pool = newPool(1);
      const db = driver.wrap(pool, { name: 'stock-db' });
      // Teach it what a statement here takes: ~150 ms.
      for (let i = 0; i < 3; i++) await runWithDeadline(10_000, () => driver.run(db, driver.sleepSql));
      const held = await driver.hold(pool);
      try {
        const started = performance.now();
        const late = await runWithDeadline(1_000, () => driver.run(db, 'SELECT 1')).catch((e: unknown) => e);
        expect(late).toBeInstanceOf(DeadlineExceededError);
        expect(late).toMatchObject({ phase: 'before-call', target: 'stock-db' });
        expect((late as Error).message).toMatch(/less than its work takes/);
        // It queued (it was not refused at once) and left ahead of its deadline — about one typical statement
        // before it; how much before depends on how long the 0.15 s sleep took on this machine, so no tighter bound.
        expect(performance.now() - started).toBeGreaterThanOrEqual(300);
        // With less than that left already, it does not queue at all.
        const hopeless = await runWithDeadline(100, () => driver.run(db, 'SELECT 1')).catch((e: unknown) => e);
        expect(hopeless).toMatchObject({ phase: 'before-call' });
        expect(driver.counts(pool).waiting).toBe(0);
      } finally {
        held.release();
      }
    });

    it("the pool's own waiters (statements outside any deadline) are not starved by ours", async () => {
      const pool = newPool(1);
      const db = driver.wrap(pool);
      const held = await driver.hold(pool);
      const ours = runWithDeadline(10_000, () => driver.select(db, 1));
      const plain = driver.plainSelect(pool, 2);
      await untilTrue(() => driver.counts(pool).waiting === 1);
      held.release();
      expect(await Promise.all([ours, plain])).toEqual([1, 2]);
    });

    it('200 statements on a pool of 3: every one served, never more than 3 connections, nothing left waiting', async () => {
      const pool = newPool(3);
      const db = driver.wrap(pool);
      let peak = 0;
      driver.onAcquire(pool, () => {
        peak = Math.max(peak, driver.counts(pool).open);
      });
      const results = await Promise.all(
        Array.from({ length: 200 }, (_, i) => runWithDeadline(30_000, () => driver.select(db, i))),
      );
      expect(results).toEqual(Array.from({ length: 200 }, (_, i) => i));
      expect(peak).toBeLessThanOrEqual(3);
      if (driver.idleAfterAnswer) await untilTrue(() => driver.counts(pool).idle === driver.counts(pool).open);
      expect(driver.counts(pool).waiting).toBe(0);
      expect(driver.counts(pool).idle).toBe(driver.counts(pool).open);
    });

    it("checkoutOrder 'fifo' leaves the order to the pool's own queue", async () => {
      const pool = newPool(1);
      const db = driver.wrap(pool, { checkoutOrder: 'fifo' });
      const held = await driver.hold(pool);
      const query = runWithDeadline(10_000, () => driver.run(db, 'SELECT 1'));
      await untilTrue(() => driver.counts(pool).waiting === 1);
      held.release();
      await query;
    });

    it('bad options fail when the pool is wrapped, naming the option', () => {
      const pool = newPool(1);
      expect(() => driver.wrap(pool, { checkoutOrder: 'lifo' as 'fifo' })).toThrow(InvalidArgumentError);
      expect(() => driver.wrap(pool, { checkoutOrder: 'lifo' as 'fifo' })).toThrow(/checkoutOrder/);
    });
  });
}
