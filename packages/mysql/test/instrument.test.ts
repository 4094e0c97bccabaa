/**
 * `instrumentMysql(mysql2)` on mysql2 itself: connections and pools the test makes as an ORM would (the callback
 * API, `mysql2/promise`, a pool's `query()`, `execute()`), bounded inside a deadline context and left alone
 * outside one; the patch made once, undone, and made again.
 */
import diagnostics from 'node:diagnostics_channel';
import { DeadlineExceededError, DiagnosticsChannel, isDeadlineExceededError, runWithDeadline } from '@deadline/core';
import mysql from 'mysql2';
import mysqlPromise, { type RowDataPacket } from 'mysql2/promise';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { MARIADB, requireService } from '../../../test/support/services.ts';
import { settle, timerLateness } from '../../../test/support/settle.ts';
import { instrumentMysql, withDeadline } from '../src/index.ts';
import { oneCutterAtATime } from './one-cutter-at-a-time.ts';
import { marker, serverOptions, Watcher } from './support.ts';

const ok = await requireService(MARIADB);
if (ok) oneCutterAtATime();
/** This process's own table: another run of the suite beside this one (other sessions test too) has its own. */
const TABLE = `deadline_instrumented_tx_${process.pid}`;

/**
 * How long past its deadline — and past a plain timer due with it, as late as the machine let that fire (settle.ts)
 * — a statement may be answered or gone from the server: well short of the 5 s it would run.
 */
const SETTLE_MARGIN_MS = 500;

describe.runIf(ok)('instrumentMysql: every connection of the module (MariaDB)', () => {
  let watcher: Watcher;
  let undo: () => void;
  const ends: (() => Promise<unknown>)[] = [];

  beforeAll(async () => {
    watcher = await Watcher.open();
    undo = instrumentMysql(mysql, { name: 'orders-db' });
  });
  afterAll(async () => {
    for (const end of ends) await end().catch(() => {});
    undo?.();
    await watcher?.query(`DROP TABLE IF EXISTS ${TABLE}`);
    await watcher?.end();
  });

  const promisePool = (connectionLimit: number) => {
    const pool = mysqlPromise.createPool(serverOptions({ connectionLimit }));
    ends.push(() => pool.end());
    return pool;
  };

  it('mysql2/promise: a 5 s statement under 300 ms rejects at the deadline and is gone from the server', async () => {
    const pool = promisePool(2);
    // Its connections made first, outside any deadline: on a busy machine a login can take the statement's 300 ms,
    // and the statement would never reach the server to be seen gone.
    await Promise.all([pool.query('SELECT SLEEP(0.05)'), pool.query('SELECT SLEEP(0.05)')]);
    for (const run of ['query', 'execute'] as const) {
      const mark = marker();
      const start = performance.now();
      const late = timerLateness(300);
      const work = settle(
        start,
        runWithDeadline(300, () =>
          run === 'query' ? pool.query(`SELECT SLEEP(5) /* ${mark} */`) : pool.execute(`SELECT SLEEP(5) /* ${mark} */`),
        ),
      );
      await watcher.waitRunning(mark);
      const { error, elapsed } = await work;
      const gone = (await watcher.waitGone(mark)) - start;
      expect(error).toBeInstanceOf(DeadlineExceededError);
      expect(error).toMatchObject({ target: 'orders-db', phase: 'during-call' });
      expect(elapsed).toBeGreaterThanOrEqual(295);
      expect(elapsed).toBeLessThan(300 + (await late) + SETTLE_MARGIN_MS);
      expect(gone).toBeLessThan(300 + (await late) + SETTLE_MARGIN_MS);
      console.log(`instrumented ${run}(): rejected after ${elapsed.toFixed(1)} ms, gone after ${gone.toFixed(1)} ms`);
    }
    // The pool's connections answer, their session limit the server's default again.
    for (let i = 0; i < 4; i++) {
      const [rows] = await pool.query<RowDataPacket[]>('SELECT @@max_statement_time AS s');
      expect(Number(rows[0]?.s)).toBe(0);
    }
  });

  it('the callback API (Knex, TypeORM, Sequelize call it so): the callback gets the deadline error', async () => {
    const connection = mysql.createConnection(serverOptions());
    ends.push(() => connection.promise().end());
    const mark = marker();
    const error = await runWithDeadline(
      200,
      () =>
        new Promise((resolve) => {
          const returned = connection.query(`SELECT SLEEP(5) /* ${mark} */`, (caught: unknown) => resolve(caught));
          returned.setMaxListeners(100); // what Sequelize does with it
        }),
    );
    expect(isDeadlineExceededError(error)).toBe(true);
    await watcher.waitGone(mark);
    const rows = await new Promise((resolve, reject) =>
      connection.query('SELECT 1 AS one', (caught: unknown, result: unknown) =>
        caught ? reject(caught) : resolve(result),
      ),
    );
    expect(rows).toEqual([{ one: 1 }]);
  });

  it("a callback pool's query() (a command handed to its connection): bounded, the connection released", async () => {
    const pool = mysql.createPool(serverOptions({ connectionLimit: 1 }));
    ends.push(() => pool.promise().end());
    const mark = marker();
    const error = await runWithDeadline(
      200,
      () => new Promise((resolve) => pool.query(`SELECT SLEEP(?) /* ${mark} */`, [5], (caught) => resolve(caught))),
    );
    expect(error).toBeInstanceOf(DeadlineExceededError);
    await watcher.waitGone(mark);
    const rows = await new Promise((resolve, reject) =>
      pool.query('SELECT ? AS one', [1], (caught, result) => (caught ? reject(caught) : resolve(result))),
    );
    expect(rows).toEqual([{ one: 1 }]);
    // Inside a deadline, the command's own options hold (rowsAsArray, named placeholders of the pool's config).
    const arrays = await runWithDeadline(
      1_000,
      () =>
        new Promise((resolve, reject) =>
          pool.query({ sql: 'SELECT ? AS one, 2 AS two', rowsAsArray: true }, [1], (caught, result) =>
            caught ? reject(caught) : resolve(result),
          ),
        ),
    );
    expect(arrays).toEqual([[1, 2]]);
  });

  it("a caller waiting for the pool's only connection: bounded by its own deadline, not the releaser's, the wait included", async () => {
    const pool = promisePool(1);
    const held = await runWithDeadline(10_000, () => pool.getConnection());
    const mark = marker();
    const start = performance.now();
    const waitingLate = timerLateness(600);
    // Queued in the pool: called back from the release below, in the holder's context.
    const waiting = settle(
      start,
      runWithDeadline(600, () => pool.query(`SELECT SLEEP(5) /* ${mark} */`)),
    );
    await runWithDeadline(10_000, async () => {
      await held.query('SELECT SLEEP(0.1)');
      held.release();
    });
    const { error, elapsed } = await waiting;
    expect(error).toBeInstanceOf(DeadlineExceededError);
    expect(elapsed).toBeGreaterThanOrEqual(595);
    expect(elapsed).toBeLessThan(600 + (await waitingLate) + SETTLE_MARGIN_MS);
    await watcher.waitGone(mark);

    // Still waiting at its deadline: answered then, nothing sent; the connection, once free, back in the pool.
    const holder = await runWithDeadline(10_000, () => pool.getConnection());
    const queued = performance.now();
    const lateness = timerLateness(300);
    const late = await settle(
      queued,
      runWithDeadline(300, () => pool.query('SELECT 1')),
    );
    expect(late.error).toBeInstanceOf(DeadlineExceededError);
    expect(late.elapsed).toBeGreaterThanOrEqual(295);
    expect(late.elapsed).toBeLessThan(300 + (await lateness) + SETTLE_MARGIN_MS);
    holder.release();
    const [[row]] = await pool.query<RowDataPacket[]>('SELECT 1 AS one');
    expect(row?.one).toBe(1);
  });

  it('a transaction cut at the deadline is rolled back by its owner, and the connection reused', async () => {
    const pool = promisePool(1);
    await pool.query(`CREATE TABLE IF NOT EXISTS ${TABLE} (tag varchar(100)) ENGINE=InnoDB`);
    const tag = marker();
    const connection = await pool.getConnection();
    const idBefore = connection.threadId;
    const error = await runWithDeadline(300, async () => {
      await connection.query('START TRANSACTION');
      try {
        await connection.query(`INSERT INTO ${TABLE} VALUES (?)`, [tag]);
        await connection.query('SELECT SLEEP(5)');
        await connection.query('COMMIT');
      } catch (caught) {
        await connection.query('ROLLBACK'); // what every ORM does on an error; it runs whatever the time left
        return caught;
      }
    });
    connection.release();
    expect(error).toBeInstanceOf(DeadlineExceededError);
    const [rows] = await pool.query<RowDataPacket[]>(
      `SELECT count(*) AS n, CONNECTION_ID() AS id FROM ${TABLE} WHERE tag = ?`,
      [tag],
    );
    expect(Number(rows[0]?.n)).toBe(0);
    expect(rows[0]?.id).toBe(idBefore);
  });

  it("two requests in turn on one connection: the second never sees the first one's KILL", async () => {
    const connection = await mysqlPromise.createConnection(serverOptions());
    ends.push(() => connection.end());
    for (let round = 0; round < 50; round++) {
      await expect(
        runWithDeadline(2 + (round % 5), () => connection.query('SELECT SLEEP(0.05)')),
      ).rejects.toBeInstanceOf(DeadlineExceededError);
      const [rows] = await runWithDeadline(5_000, () =>
        connection.query<RowDataPacket[]>('SELECT SLEEP(0.01) AS s, 1 AS one'),
      );
      expect(rows[0]).toMatchObject({ one: 1 });
    }
  });

  it('outside a context nothing changes: no limit', async () => {
    const pool = promisePool(1);
    const start = performance.now();
    const [rows] = await pool.query<RowDataPacket[]>('SELECT SLEEP(0.3) AS s, @@max_statement_time AS limit_s');
    expect(performance.now() - start).toBeGreaterThanOrEqual(295);
    expect(Number(rows[0]?.limit_s)).toBe(0);
  });

  it('idempotent; undone, a statement in a context runs to its end; made again, bounded again', async () => {
    expect(instrumentMysql(mysql, { name: 'orders-db' })).toBe(undo);
    const pool = promisePool(1);
    undo();
    const start = performance.now();
    await runWithDeadline(100, () => pool.query('SELECT SLEEP(0.3)'));
    expect(performance.now() - start).toBeGreaterThanOrEqual(295);
    undo = instrumentMysql(mysql, { name: 'orders-db' });
    await expect(runWithDeadline(100, () => pool.query('SELECT SLEEP(5)'))).rejects.toBeInstanceOf(
      DeadlineExceededError,
    );
  });

  it('with withDeadline(pool) as well: each statement is bounded once, by the wrapper', async () => {
    const db = withDeadline(promisePool(1));
    const starts: unknown[] = [];
    const onStart = (message: unknown) => starts.push(message);
    diagnostics.subscribe(DiagnosticsChannel.CallStart, onStart);
    try {
      await runWithDeadline(5_000, () => db.query('SELECT 1'));
      await runWithDeadline(5_000, () => db.execute('SELECT 1'));
    } finally {
      diagnostics.unsubscribe(DiagnosticsChannel.CallStart, onStart);
    }
    expect(starts).toHaveLength(2);
    const mark = marker();
    await expect(runWithDeadline(100, () => db.query(`SELECT SLEEP(5) /* ${mark} */`))).rejects.toBeInstanceOf(
      DeadlineExceededError,
    );
    await watcher.waitGone(mark);
  });

  it('refuses what is not the mysql2 module, naming it', () => {
    expect(() => instrumentMysql({} as never)).toThrow(/mysql2/);
    expect(() => instrumentMysql(mysql, { marginMs: -1 })).toThrow(/marginMs/);
  });
});
