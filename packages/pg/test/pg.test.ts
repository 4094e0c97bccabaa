/**
 * @deadline/pg against the PostgreSQL running here: statements cut at the deadline and gone from the server,
 * the connection back in the pool clean, no context bleed between requests.
 */
import diagnostics from 'node:diagnostics_channel';
import { once } from 'node:events';
import { type AddressInfo, connect, createServer as createTcpServer, type Socket } from 'node:net';
import {
  type CallEndMessage,
  CancelledError,
  createContext,
  currentDeadline,
  DeadlineExceededError,
  DiagnosticsChannel,
  runWithContext,
  runWithDeadline,
  traceFrom,
} from '@deadline/core';
import fastifyDeadline from '@deadline/fastify';
import Fastify from 'fastify';
import { Kysely, PostgresDialect, sql } from 'kysely';
import pg from 'pg';
import { request } from 'undici';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { POSTGRES, requireService } from '../../../test/support/services.ts';
import { timerLateness } from '../../../test/support/settle.ts';
import { withDeadline } from '../src/index.ts';
import { marker, ServerActivity } from './support/activity.ts';

const available = await requireService(POSTGRES);
/** This process's own tables: another run of the suite beside this one (other sessions test too) has its own. */
const LOCKS = `deadline_locks_${process.pid}`;
const DROPPED = `deadline_dropped_cancel_${process.pid}`;
const TX = `deadline_tx_${process.pid}`;
/**
 * How long past its deadline, and past a plain timer due with it (as late as the machine let that fire,
 * settle.ts), a call may reject on a busy machine: well short of the 5 s its statement would run.
 */
const SETTLE_MARGIN_MS = 500;
/** Long enough for a statement to reach the server on a busy machine, its connection already made. */
const REACHES_THE_SERVER_MS = 2_000;
/** Past a plain timer due with its deadline, a statement is gone from the server within this, at the 99th percentile. */
const GONE_P99_MS = 500;

let monitor: pg.Client;
let activity: ServerActivity;
const pools: pg.Pool[] = [];
let poolNumber = 0;
function newPool(max = 2, settings: pg.PoolConfig = {}): pg.Pool {
  const pool = new pg.Pool({
    connectionString: POSTGRES.url,
    max,
    ...settings,
    application_name: `deadline-test-${process.pid}-${++poolNumber}`,
  });
  pools.push(pool);
  return pool;
}

/**
 * The connections the library opens for a CancelRequest (net.connect(), which Node reports on the channel) while
 * the watch is on; `onOpen` is told of each as it opens. From Node 22 on, the channel reports node-postgres's
 * own connections too: the tests that watch have their pool's connection open before they start.
 */
function watchCancelConnections(onOpen: () => void = () => {}) {
  const sockets: Socket[] = [];
  const onSocket = (message: unknown) => {
    sockets.push((message as { socket: Socket }).socket);
    onOpen();
  };
  diagnostics.subscribe('net.client.socket', onSocket);
  return {
    sockets,
    /** Resolves once every one of them has closed. */
    allClosed: () => Promise.all(sockets.map((socket) => (socket.closed ? undefined : once(socket, 'close')))),
    stop: () => diagnostics.unsubscribe('net.client.socket', onSocket),
  };
}

async function connectionsOf(pool: pg.Pool): Promise<number> {
  const name = (pool as unknown as { options: { application_name: string } }).options.application_name;
  const { rows } = await monitor.query('SELECT count(*)::int AS n FROM pg_stat_activity WHERE application_name = $1', [
    name,
  ]);
  return (rows[0] as { n: number }).n;
}

describe.runIf(available)('@deadline/pg (PostgreSQL)', () => {
  beforeAll(async () => {
    activity = await ServerActivity.open();
    monitor = activity.monitor;
  });
  afterAll(async () => {
    await Promise.all(pools.map((p) => p.end()));
    await activity?.monitor.query(`DROP TABLE IF EXISTS ${LOCKS}, ${DROPPED}, ${TX}`);
    await activity?.end();
  });

  it('outside a context: the pool as it is', async () => {
    const db = withDeadline(newPool());
    const { rows } = await db.query<{ n: number }>('SELECT 1 AS n');
    expect(rows).toEqual([{ n: 1 }]);
  });

  it('pg_sleep(5) under a 200 ms budget: rejects near 200 ms, the statement is gone, the pool works', async () => {
    const pool = newPool();
    const db = withDeadline(pool, { name: 'orders-db' });
    const m = marker();
    const started = performance.now();
    const error = await runWithDeadline(200, () => db.query(`SELECT pg_sleep(5) /* ${m} */`)).catch((e: unknown) => e);
    const rejectedAt = performance.now();
    expect(error).toBeInstanceOf(DeadlineExceededError);
    expect(error).toMatchObject({ phase: 'during-call', target: 'orders-db' });
    // The server confirmed: the driver's error (57014, canceled) is the cause.
    expect((error as Error).cause).toMatchObject({ code: '57014' });
    expect(rejectedAt - started).toBeGreaterThanOrEqual(195);
    expect(rejectedAt - started).toBeLessThan(1_500);
    const gone = await activity.goneAt(m);
    expect(gone - rejectedAt).toBeLessThan(1_000);
    const { rows } = await db.query<{ n: number }>('SELECT 1 AS n');
    expect(rows[0]?.n).toBe(1);
    expect(pool.totalCount).toBeLessThanOrEqual(2);
  });

  it('deadline → statement gone from pg_stat_activity, over 100 runs (p50, p99)', async () => {
    const db = withDeadline(newPool());
    const latencies: number[] = [];
    // From the deadline less how late a plain timer due then fired: what the machine's stalls leave to the library.
    const pastTimer: number[] = [];
    for (let i = 0; i < 100; i++) {
      const m = marker();
      let deadlineAt = 0;
      const late = timerLateness(50);
      const error = await runWithDeadline(50, () => {
        // The deadline's own instant on the monotonic clock (performance.now()), not when we heard of it.
        deadlineAt = currentDeadline()?.expiresAt as number;
        return db.query(`SELECT pg_sleep(5) /* ${m} */`);
      }).catch((e: unknown) => e);
      expect(error).toBeInstanceOf(DeadlineExceededError);
      const gone = (await activity.goneAt(m)) - deadlineAt;
      latencies.push(gone);
      pastTimer.push(gone - (await late));
    }
    latencies.sort((a, b) => a - b);
    pastTimer.sort((a, b) => a - b);
    const p50 = latencies[49] as number;
    const p99 = latencies[98] as number;
    console.log(
      `postgres cancel: deadline → statement gone p50 ${p50.toFixed(1)} ms, p99 ${p99.toFixed(1)} ms; past a plain timer due then, p99 ${pastTimer[98]?.toFixed(1)} ms`,
    );
    expect(pastTimer[98]).toBeLessThan(GONE_P99_MS);
  }, 60_000);

  it('a statement still running near its deadline has its cancel connection open before the stop, closed after', async () => {
    const pool = newPool(1);
    const db = withDeadline(pool);
    await pool.query('SELECT 1'); // the pool's one connection, open before watching
    const cancels = watchCancelConnections();
    let openAtStop: number | undefined;
    try {
      const error = await runWithDeadline(300, (ctx) => {
        // Subscribed before the query: told of the stop just before the library, so before the cancel is written.
        ctx.onStop(() => {
          openAtStop = cancels.sockets.filter((socket) => !socket.destroyed).length;
        });
        return db.query('SELECT pg_sleep(5)');
      }).catch((e: unknown) => e);
      expect(error).toBeInstanceOf(DeadlineExceededError);
      expect((error as Error).cause).toMatchObject({ code: '57014' });
      // The one opened ahead for the cancel, open when the stop came; closed once the cancel is done.
      expect(openAtStop).toBe(1);
      await cancels.allClosed();
      expect(cancels.sockets).toHaveLength(1);
    } finally {
      cancels.stop();
    }
  });

  it('a statement that ends just before its deadline: the connection opened ahead is closed unused', async () => {
    const pool = newPool(1);
    const db = withDeadline(pool, { statementTimeout: false });
    await monitor.query(`CREATE TABLE IF NOT EXISTS ${LOCKS} (id int PRIMARY KEY, n int)`);
    await monitor.query(`INSERT INTO ${LOCKS} VALUES (2, 0) ON CONFLICT DO NOTHING`);
    const holder = new pg.Client({ connectionString: POSTGRES.url });
    await holder.connect();
    let pid: number | undefined;
    let endedInTime = 0;
    let unused: Socket[] = [];
    try {
      // The window is the last 10 ms before the stop: on a busy machine the lock's release can miss it several
      // rounds running (CI, Node 24 and 26 side by side: five in a row), hence up to fifteen.
      for (let i = 0; i < 15 && endedInTime === 0; i++) {
        // The pool's one connection, open before watching: an earlier round whose cancel went out may have
        // destroyed it, and the channel would report its replacement as if it were a cancel connection (CI,
        // Node 24: the lock released by the new pool connection's opening, 156 bytes written on the "unused" one).
        pid = (await pool.query('SELECT pg_backend_pid() AS pid')).rows[0].pid as number;
        await holder.query('BEGIN');
        await holder.query(`SELECT * FROM ${LOCKS} WHERE id = 2 FOR UPDATE`);
        // The lock goes the moment the cancel connection is opened (~10 ms before the stop): the statement then
        // ends before its deadline, with a connection opened for a cancel that is not needed.
        // Its promise is the test's own: a cancel connection opened after the last round would meet the holder's
        // end (CI, Node 24: "Connection terminated", unhandled).
        const cancels = watchCancelConnections(() => void holder.query('ROLLBACK').catch(() => {}));
        try {
          const result = await runWithDeadline(300, async (ctx) => {
            const answer = await db.query(`UPDATE ${LOCKS} SET n = n + 1 WHERE id = 2`);
            return { answer, stoppedFirst: ctx.signal?.aborted === true };
          }).catch((e: unknown) => e);
          const opened = cancels.sockets.length > 0;
          if (!opened) await holder.query('ROLLBACK');
          // On a busy machine the stop may still come first: then the statement is cancelled as usual, or (the
          // lock gone just as the cancel went out) its answer arrives after the stop. Either way: try again.
          if (opened && !(result instanceof Error) && !(result as { stoppedFirst: boolean }).stoppedFirst) {
            endedInTime++;
            unused = cancels.sockets;
          }
          await cancels.allClosed();
        } finally {
          cancels.stop();
        }
      }
    } finally {
      await holder.end();
    }
    expect(endedInTime).toBe(1);
    // Closed, and nothing was ever written on it.
    expect(unused.map((socket) => [socket.destroyed, socket.bytesWritten])).toEqual([[true, 0]]);
    // No cancel was sent: the round's backend, and a statement on it runs to its end.
    const after = await pool.query('SELECT pg_backend_pid() AS pid, pg_sleep(0.05)');
    expect(after.rows[0].pid).toBe(pid);
  });

  it('the cancel goes to the address the connection reached, whatever name it was given (localhost)', async () => {
    const url = new URL(POSTGRES.url);
    if (url.hostname !== '127.0.0.1') return;
    url.hostname = 'localhost';
    const pool = new pg.Pool({ connectionString: url.href, max: 1 });
    pools.push(pool);
    // No belt: only the cancel can end the statement before its 5 s.
    const db = withDeadline(pool, { statementTimeout: false });
    // Connected first: the budget is the statement's, not spent on the connection (CI, Node 26: stopped before
    // the server confirmed, so no 57014 on the error; the statement's end on the server is what shows the cancel).
    await pool.query('SELECT 1');
    const m = marker();
    const error = await runWithDeadline(100, () => db.query(`SELECT pg_sleep(5) /* ${m} */`)).catch((e: unknown) => e);
    const rejectedAt = performance.now();
    expect(error).toBeInstanceOf(DeadlineExceededError);
    // Cancelled on the server, not left to its 5 s.
    expect((await activity.goneAt(m)) - rejectedAt).toBeLessThan(1_000);
  });

  it('a cancel the server dropped (it came before the backend read the statement) is sent again: no write lands', async () => {
    // A proxy holds the statement's bytes for 40 ms; the request is cancelled the moment they reach it. The
    // CancelRequest (through the same proxy, not held) then finds the backend still reading a command, and the
    // server drops it — what a busy machine does when the backend has not run since the statement was written.
    const marker = `dropped_cancel_${process.pid}`;
    const url = new URL(POSTGRES.url);
    const server = { port: Number(url.port || 5432), host: url.hostname };
    const stop = new AbortController();
    const proxy = createTcpServer((from) => {
      const to = connect(server.port, server.host);
      let held = false;
      from.on('data', (chunk: Buffer) => {
        if (!held && chunk.includes(marker)) {
          held = true;
          stop.abort();
        }
        if (held) setTimeout(() => to.write(chunk), 40);
        else to.write(chunk);
      });
      to.pipe(from);
      from.on('error', () => to.destroy());
      to.on('error', () => from.destroy());
      from.on('close', () => to.destroy());
    });
    proxy.listen(0, '127.0.0.1');
    await once(proxy, 'listening');
    url.host = `127.0.0.1:${(proxy.address() as AddressInfo).port}`;
    const pool = new pg.Pool({ connectionString: url.href, max: 1 });
    pools.push(pool);
    const db = withDeadline(pool);
    try {
      await monitor.query(`CREATE TABLE IF NOT EXISTS ${DROPPED} (marker text)`);
      await pool.query('SELECT 1'); // the connection open before the test's statement
      const error = await runWithContext({ signal: stop.signal }, () =>
        db.query(`INSERT INTO ${DROPPED} SELECT $1 FROM pg_sleep(2) /* ${marker} */`, [marker]),
      ).catch((e: unknown) => e);
      const stoppedAt = performance.now();
      expect(error).toBeInstanceOf(CancelledError);
      // Without the resend it runs its 2 s to the end and the row lands.
      const goneAfter = (await activity.goneAt(marker)) - stoppedAt;
      console.log(`dropped cancel: the statement gone ${goneAfter.toFixed(1)} ms after the caller was answered`);
      expect(goneAfter).toBeLessThan(1_000);
      const { rows } = await monitor.query(`SELECT count(*)::int AS n FROM ${DROPPED} WHERE marker = $1`, [marker]);
      expect(rows[0]).toEqual({ n: 0 });
      // The pool serves on: a new connection if the one that had two cancels sent was let go.
      expect((await db.query('SELECT 1 AS n')).rows).toEqual([{ n: 1 }]);
    } finally {
      await pool.end();
      pools.splice(pools.indexOf(pool), 1);
      proxy.close();
    }
  });

  it('the server-side belt: statement_timeout is set for the statement, and back to default on the connection', async () => {
    const pool = newPool(1);
    const db = withDeadline(pool);
    const inside = await runWithDeadline(5_000, () =>
      db.query<{ statement_timeout: string }>('SHOW statement_timeout'),
    );
    const set = inside.rows[0]?.statement_timeout as string;
    expect(set).toMatch(/^\d+ms$|^\d+s$/);
    expect(Number.parseInt(set, 10)).toBeGreaterThan(0);
    const after = await pool.query('SHOW statement_timeout');
    expect(after.rows[0].statement_timeout).toBe('0');
  });

  it('a budget already gone: DeadlineExceededError before-call, the pool untouched', async () => {
    const pool = newPool();
    const db = withDeadline(pool);
    const ctx = createContext({ root: true, deadline: 0.5 });
    const error = await ctx.run(() => db.query('SELECT 1')).catch((e: unknown) => e);
    expect(error).toMatchObject({ phase: 'before-call' });
    expect(pool.totalCount).toBe(0);
  });

  it('a checkout waits no longer than the budget; the connection that comes later goes back to the pool', async () => {
    const pool = newPool(1);
    const db = withDeadline(pool);
    const held = await pool.connect();
    const started = performance.now();
    const error = await runWithDeadline(200, () => db.query('SELECT 1')).catch((e: unknown) => e);
    expect(error).toBeInstanceOf(DeadlineExceededError);
    expect(performance.now() - started).toBeLessThan(1_500);
    held.release();
    // The abandoned checkout got the connection and handed it straight back: the pool still serves.
    const { rows } = await runWithDeadline(2_000, () => db.query<{ n: number }>('SELECT 2 AS n'));
    expect(rows[0]?.n).toBe(2);
    expect(pool.totalCount).toBe(1);
  });

  it('a statement waiting on a row lock is cancelled the same way', async () => {
    const db = withDeadline(newPool());
    await monitor.query(`CREATE TABLE IF NOT EXISTS ${LOCKS} (id int PRIMARY KEY, n int)`);
    await monitor.query(`INSERT INTO ${LOCKS} VALUES (1, 0) ON CONFLICT DO NOTHING`);
    const holder = new pg.Client({ connectionString: POSTGRES.url });
    await holder.connect();
    try {
      await holder.query('BEGIN');
      await holder.query(`SELECT * FROM ${LOCKS} WHERE id = 1 FOR UPDATE`);
      const m = marker();
      const error = await runWithDeadline(200, () =>
        db.query(`UPDATE ${LOCKS} SET n = n + 1 WHERE id = 1 /* ${m} */`),
      ).catch((e: unknown) => e);
      const rejectedAt = performance.now();
      expect(error).toBeInstanceOf(DeadlineExceededError);
      expect((await activity.goneAt(m)) - rejectedAt).toBeLessThan(1_000);
    } finally {
      await holder.query('ROLLBACK');
      await holder.end();
    }
  });

  it('a CPU-heavy statement is stopped', async () => {
    // JIT off: the planner costs this statement high enough for PostgreSQL to compile it with LLVM first, and
    // a cancel waits for the compilation to end (65 ms here, 3.2 s once in CI under load; docs/guides/postgres.md,
    // "JIT compilation is not interrupted"). This test is about the statement running.
    const db = withDeadline(newPool(2, { options: '-c jit=off' }));
    const m = marker();
    const error = await runWithDeadline(200, () =>
      db.query(`SELECT count(*) FROM generate_series(1, 2000000000) /* ${m} */`),
    ).catch((e: unknown) => e);
    const rejectedAt = performance.now();
    expect(error).toBeInstanceOf(DeadlineExceededError);
    expect((await activity.goneAt(m)) - rejectedAt).toBeLessThan(1_000);
  });

  it('a transaction cancelled mid-way is rolled back and its connection returned healthy', async () => {
    const pool = newPool(1);
    const db = withDeadline(pool);
    await monitor.query(`CREATE TABLE IF NOT EXISTS ${TX} (id serial PRIMARY KEY, tag text)`);
    const tag = marker();
    const error = await runWithDeadline(300, () =>
      db.transaction(async (tx) => {
        await tx.query(`INSERT INTO ${TX} (tag) VALUES ($1)`, [tag]);
        await tx.query('SELECT pg_sleep(5)');
      }),
    ).catch((e: unknown) => e);
    expect(error).toBeInstanceOf(DeadlineExceededError);
    const { rows } = await db.query(`SELECT count(*)::int AS n FROM ${TX} WHERE tag = $1`, [tag]);
    expect(rows[0]).toEqual({ n: 0 });
    // The same (only) connection: outside any transaction, default settings.
    const state = await pool.query(
      "SELECT current_setting('statement_timeout') AS t, now() = statement_timestamp() AS fresh",
    );
    expect(state.rows[0]).toEqual({ t: '0', fresh: true });
    expect(pool.totalCount).toBe(1);
  });

  it('a transaction that completes commits', async () => {
    const db = withDeadline(newPool(1));
    await monitor.query(`CREATE TABLE IF NOT EXISTS ${TX} (id serial PRIMARY KEY, tag text)`);
    const tag = marker();
    await runWithDeadline(5_000, () => db.transaction((tx) => tx.query(`INSERT INTO ${TX} (tag) VALUES ($1)`, [tag])));
    const { rows } = await monitor.query(`SELECT count(*)::int AS n FROM ${TX} WHERE tag = $1`, [tag]);
    expect(rows[0]).toEqual({ n: 1 });
  });

  it('two requests on a pool of one connection: each bounded by its own budget, each call in its own trace', async () => {
    const db = withDeadline(newPool(1));
    const ends: CallEndMessage[] = [];
    const onEnd = (message: unknown) => ends.push(message as CallEndMessage);
    diagnostics.subscribe(DiagnosticsChannel.CallEnd, onEnd);
    try {
      const traceA = traceFrom('00-aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa-aaaaaaaaaaaaaaaa-01', undefined);
      const traceB = traceFrom('00-bbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbb-bbbbbbbbbbbbbbbb-01', undefined);
      const started = performance.now();
      const [lateA, lateB] = [timerLateness(300), timerLateness(900)];
      const timed = (p: Promise<unknown>) =>
        p.then(
          () => performance.now() - started,
          () => performance.now() - started,
        );
      const [a, b] = await Promise.all([
        timed(runWithContext({ deadline: 300, trace: traceA }, () => db.query('SELECT pg_sleep(5)'))),
        timed(runWithContext({ deadline: 900, trace: traceB }, () => db.query('SELECT pg_sleep(5)'))),
      ]);
      expect(a).toBeGreaterThanOrEqual(295);
      expect(a).toBeLessThan(300 + (await lateA) + SETTLE_MARGIN_MS);
      // B waited for the connection, then was cut at its own deadline, not A's.
      expect(b).toBeGreaterThanOrEqual(895);
      expect(b).toBeLessThan(900 + (await lateB) + 2 * SETTLE_MARGIN_MS);
      const traces = ends.map((e) => e.context?.trace?.traceId);
      expect(traces).toContain('aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa');
      expect(traces).toContain('bbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbb');
      for (const end of ends) expect(end.outcome).toBe('deadline_exceeded');
    } finally {
      diagnostics.unsubscribe(DiagnosticsChannel.CallEnd, onEnd);
    }
  });

  it('1,000 cancelled statements: no leaked connections, no unhandled rejections, settings back to default', async () => {
    const pool = newPool(4);
    const db = withDeadline(pool);
    const sockets = () => process.getActiveResourcesInfo().filter((r) => r === 'TCPSocketWrap').length;
    const socketsBefore = sockets();
    let unhandled = 0;
    const onUnhandled = () => {
      unhandled++;
    };
    process.on('unhandledRejection', onUnhandled);
    try {
      let cancelled = 0;
      const worker = async (count: number) => {
        for (let i = 0; i < count; i++) {
          const error = await runWithDeadline(10, () => db.query('SELECT pg_sleep(5)')).catch((e: unknown) => e);
          if (error instanceof DeadlineExceededError) cancelled++;
        }
      };
      await Promise.all([worker(250), worker(250), worker(250), worker(250)]);
      expect(cancelled).toBe(1_000);
      // Settle: every connection back (or replaced), then look.
      const settings = await Promise.all(
        [1, 2, 3, 4].map(() => pool.query("SELECT current_setting('statement_timeout') AS t, pg_sleep(0.05)")),
      );
      for (const s of settings) expect(s.rows[0].t).toBe('0');
      expect(await connectionsOf(pool)).toBeLessThanOrEqual(4);
      expect(pool.totalCount).toBeLessThanOrEqual(4);
      // The cancel connections are gone too: what is open is the pool's own (at most 4 more than before).
      expect(sockets() - socketsBefore).toBeLessThanOrEqual(4);
      expect(unhandled).toBe(0);
    } finally {
      process.off('unhandledRejection', onUnhandled);
    }
  }, 120_000);

  it('the client leaving the HTTP edge cancels the running statement', async () => {
    const db = withDeadline(newPool());
    const m = marker();
    // The aborted client's keep-alive socket would hold close() for undici's 4 s keep-alive timeout.
    const app = Fastify({ forceCloseConnections: true });
    await app.register(fastifyDeadline, { serviceName: 'orders' });
    let failed: (error: unknown) => void = () => {};
    const failedWith = new Promise((resolve) => {
      failed = resolve;
    });
    app.get('/', async () => {
      try {
        await db.query(`SELECT pg_sleep(5) /* ${m} */`);
      } catch (error) {
        failed(error);
        throw error;
      }
    });
    const url = await app.listen({ port: 0, host: '127.0.0.1' });
    try {
      const controller = new AbortController();
      const pending = request(url, { signal: controller.signal }).catch((e: unknown) => e);
      await activity.startedRunning(m);
      controller.abort();
      await pending;
      const abortedAt = performance.now();
      expect((await activity.goneAt(m)) - abortedAt).toBeLessThan(1_000);
      expect(await failedWith).toBeInstanceOf(CancelledError);
    } finally {
      await app.close();
    }
  });

  it('a single pg.Client: requests take turns, each cut at its own deadline, the cancel never hits the other', async () => {
    const client = new pg.Client({ connectionString: POSTGRES.url });
    await client.connect();
    try {
      const db = withDeadline(client);
      const started = performance.now();
      const slow = runWithDeadline(300, () => db.query('SELECT pg_sleep(5)')).catch((e: unknown) => e);
      const quick = runWithDeadline(2_000, () => db.query<{ n: number }>('SELECT pg_sleep(0.05), 7 AS n'));
      expect(await slow).toBeInstanceOf(DeadlineExceededError);
      expect((await quick).rows[0]?.n).toBe(7);
      expect(performance.now() - started).toBeLessThan(2_000);
      const { rows } = await client.query('SHOW statement_timeout');
      expect(rows[0].statement_timeout).toBe('0');
    } finally {
      await client.end();
    }
  });

  it('a statement that ends as the deadline passes: the cancel in flight never lands on the next borrower', async () => {
    const pool = newPool(1);
    const db = withDeadline(pool, { statementTimeout: false });
    let hit = 0;
    for (let i = 0; i < 60; i++) {
      await runWithDeadline(30, () => db.query('SELECT pg_sleep(0.03)')).catch(() => {});
      await pool.query('SELECT pg_sleep(0.005)').catch((error: { code?: string }) => {
        if (error.code === '57014') hit++;
      });
    }
    expect(hit).toBe(0);
  });

  it("the stop's error carries the driver's 57014 as its cause when our cancel ends the statement", async () => {
    // Its connection made first, and time for the statement to reach the server: the cancel must find it running
    // (with 100 ms and a connection still to make, CI under load once stopped it before it ran: no 57014; with
    // 400 ms, so did three test files on two cores).
    const pool = newPool(1);
    await pool.query('SELECT 1');
    const db = withDeadline(pool, { statementTimeout: false });
    const error = await runWithDeadline(REACHES_THE_SERVER_MS, () => db.query('SELECT pg_sleep(5)')).catch(
      (e: unknown) => e,
    );
    expect(error).toBeInstanceOf(DeadlineExceededError);
    expect((error as Error).cause).toMatchObject({ code: '57014' });
  });

  it("an operator's pg_cancel_backend() is not a deadline: the driver's error comes through", async () => {
    const pool = newPool(1);
    const db = withDeadline(pool);
    const m = marker();
    const pending = runWithDeadline(10_000, () => db.query(`SELECT pg_sleep(5) /* ${m} */`)).catch((e: unknown) => e);
    await activity.startedRunning(m);
    await monitor.query(
      "SELECT pg_cancel_backend(pid) FROM pg_stat_activity WHERE query LIKE $1 AND state = 'active' AND pid <> pg_backend_pid()",
      [`%${m}%`],
    );
    const error = await pending;
    expect(error).not.toBeInstanceOf(DeadlineExceededError);
    expect(error).toMatchObject({ code: '57014' });
  });

  it('a single pg.Client: a transaction cut at the deadline is rolled back (no open transaction left)', async () => {
    const client = new pg.Client({ connectionString: POSTGRES.url });
    await client.connect();
    try {
      const db = withDeadline(client, { statementTimeout: false });
      for (let i = 0; i < 20; i++) {
        await runWithDeadline(40, () =>
          db.transaction(async (tx) => {
            await tx.query('SELECT 1');
            await tx.query('SELECT pg_sleep(0.04)');
          }),
        ).catch(() => {});
        const { rows } = await db.query('SELECT now() = statement_timestamp() AS fresh');
        expect(rows[0]).toEqual({ fresh: true });
      }
    } finally {
      await client.end();
    }
  });

  it('a hand-written transaction on connect(): ROLLBACK after the deadline still runs', async () => {
    const pool = newPool(1);
    const db = withDeadline(pool);
    await runWithDeadline(200, async () => {
      const client = await db.connect();
      try {
        await client.query('BEGIN');
        await expect(client.query('SELECT pg_sleep(5)')).rejects.toBeInstanceOf(DeadlineExceededError);
        await client.query('ROLLBACK'); // no time left, but cleanup is never refused
      } finally {
        client.release();
      }
    });
    const state = await pool.query(
      "SELECT now() = statement_timestamp() AS fresh, current_setting('statement_timeout') AS t",
    );
    expect(state.rows[0]).toEqual({ fresh: true, t: '0' });
  });

  it('an ORM on the wrapped pool (Kysely) is bounded too', async () => {
    const db = withDeadline(newPool());
    const kysely = new Kysely<Record<string, never>>({ dialect: new PostgresDialect({ pool: db as never }) });
    const m = marker();
    const error = await runWithDeadline(200, () => sql`SELECT pg_sleep(5) /* ${sql.raw(m)} */`.execute(kysely)).catch(
      (e: unknown) => e,
    );
    const rejectedAt = performance.now();
    expect(error).toBeInstanceOf(DeadlineExceededError);
    expect((await activity.goneAt(m)) - rejectedAt).toBeLessThan(1_000);
    const ok = await runWithDeadline(2_000, () => sql<{ n: number }>`SELECT 1 AS n`.execute(kysely));
    expect(ok.rows).toEqual([{ n: 1 }]);
  });
});
