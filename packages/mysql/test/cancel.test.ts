/**
 * Statements stopped on the server at the deadline: a sleep, a row-lock wait, a CPU-bound query; a budget already
 * gone sends nothing; outside a context nothing changes. The process list, read from a connection of its own,
 * is the witness that a statement really stopped.
 */
import diagnostics from 'node:diagnostics_channel';
import {
  type CallEndMessage,
  CancelledError,
  createContext,
  DeadlineExceededError,
  DiagnosticsChannel,
  runWithDeadline,
} from '@deadline/core';
import { createPool, type Pool, type RowDataPacket } from 'mysql2/promise';
import { afterAll, beforeAll, describe, expect, it, vi } from 'vitest';
import { MARIADB, requireService } from '../../../test/support/services.ts';
import { timerLateness } from '../../../test/support/settle.ts';
import { type DeadlinePool, withDeadline } from '../src/index.ts';
import { oneCutterAtATime } from './one-cutter-at-a-time.ts';
import { marker, percentile, serverOptions, Watcher } from './support.ts';

const ok = await requireService(MARIADB);
if (ok) oneCutterAtATime();
/** This process's own table: another run of the suite beside this one (other sessions test too) has its own. */
const TABLE = `deadline_cancel_locks_${process.pid}`;

/**
 * How long past its deadline (and past a plain timer due with it: the machine's own lateness, settle.ts) a call may
 * reject on a busy machine: well short of the 5 s its statement would run.
 */
const SETTLE_MARGIN_MS = 800;
/** With `marginMs: 150`, the stop comes this soon after the margin's start: before the request's own deadline. */
const BEFORE_REQUEST_DEADLINE_MS = 145;
/** Past a plain timer due with its deadline, a statement is gone from the server within this, at the 99th percentile. */
const GONE_P99_MS = 200;

/**
 * Runs `fn` under a fresh `ms` budget; resolves with what it threw and when (ms since the start, and the instant),
 * and how late a plain timer set beside the deadline fired.
 */
async function failure(
  ms: number,
  fn: () => Promise<unknown>,
): Promise<{ error: unknown; elapsed: number; at: number; deadline: number; late: number }> {
  const start = performance.now();
  const deadline = start + ms;
  const lateness = timerLateness(ms);
  try {
    await runWithDeadline(ms, fn);
  } catch (error) {
    const at = performance.now();
    return { error, elapsed: at - start, at, deadline, late: await lateness };
  }
  throw new Error(`expected the statement to fail within ${ms} ms`);
}

describe.runIf(ok)('statements stopped at the deadline (MariaDB)', () => {
  let watcher: Watcher;
  let pool: Pool;
  let db: DeadlinePool;

  beforeAll(async () => {
    watcher = await Watcher.open();
    await watcher.query(`CREATE TABLE IF NOT EXISTS ${TABLE} (id INT PRIMARY KEY, v INT NOT NULL)`);
    await watcher.query(`INSERT IGNORE INTO ${TABLE} VALUES (1, 0)`);
    pool = createPool(serverOptions({ connectionLimit: 1 }));
    db = withDeadline(pool);
  });

  afterAll(async () => {
    await db?.end();
    await watcher?.query(`DROP TABLE IF EXISTS ${TABLE}`);
    await watcher?.end();
  });

  it('SELECT SLEEP(5) under a 200 ms budget: rejects near 200 ms, the statement is gone, the connection reused', async () => {
    const [[before]] = await db.query<RowDataPacket[]>('SELECT CONNECTION_ID() AS id');
    let created = 0;
    pool.on('connection', () => created++);
    const mark = marker();
    const { error, elapsed, late } = await failure(200, () => db.query(`SELECT SLEEP(5) /* ${mark} */`));
    expect(error).toBeInstanceOf(DeadlineExceededError);
    expect(error).toMatchObject({ phase: 'during-call', target: 'test' });
    expect(elapsed).toBeGreaterThanOrEqual(195);
    expect(elapsed).toBeLessThan(200 + late + SETTLE_MARGIN_MS);
    await watcher.waitGone(mark);
    // The next statement on the pool works, on the same connection: it was released, not destroyed.
    const [[after]] = await db.query<RowDataPacket[]>('SELECT CONNECTION_ID() AS id');
    expect(after?.id).toBe(before?.id);
    expect(created).toBe(0);
  });

  it('deadline → statement gone: p50/p99 over 100 runs (50 ms budget on SLEEP(5))', async () => {
    // From the deadline itself (start + budget), and from the moment the caller's promise rejected.
    const fromDeadline: number[] = [];
    const fromRejection: number[] = [];
    // From the deadline less how late a plain timer due then fired: what the machine's stalls leave to the library.
    const pastTimer: number[] = [];
    for (let run = 0; run < 100; run++) {
      const mark = marker();
      const { error, at, deadline, late } = await failure(50, () => db.query(`SELECT SLEEP(5) /* ${mark} */`));
      expect(error).toBeInstanceOf(DeadlineExceededError);
      const gone = await watcher.waitGone(mark);
      fromDeadline.push(gone - deadline);
      fromRejection.push(gone - at);
      pastTimer.push(gone - deadline - late);
    }
    const report = (name: string, values: number[]) =>
      `${name}: p50 ${percentile(values, 50).toFixed(2)} ms, p99 ${percentile(values, 99).toFixed(2)} ms, max ${Math.max(...values).toFixed(2)} ms`;
    console.log(
      `statement gone, over ${fromDeadline.length} runs — ${report('after the deadline', fromDeadline)}; ${report('after the rejection', fromRejection)}; ${report('after a plain timer due at the deadline', pastTimer)}`,
    );
    expect(percentile(pastTimer, 99)).toBeLessThan(GONE_P99_MS);
  });

  it('a statement waiting on a row lock is stopped the same way', async () => {
    const holder = await Watcher.open();
    try {
      await holder.query('START TRANSACTION');
      await holder.query(`SELECT * FROM ${TABLE} WHERE id = 1 FOR UPDATE`);
      const mark = marker();
      const { error, elapsed, late } = await failure(200, () =>
        db.query(`UPDATE ${TABLE} SET v = v + 1 WHERE id = 1 /* ${mark} */`),
      );
      expect(error).toBeInstanceOf(DeadlineExceededError);
      expect(elapsed).toBeLessThan(200 + late + SETTLE_MARGIN_MS);
      await watcher.waitGone(mark);
    } finally {
      await holder.query('ROLLBACK');
      await holder.end();
    }
    const [[row]] = await db.query<RowDataPacket[]>(`SELECT v FROM ${TABLE} WHERE id = 1`);
    expect(row?.v).toBe(0);
  });

  it('a CPU-bound statement (BENCHMARK) is stopped', async () => {
    const mark = marker();
    const { error, elapsed, late } = await failure(200, () =>
      db.query(`SELECT BENCHMARK(1e10, MD5('x')) /* ${mark} */`),
    );
    expect(error).toBeInstanceOf(DeadlineExceededError);
    expect(elapsed).toBeLessThan(200 + late + SETTLE_MARGIN_MS);
    await watcher.waitGone(mark);
    const [[row]] = await db.query<RowDataPacket[]>('SELECT 1 AS one');
    expect(row?.one).toBe(1);
  });

  it('the belt: when this process cannot send the KILL, the server stops the statement itself', async () => {
    const exceeded = async () => {
      const [[row]] = await watcher.query<RowDataPacket[]>("SHOW GLOBAL STATUS LIKE 'Max_statement_time_exceeded'");
      return Number(row?.Value);
    };
    const before = await exceeded();
    const mark = marker();
    const pending = failure(100, () => db.query(`SELECT SLEEP(5) /* ${mark} */`));
    await watcher.waitRunning(mark);
    // This process is stuck (a long synchronous stretch) past the deadline and the belt's slack.
    const stuckUntil = performance.now() + 500;
    while (performance.now() < stuckUntil) {}
    const { error } = await pending;
    expect(error).toBeInstanceOf(DeadlineExceededError);
    await watcher.waitGone(mark);
    expect(await exceeded()).toBeGreaterThan(before);
  });

  it('execute() is stopped too, and the session limit it set is put back', async () => {
    const mark = marker();
    const { error } = await failure(100, () => db.execute(`SELECT SLEEP(?) /* ${mark} */`, [5]));
    expect(error).toBeInstanceOf(DeadlineExceededError);
    await watcher.waitGone(mark);
    const [[row]] = await db.query<RowDataPacket[]>(
      'SELECT @@max_statement_time AS limit_s, @deadline_saved_limit AS saved',
    );
    expect(Number(row?.limit_s)).toBe(0);
    expect(row?.saved).toBeNull();
  });

  it('a cancelled context (the client left) stops the statement with CancelledError', async () => {
    const ctx = createContext({ deadline: 5_000, root: true });
    const mark = marker();
    const pending = ctx.run(() => db.query(`SELECT SLEEP(5) /* ${mark} */`)).catch((error: unknown) => error);
    await watcher.waitRunning(mark);
    ctx.cancel(new CancelledError('client went away', { reason: 'client-disconnected' }));
    const error = await pending;
    expect(error).toBeInstanceOf(CancelledError);
    expect(error).toMatchObject({ reason: 'client-disconnected' });
    await watcher.waitGone(mark);
    ctx.end();
  });

  it('budget already gone: nothing is asked of the pool, nothing sent', async () => {
    const getConnection = vi.spyOn(pool, 'getConnection');
    const query = vi.spyOn(pool, 'query');
    try {
      const { error } = await failure(0, () => db.query('SELECT 1'));
      expect(error).toBeInstanceOf(DeadlineExceededError);
      expect(error).toMatchObject({ phase: 'before-call', target: 'test' });
      const ctx = createContext({ deadline: 5_000, root: true });
      ctx.cancel(new CancelledError('client went away', { reason: 'client-disconnected' }));
      await expect(ctx.run(() => db.execute('SELECT 1'))).rejects.toBeInstanceOf(CancelledError);
      ctx.end();
      expect(getConnection).not.toHaveBeenCalled();
      expect(query).not.toHaveBeenCalled();
    } finally {
      getConnection.mockRestore();
      query.mockRestore();
    }
  });

  it('marginMs: the statement is stopped that much before the request deadline', async () => {
    const withMargin = withDeadline(createPool(serverOptions({ connectionLimit: 1 })), {
      marginMs: 150,
      name: 'orders',
    });
    try {
      const mark = marker();
      const late = timerLateness(250);
      const { error, elapsed } = await failure(400, () => withMargin.query(`SELECT SLEEP(5) /* ${mark} */`));
      expect(error).toBeInstanceOf(DeadlineExceededError);
      expect(error).toMatchObject({ phase: 'during-call', target: 'orders' });
      expect(elapsed).toBeGreaterThanOrEqual(245);
      // At the deadline less the margin (as late as a plain timer due then), before the request's own.
      expect(elapsed).toBeLessThan(250 + (await late) + BEFORE_REQUEST_DEADLINE_MS);
      await watcher.waitGone(mark);
    } finally {
      await withMargin.end();
    }
  });

  it('one call per statement on the diagnostics channels, with its outcome', async () => {
    const events: string[] = [];
    const onStart = (message: unknown) => events.push(`start ${(message as { target: string }).target}`);
    const onEnd = (message: unknown) => events.push(`end ${(message as CallEndMessage).outcome}`);
    diagnostics.subscribe(DiagnosticsChannel.CallStart, onStart);
    diagnostics.subscribe(DiagnosticsChannel.CallEnd, onEnd);
    try {
      await runWithDeadline(1_000, () => db.query('SELECT 1'));
      await failure(50, () => db.query('SELECT SLEEP(5)'));
      await failure(0, () => db.query('SELECT 1'));
      await db.query('SELECT 1'); // outside a context: no call
    } finally {
      diagnostics.unsubscribe(DiagnosticsChannel.CallStart, onStart);
      diagnostics.unsubscribe(DiagnosticsChannel.CallEnd, onEnd);
    }
    // The refused statement publishes no call (it is reported on deadline:exceeded, phase before-call).
    expect(events).toEqual(['start test', 'end ok', 'start test', 'end deadline_exceeded']);
  });

  it('outside a context: the same results as the pool itself', async () => {
    const sql = 'SELECT ? + 1 AS n, ? AS s';
    const [rows, fields] = await db.query<RowDataPacket[]>(sql, [41, 'x']);
    const [direct] = await pool.query<RowDataPacket[]>(sql, [41, 'x']);
    expect(rows).toEqual(direct);
    expect(fields.map((field) => field.name)).toEqual(['n', 's']);
    const [executed] = await db.execute<RowDataPacket[]>(sql, [41, 'x']);
    expect(executed).toEqual((await pool.execute<RowDataPacket[]>(sql, [41, 'x']))[0]);
    // No belt: the statement text is the caller's.
    const [[info]] = await db.query<RowDataPacket[]>(
      'SELECT INFO AS info FROM information_schema.processlist WHERE ID = CONNECTION_ID()',
    );
    expect(info?.info).toMatch(/^SELECT INFO/);
  });

  it('inside a context: the statement carries the belt', async () => {
    const [[info]] = await runWithDeadline(1_000, () =>
      db.query<RowDataPacket[]>('SELECT INFO AS info FROM information_schema.processlist WHERE ID = CONNECTION_ID()'),
    );
    expect(info?.info).toMatch(/^SET STATEMENT max_statement_time=\d\.\d{3} FOR SELECT INFO/);
  });
});
