/**
 * `instrumentPg(pg)` on node-postgres itself: clients and pools the test makes as an ORM would (its own
 * `new pg.Client()`, `new pg.Pool()`, promise and callback style), bounded inside a deadline context and left
 * alone outside one; the patch made once, undone, and made again.
 */
import diagnostics from 'node:diagnostics_channel';
import { DeadlineExceededError, DiagnosticsChannel, isDeadlineExceededError, runWithDeadline } from '@deadline/core';
import pg from 'pg';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { POSTGRES, requireService } from '../../../test/support/services.ts';
import { settle, timerLateness } from '../../../test/support/settle.ts';
import { instrumentPg, withDeadline } from '../src/index.ts';
import { marker, ServerActivity } from './support/activity.ts';

const available = await requireService(POSTGRES);
/** This process's own table: another run of the suite beside this one (other sessions test too) has its own. */
const TABLE = `deadline_instrumented_tx_${process.pid}`;
/**
 * How long past its deadline — and past a plain timer due with it, as late as the machine let that fire (settle.ts)
 * — a statement may be answered or gone from the server: well short of the 5 s it would run.
 */
const SETTLE_MARGIN_MS = 500;

describe.runIf(available)('instrumentPg: every client of the module (PostgreSQL)', () => {
  let activity: ServerActivity;
  let undo: () => void;
  const clients: pg.Client[] = [];
  const pools: pg.Pool[] = [];
  const newClient = async () => {
    const client = new pg.Client({ connectionString: POSTGRES.url });
    await client.connect();
    clients.push(client);
    return client;
  };
  const newPool = (max: number) => {
    const pool = new pg.Pool({ connectionString: POSTGRES.url, max });
    pools.push(pool);
    return pool;
  };

  beforeAll(async () => {
    activity = await ServerActivity.open();
    undo = instrumentPg(pg, { name: 'orders-db' });
  });
  afterAll(async () => {
    undo?.();
    await Promise.all([...clients.map((c) => c.end()), ...pools.map((p) => p.end())]);
    await activity?.monitor.query(`DROP TABLE IF EXISTS ${TABLE}`);
    await activity?.end();
  });

  it('a client of its own: a 5 s statement under 300 ms rejects at the deadline and is gone from the server', async () => {
    const client = await newClient();
    const mark = marker();
    const start = performance.now();
    const late = timerLateness(300);
    const work = settle(
      start,
      runWithDeadline(300, () => client.query(`SELECT pg_sleep(5) /* ${mark} */`)),
    );
    await activity.startedRunning(mark);
    const { error, elapsed } = await work;
    const gone = (await activity.goneAt(mark)) - start;
    expect(error).toBeInstanceOf(DeadlineExceededError);
    expect(error).toMatchObject({ target: 'orders-db', phase: 'during-call' });
    expect(elapsed).toBeGreaterThanOrEqual(295);
    expect(elapsed).toBeLessThan(300 + (await late) + SETTLE_MARGIN_MS);
    expect(gone).toBeLessThan(300 + (await late) + SETTLE_MARGIN_MS);
    console.log(
      `instrumented client: rejected after ${elapsed.toFixed(1)} ms, gone from the server after ${gone.toFixed(1)} ms`,
    );
    // The connection is fine, its session setting back to the default.
    const { rows } = await client.query('SHOW statement_timeout');
    expect(rows[0]).toEqual({ statement_timeout: '0' });
  });

  it('callback style (pg-pool, Knex, TypeORM call it so): the callback gets the deadline error', async () => {
    const client = await newClient();
    const error = await runWithDeadline(
      100,
      () =>
        new Promise((resolve) => {
          client.query('SELECT pg_sleep(5)', [], (caught: Error | null) => resolve(caught));
        }),
    );
    expect(isDeadlineExceededError(error)).toBe(true);
    const result = await new Promise((resolve, reject) =>
      client.query('SELECT 1 AS one', (caught: Error | null, value: pg.QueryResult) =>
        caught ? reject(caught) : resolve(value.rows),
      ),
    );
    expect(result).toEqual([{ one: 1 }]);
  });

  it('a config object (Drizzle sends { text, rowMode, types }) is bounded and keeps its options', async () => {
    const client = await newClient();
    const rows = await runWithDeadline(1_000, async () => {
      const result = await client.query({ text: 'SELECT 1 AS one, 2 AS two', rowMode: 'array' });
      return result.rows;
    });
    expect(rows).toEqual([[1, 2]]);
    await expect(
      runWithDeadline(100, () => client.query({ text: 'SELECT pg_sleep(5)', rowMode: 'array' })),
    ).rejects.toBeInstanceOf(DeadlineExceededError);
  });

  it("a pool's query() and a checkout that waits: both end at the deadline; the late client goes back", async () => {
    const pool = newPool(1);
    const mark = marker();
    const start = performance.now();
    const query = settle(
      start,
      runWithDeadline(300, () => pool.query(`SELECT pg_sleep(5) /* ${mark} */`)),
    );
    // The only connection is busy: this checkout waits, and gives up at its own 150 ms.
    const late = timerLateness(150);
    const waiting = settle(
      start,
      runWithDeadline(150, () => pool.connect()),
    );
    const waited = await waiting;
    expect(waited.error).toBeInstanceOf(DeadlineExceededError);
    expect(waited.elapsed).toBeGreaterThanOrEqual(145);
    expect(waited.elapsed).toBeLessThan(150 + (await late) + SETTLE_MARGIN_MS);
    const queried = await query;
    expect(queried.error).toBeInstanceOf(DeadlineExceededError);
    await activity.goneAt(mark);
    // The pool is whole: its one client is idle again, and answers.
    const { rows } = await pool.query('SELECT 1 AS one');
    expect(rows).toEqual([{ one: 1 }]);
    expect(pool.totalCount).toBe(1);
    expect(pool.idleCount).toBe(1);
  });

  it('no time left: the statement is not sent', async () => {
    const client = await newClient();
    const mark = marker();
    const error = await runWithDeadline(0.5, async () => {
      await new Promise((resolve) => setTimeout(resolve, 5));
      return client.query(`SELECT 1 /* ${mark} */`).then(
        () => undefined,
        (caught: unknown) => caught,
      );
    }).catch((caught: unknown) => caught);
    expect(error).toBeInstanceOf(DeadlineExceededError);
    const { rows } = await activity.monitor.query(
      'SELECT count(*)::int AS n FROM pg_stat_activity WHERE query LIKE $1 AND pid <> pg_backend_pid()',
      [`%${mark}%`],
    );
    expect(rows[0]).toEqual({ n: 0 });
  });

  it('a transaction cut at the deadline is rolled back by its owner, and the client is reused', async () => {
    const client = await newClient();
    await client.query(`CREATE TABLE IF NOT EXISTS ${TABLE} (tag text)`);
    const tag = marker();
    const error = await runWithDeadline(300, async () => {
      await client.query('BEGIN');
      try {
        await client.query(`INSERT INTO ${TABLE} VALUES ($1)`, [tag]);
        await client.query('SELECT pg_sleep(5)');
        await client.query('COMMIT');
      } catch (caught) {
        await client.query('ROLLBACK'); // what every ORM does on an error; it runs whatever the time left
        return caught;
      }
    });
    expect(error).toBeInstanceOf(DeadlineExceededError);
    const { rows } = await client.query(`SELECT count(*)::int AS n FROM ${TABLE} WHERE tag = $1`, [tag]);
    expect(rows[0]).toEqual({ n: 0 });
    expect((await client.query('SHOW statement_timeout')).rows[0]).toEqual({ statement_timeout: '0' });
  });

  it("two requests in turn on one client: the second never sees the first one's cancel", async () => {
    const client = await newClient();
    let cut = 0;
    for (let round = 0; round < 50; round++) {
      // The first request's statement is cut; the second's, sent at once after on the same client, runs. Under
      // load the first may finish before its cancel lands (the server dropped a cancel that came before the
      // backend read the statement, and the 50 ms statement ended before the resend): its result is then real
      // and returned (CI, Node 24, once in 50). What must never happen is the second one cut by the first's cancel.
      const first = await runWithDeadline(2 + (round % 5), () => client.query('SELECT pg_sleep(0.05)')).then(
        () => 'ran',
        (error: unknown) => error,
      );
      if (first !== 'ran') {
        expect(first).toBeInstanceOf(DeadlineExceededError);
        cut++;
      }
      const { rows } = await runWithDeadline(5_000, () => client.query('SELECT pg_sleep(0.01), 1 AS one'));
      expect(rows[0]).toMatchObject({ one: 1 });
    }
    expect(cut).toBeGreaterThanOrEqual(40);
  });

  it('outside a context nothing changes: no session setting, no limit', async () => {
    const client = await newClient();
    const { rows } = await client.query('SELECT pg_sleep(0.3), current_setting($1) AS limit', ['statement_timeout']);
    expect(rows[0]).toMatchObject({ limit: '0' });
  });

  it('idempotent; undone, a statement in a context runs to its end; made again, bounded again', async () => {
    expect(instrumentPg(pg, { name: 'orders-db' })).toBe(undo);
    const client = await newClient();
    undo();
    const start = performance.now();
    await runWithDeadline(100, () => client.query('SELECT pg_sleep(0.3)'));
    expect(performance.now() - start).toBeGreaterThanOrEqual(295);
    undo = instrumentPg(pg, { name: 'orders-db' });
    await expect(runWithDeadline(100, () => client.query('SELECT pg_sleep(5)'))).rejects.toBeInstanceOf(
      DeadlineExceededError,
    );
  });

  it('with withDeadline(pool) as well: each statement is bounded once, by the wrapper', async () => {
    const db = withDeadline(newPool(1));
    const starts: unknown[] = [];
    const onStart = (message: unknown) => starts.push(message);
    diagnostics.subscribe(DiagnosticsChannel.CallStart, onStart);
    try {
      await runWithDeadline(5_000, () => db.query('SELECT 1'));
      await runWithDeadline(5_000, () => db.transaction((tx) => tx.query('SELECT 1')));
    } finally {
      diagnostics.unsubscribe(DiagnosticsChannel.CallStart, onStart);
    }
    expect(starts).toHaveLength(2); // one call per unit of work, none for the statements inside
    await expect(runWithDeadline(100, () => db.query('SELECT pg_sleep(5)'))).rejects.toBeInstanceOf(
      DeadlineExceededError,
    );
  });

  it('refuses what is not the pg module, naming it', () => {
    expect(() => instrumentPg({} as never)).toThrow(/pg/);
    expect(() => instrumentPg(pg, { marginMs: -1 })).toThrow(/marginMs/);
  });
});
