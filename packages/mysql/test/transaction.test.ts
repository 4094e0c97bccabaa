/**
 * transaction(fn): the whole body under one budget. A statement cut off inside it leaves nothing behind (the
 * transaction is rolled back) and the connection usable; without a deadline it is an ordinary transaction.
 */
import { DeadlineExceededError, InvalidArgumentError, runWithDeadline } from '@deadline/core';
import { createPool, type RowDataPacket } from 'mysql2/promise';
import { afterAll, beforeAll, beforeEach, describe, expect, it } from 'vitest';
import { MARIADB, requireService } from '../../../test/support/services.ts';
import { type DeadlinePool, withDeadline } from '../src/index.ts';
import { oneCutterAtATime } from './one-cutter-at-a-time.ts';
import { marker, serverOptions, Watcher } from './support.ts';

const ok = await requireService(MARIADB);
if (ok) oneCutterAtATime();
/** This process's own table: another run of the suite beside this one (other sessions test too) has its own. */
const TABLE = `deadline_tx_orders_${process.pid}`;

describe.runIf(ok)('transaction() (MariaDB)', () => {
  let watcher: Watcher;
  let db: DeadlinePool;

  /** Rows in the table and whether a transaction is open, read on the pool's only connection. */
  async function state(): Promise<{ rows: number; open: number }> {
    const [[row]] = await db.query<RowDataPacket[]>(`SELECT COUNT(*) AS n, @@in_transaction AS open FROM ${TABLE}`);
    return { rows: Number(row?.n), open: Number(row?.open) };
  }

  beforeAll(async () => {
    watcher = await Watcher.open();
    await watcher.query(`CREATE TABLE IF NOT EXISTS ${TABLE} (id INT PRIMARY KEY) ENGINE=InnoDB`);
    // One connection: the statement after a transaction runs on the connection the transaction used.
    db = withDeadline(createPool(serverOptions({ connectionLimit: 1 })));
  });

  beforeEach(async () => {
    await watcher.query(`DELETE FROM ${TABLE}`);
  });

  afterAll(async () => {
    await db?.end();
    await watcher?.query(`DROP TABLE IF EXISTS ${TABLE}`);
    await watcher?.end();
  });

  it('a statement cut off inside it: rejects at the deadline, the insert before it is rolled back', async () => {
    const mark = marker();
    const start = performance.now();
    const error = await runWithDeadline(200, () =>
      db.transaction(async (tx) => {
        await tx.query(`INSERT INTO ${TABLE} (id) VALUES (1)`);
        await tx.query(`SELECT SLEEP(5) /* ${mark} */`);
      }),
    ).catch((caught: unknown) => caught);
    expect(error).toBeInstanceOf(DeadlineExceededError);
    expect(error).toMatchObject({ phase: 'during-call', target: 'test' });
    expect(performance.now() - start).toBeLessThan(1_000);
    await watcher.waitGone(mark);
    // The checkout waits for the rollback and the release: same connection, no transaction open, no row.
    expect(await state()).toEqual({ rows: 0, open: 0 });
    const [[row]] = await runWithDeadline(1_000, () => db.query<RowDataPacket[]>('SELECT 1 AS one'));
    expect(row?.one).toBe(1);
  });

  it('the callback still running after the stop cannot use the connection', async () => {
    const mark = marker();
    let late: Promise<unknown> | undefined;
    const error = await runWithDeadline(150, () =>
      db.transaction(async (tx) => {
        await tx.execute(`INSERT INTO ${TABLE} (id) VALUES (?)`, [2]);
        await tx.query(`SELECT SLEEP(5) /* ${mark} */`).catch(() => {});
        // After the stop: refused, without touching the connection.
        late = tx.query(`INSERT INTO ${TABLE} (id) VALUES (3)`).catch((caught: unknown) => caught);
      }),
    ).catch((caught: unknown) => caught);
    expect(error).toBeInstanceOf(DeadlineExceededError);
    await watcher.waitGone(mark);
    expect(await state()).toEqual({ rows: 0, open: 0 });
    expect(await late).toBeInstanceOf(DeadlineExceededError);
  });

  it('commits what the callback did, and resolves with its value', async () => {
    const value = await runWithDeadline(2_000, () =>
      db.transaction(async (tx) => {
        await tx.execute(`INSERT INTO ${TABLE} (id) VALUES (?)`, [4]);
        await tx.query(`INSERT INTO ${TABLE} (id) VALUES (5)`);
        return 'done';
      }),
    );
    expect(value).toBe('done');
    expect(await state()).toEqual({ rows: 2, open: 0 });
  });

  it('rolls back when the callback throws, and rejects with its error', async () => {
    const failure = new Error('out of stock');
    await expect(
      runWithDeadline(2_000, () =>
        db.transaction(async (tx) => {
          await tx.query(`INSERT INTO ${TABLE} (id) VALUES (6)`);
          throw failure;
        }),
      ),
    ).rejects.toBe(failure);
    expect(await state()).toEqual({ rows: 0, open: 0 });
  });

  it('outside a context: an ordinary transaction, committed or rolled back', async () => {
    await db.transaction(async (tx) => {
      await tx.query(`INSERT INTO ${TABLE} (id) VALUES (7)`);
    });
    await expect(
      db.transaction(async (tx) => {
        await tx.query(`INSERT INTO ${TABLE} (id) VALUES (8)`);
        throw new Error('no');
      }),
    ).rejects.toThrow('no');
    expect(await state()).toEqual({ rows: 1, open: 0 });
  });

  it('refuses a callback that is not a function', async () => {
    await expect(db.transaction('nope' as never)).rejects.toBeInstanceOf(InvalidArgumentError);
  });
});
