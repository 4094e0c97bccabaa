/**
 * How fast work on a server stops once nobody waits for it any more, seen from the server itself:
 *
 * - Postgres: `SELECT pg_sleep(5)` under a 50 ms budget (`@deadline/pg`); from the deadline's own instant to the
 *   first poll of `pg_stat_activity` that no longer shows the statement active (goal: p99 ≤ 10 ms).
 * - MariaDB: `SELECT SLEEP(5)` under a 50 ms budget (`@deadline/mysql`); from the deadline to the first poll of
 *   `information_schema.PROCESSLIST` that no longer shows it (goal: p99 ≤ 20 ms).
 * - Redis: `BLPOP key 0` in a context cancelled while it blocks (`@deadline/redis`); from the cancel to the
 *   first `CLIENT LIST` that no longer flags the connection blocked (goal: p99 ≤ 10 ms).
 *
 * Each watcher has a connection of its own and polls query after query, without sleeping, from just before the
 * deadline (the cancel) until the work is gone; a poll's time is when its answer arrived (an upper bound). A service that does not answer is
 * reported as skipped, with the reason; this never throws and prints nothing.
 */
import { Socket } from 'node:net';
import { setTimeout as sleep } from 'node:timers/promises';
import { CancelledError, createContext, currentDeadline, DeadlineExceededError, runWithDeadline } from '@deadline/core';
import { withDeadline as mysqlWithDeadline } from '@deadline/mysql';
import { withDeadline as pgWithDeadline } from '@deadline/pg';
import { withDeadline as redisWithDeadline } from '@deadline/redis';
import { Redis } from 'ioredis';
import { createConnection, createPool, type RowDataPacket } from 'mysql2/promise';
import pg from 'pg';
import { type LatencyRow, latencyRow, skippedRow } from './precision-stats.js';

export interface CancelLatencyOptions {
  /** Measured runs per service. */
  runs: number;
}

export interface CancelLatencyReport {
  /** The budget the database statements run under (ms). */
  budgetMs: number;
  /** Postgres, MariaDB, Redis, in that order; `skipped` set on a row whose service did not answer. */
  rows: LatencyRow[];
}

const BUDGET_MS = 50;
const WARMUP_RUNS = 2;
/** Polling resumes this long before the deadline, once the statement was seen running. */
const POLL_AHEAD_MS = 3;
/** How long one run may wait for a statement to show up, or to go. */
const LIMIT_MS = 5_000;

const POSTGRES_URL = () => process.env.DATABASE_URL ?? process.env.PG_URL ?? 'postgres://postgres@127.0.0.1:5432/test';
const MYSQL_URL = () => process.env.MYSQL_URL ?? 'mysql://root@127.0.0.1:3306/test';
const REDIS_URL = () => process.env.REDIS_URL ?? 'redis://127.0.0.1:6379';

const ROWS = {
  postgres: { name: 'Postgres: deadline → backend no longer active', goalMs: 10 },
  mysql: { name: 'MariaDB: deadline → statement killed', goalMs: 20 },
  redis: { name: 'Redis: cancel → BLPOP no longer blocked', goalMs: 10 },
} as const;

export async function measureCancelLatency(
  options: CancelLatencyOptions,
  progress: (line: string) => void,
): Promise<CancelLatencyReport> {
  const rows: LatencyRow[] = [];
  for (const [key, measure] of [
    ['postgres', measurePostgres],
    ['mysql', measureMysql],
    ['redis', measureRedis],
  ] as const) {
    const { name, goalMs } = ROWS[key];
    const goal = `p99 ≤ ${goalMs} ms`;
    try {
      const samples = await measure(options.runs, (run) =>
        progress(`cancel latency: ${name.split(':')[0]}, run ${run}/${options.runs}`),
      );
      rows.push(latencyRow(name, samples, goalMs, goal));
    } catch (error) {
      rows.push(skippedRow(name, goalMs, goal, error instanceof Skip ? error.message : `failed: ${describe(error)}`));
    }
  }
  return { budgetMs: BUDGET_MS, rows };
}

/** The service is not there: the row is skipped with this reason. */
class Skip extends Error {}

const describe = (error: unknown) => (error instanceof Error ? error.message || error.name : String(error));

/** Throws `Skip` unless the URL's port accepts a TCP connection within 2 s. */
function reachable(label: string, url: string): Promise<void> {
  const { hostname, port } = new URL(url);
  const where = `${hostname}:${port}`;
  return new Promise((resolve, reject) => {
    const socket = new Socket();
    const done = (problem: string | undefined) => {
      socket.destroy();
      if (problem === undefined) resolve();
      else reject(new Skip(`${label} not reachable at ${where}: ${problem}`));
    };
    socket.setTimeout(2_000, () => done('no answer within 2 s'));
    socket.once('connect', () => done(undefined));
    socket.once('error', (error) => done(describe(error)));
    socket.connect(Number(port), hostname);
  });
}

/** Connecting failed (authentication, an unknown database…): the row is skipped, saying why. */
async function connecting<T>(label: string, connect: Promise<T>): Promise<T> {
  try {
    return await connect;
  } catch (error) {
    throw new Skip(`${label} did not accept a connection: ${describe(error)}`);
  }
}

/**
 * Starts a statement under a fresh `BUDGET_MS` budget and watches it on the server: waits until it shows up,
 * then polls until it no longer does. Returns that moment − the deadline's own instant.
 */
async function deadlineToGone(start: () => Promise<unknown>, shown: () => Promise<boolean>): Promise<number> {
  let deadlineAt = 0;
  let settled = false;
  const pending = runWithDeadline(BUDGET_MS, () => {
    // The deadline's instant on the monotonic clock (performance.now()), not when anybody heard of it.
    deadlineAt = currentDeadline().expiresAt;
    return start();
  }).then(
    () => undefined,
    (error: unknown) => error,
  );
  void pending.then(() => (settled = true));
  const limit = performance.now() + LIMIT_MS;
  while (!(await shown())) {
    if (settled) throw new Error(`the statement ended before it was seen running: ${describe(await pending)}`);
    if (performance.now() > limit) throw new Error('the statement was never seen running');
  }
  // Running: no need to load the server with polls until just before the deadline.
  const quiet = deadlineAt - POLL_AHEAD_MS - performance.now();
  if (quiet > 0) await sleep(quiet);
  while (await shown()) {
    if (performance.now() > limit) throw new Error(`the statement still ran ${LIMIT_MS} ms after it started`);
  }
  const goneAt = performance.now();
  const error = await pending;
  if (!(error instanceof DeadlineExceededError)) {
    throw new Error(`expected DeadlineExceededError, got ${error === undefined ? 'a result' : describe(error)}`);
  }
  return goneAt - deadlineAt;
}

let markerNumber = 0;
const newMarker = () => `deadline_bench_${process.pid}_${++markerNumber}`;

async function repeat(runs: number, tick: (run: number) => void, once: () => Promise<number>): Promise<number[]> {
  for (let i = 0; i < WARMUP_RUNS; i++) await once();
  const samples: number[] = [];
  for (let run = 1; run <= runs; run++) {
    if (run === 1 || run % 10 === 0) tick(run);
    samples.push(await once());
  }
  return samples;
}

async function measurePostgres(runs: number, tick: (run: number) => void): Promise<number[]> {
  const url = POSTGRES_URL();
  await reachable('Postgres', url);
  const pool = new pg.Pool({
    connectionString: url,
    max: 2,
    application_name: `deadline-bench-${process.pid}`,
    connectionTimeoutMillis: 5_000,
  });
  pool.on('error', () => {});
  const monitor = new pg.Client({ connectionString: url, connectionTimeoutMillis: 5_000 });
  monitor.on('error', () => {});
  try {
    await connecting('Postgres', monitor.connect());
    await connecting('Postgres', pool.query('SELECT 1'));
    const db = pgWithDeadline(pool);
    const active = async (marker: string) => {
      // The marker travels as a parameter: the monitor's own statement text never contains it.
      const { rows } = await monitor.query<{ n: number }>(
        "SELECT count(*)::int AS n FROM pg_stat_activity WHERE state = 'active' AND query LIKE $1 AND pid <> pg_backend_pid()",
        [`%${marker}%`],
      );
      return (rows[0]?.n ?? 0) > 0;
    };
    return await repeat(runs, tick, () => {
      const marker = newMarker();
      return deadlineToGone(
        () => db.query(`SELECT pg_sleep(5) /* ${marker} */`),
        () => active(marker),
      );
    });
  } finally {
    await pool.end().catch(() => {});
    await monitor.end().catch(() => {});
  }
}

async function measureMysql(runs: number, tick: (run: number) => void): Promise<number[]> {
  const url = new URL(MYSQL_URL());
  await reachable('MariaDB', url.href);
  const config = {
    host: url.hostname,
    port: Number(url.port || 3306),
    user: decodeURIComponent(url.username || 'root'),
    password: decodeURIComponent(url.password),
    database: url.pathname.slice(1) || 'test',
    connectTimeout: 5_000,
  };
  const pool = createPool({ ...config, connectionLimit: 2 });
  const db = mysqlWithDeadline(pool);
  let monitor: Awaited<ReturnType<typeof createConnection>> | undefined;
  try {
    monitor = await connecting('MariaDB', createConnection(config));
    monitor.on('error', () => {});
    await connecting('MariaDB', pool.query('SELECT 1'));
    const watcher = monitor;
    const shown = async (marker: string) => {
      // Split in two: the watcher's own statement never contains the marker whole.
      const half = Math.floor(marker.length / 2);
      const [rows] = await watcher.query<RowDataPacket[]>(
        "SELECT COUNT(*) AS n FROM information_schema.PROCESSLIST WHERE INFO LIKE CONCAT('%', ?, ?, '%')",
        [marker.slice(0, half), marker.slice(half)],
      );
      return Number(rows[0]?.n) > 0;
    };
    return await repeat(runs, tick, () => {
      const marker = newMarker();
      return deadlineToGone(
        () => db.query(`SELECT SLEEP(5) /* ${marker} */`),
        () => shown(marker),
      );
    });
  } finally {
    await db.end().catch(() => {});
    await monitor?.end().catch(() => {});
  }
}

async function measureRedis(runs: number, tick: (run: number) => void): Promise<number[]> {
  const url = REDIS_URL();
  await reachable('Redis', url);
  // Fail rather than retry for ever (a service gone away must not hang the benchmark).
  const options = { lazyConnect: true, maxRetriesPerRequest: 1, retryStrategy: () => null, connectTimeout: 5_000 };
  const raw = new Redis(url, options);
  const admin = new Redis(url, options);
  raw.on('error', () => {});
  admin.on('error', () => {});
  try {
    await connecting('Redis', Promise.all([raw.connect(), admin.connect()]));
    const redis = redisWithDeadline(raw);
    const id = String(await raw.client('ID'));
    const key = `deadline:bench:${process.pid}:blpop`;
    await admin.del(key);
    /** Whether the connection is blocked now (CLIENT LIST, flag b). */
    const blocked = async () => {
      const list = (await admin.call('CLIENT', 'LIST', 'ID', id)) as string;
      const line = list.split('\n').find((l) => l.includes(`id=${id} `));
      return (/\bflags=(\S*)/.exec(line ?? '')?.[1] ?? '').includes('b');
    };
    const once = async () => {
      const ctx = createContext({ root: true, deadline: 60_000 });
      const pending = ctx
        .run(() => redis.blpop(key, 0))
        .then(
          () => undefined,
          (error: unknown) => error,
        );
      try {
        const limit = performance.now() + LIMIT_MS;
        while (!(await blocked())) {
          if (performance.now() > limit) throw new Error('BLPOP never seen blocked');
        }
        const cancelledAt = performance.now();
        ctx.cancel(new CancelledError('the client left', { reason: 'client-disconnected' }));
        while (await blocked()) {
          if (performance.now() > cancelledAt + LIMIT_MS) throw new Error(`still blocked ${LIMIT_MS} ms after cancel`);
        }
        const releasedAt = performance.now();
        const error = await pending;
        if (!(error instanceof CancelledError)) {
          throw new Error(`expected CancelledError, got ${error === undefined ? 'a result' : describe(error)}`);
        }
        return releasedAt - cancelledAt;
      } finally {
        ctx.end();
      }
    };
    return await repeat(runs, tick, once);
  } finally {
    raw.disconnect();
    admin.disconnect();
  }
}
