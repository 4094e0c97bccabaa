/**
 * How fast work on a server stops once nobody waits for it any more:
 *
 * - Postgres: `SELECT pg_sleep(5)` under a 50 ms budget (`@deadline/pg`); from the deadline's own instant to the
 *   moment the statement's ErrorResponse (57014, canceled) reaches this process on the statement's own
 *   connection (goal: p99 ≤ 10 ms). The backend sends it as it stops the statement (it reports itself idle a
 *   few µs later), so its arrival is an upper bound of the stop that costs the server nothing: no poll
 *   competes with the cancel for the CPU, and no poll interval is added. Measured alternately with the floor:
 *   a raw CancelRequest on a new connection, sent at the deadline's exact instant without the library.
 * - MariaDB: `SELECT SLEEP(5)` under a 50 ms budget (`@deadline/mysql`); from the deadline to the first poll of
 *   `information_schema.PROCESSLIST` that no longer shows it (goal: p99 ≤ 20 ms).
 * - Redis: `BLPOP key 0` in a context cancelled while it blocks (`@deadline/redis`), on ioredis and on node-redis;
 *   from the cancel to the moment the released command's reply (Redis answers an unblocked BLPOP at once) reaches
 *   this process on the blocked connection (goal: p99 ≤ 10 ms) — as for Postgres, an upper bound of the release with no poll
 *   competing for the server; a `CLIENT LIST` afterwards checks the connection is no longer blocked.
 *
 * The MariaDB watcher has a connection of its own and polls query after query, without sleeping, from just
 * before the deadline until the work is gone; a poll's time is when its answer arrived (an upper bound). A service that does not answer is reported as skipped, with the reason; this never throws
 * and prints nothing.
 */
import { subscribe, unsubscribe } from 'node:diagnostics_channel';
import { connect, Socket } from 'node:net';
import { setTimeout as sleep } from 'node:timers/promises';
import { CancelledError, createContext, currentDeadline, DeadlineExceededError, runWithDeadline } from '@deadline/core';
import { withDeadline as mysqlWithDeadline } from '@deadline/mysql';
import { withDeadline as pgWithDeadline } from '@deadline/pg';
import { withDeadline as redisWithDeadline } from '@deadline/redis';
import { Redis } from 'ioredis';
import { createConnection, createPool, type RowDataPacket } from 'mysql2/promise';
import pg from 'pg';
import { createClient } from 'redis';
import { type LatencyRow, latencyRow, skippedRow } from '../shared/precision-stats.js';

export interface CancelLatencyOptions {
  /** Measured runs per service. */
  runs: number;
  /** Runs per service before the measured ones, not measured. Default 2; the quick run needs none. */
  warmupRuns?: number;
}

export interface CancelLatencyReport {
  /** The budget the database statements run under (ms). */
  budgetMs: number;
  /** Postgres, MariaDB, Redis (ioredis, node-redis), in that order; `skipped` set on a row whose service did not answer. */
  rows: LatencyRow[];
  /** What the server itself needs, measured alternately with the library's row, the same way: Postgres. */
  floors: LatencyRow[];
}

const BUDGET_MS = 50;
/** The default of `warmupRuns`. */
const WARMUP_RUNS = 2;
/** Polling resumes this long before the deadline, once the statement was seen running. */
const POLL_AHEAD_MS = 3;
/** How long one run may wait for a statement to show up, or to go. */
const LIMIT_MS = 5_000;

const POSTGRES_URL = () => process.env.DATABASE_URL ?? process.env.PG_URL ?? 'postgres://postgres@127.0.0.1:5432/test';
const MYSQL_URL = () => process.env.MYSQL_URL ?? 'mysql://root@127.0.0.1:3306/test';
const REDIS_URL = () => process.env.REDIS_URL ?? 'redis://127.0.0.1:6379';

const ROWS = {
  postgres: { name: 'Postgres: deadline → statement cancelled (57014 received)', goalMs: 10 },
  postgresFloor: { name: 'Postgres floor: raw CancelRequest at the deadline → 57014 received', goalMs: 10 },
  mysql: { name: 'MariaDB: deadline → statement killed', goalMs: 20 },
  redis: { name: 'Redis: cancel → released BLPOP answered', goalMs: 10 },
  nodeRedis: { name: 'Redis on node-redis: cancel → released BLPOP answered', goalMs: 10 },
} as const;

export async function measureCancelLatency(
  options: CancelLatencyOptions,
  progress: (line: string) => void,
): Promise<CancelLatencyReport> {
  const rows: LatencyRow[] = [];
  const floors: LatencyRow[] = [];
  const row = (key: keyof typeof ROWS, samples: readonly number[]) =>
    latencyRow(ROWS[key].name, samples, ROWS[key].goalMs, `p99 ≤ ${ROWS[key].goalMs} ms`);
  const skipped = (key: keyof typeof ROWS, error: unknown) =>
    skippedRow(
      ROWS[key].name,
      ROWS[key].goalMs,
      `p99 ≤ ${ROWS[key].goalMs} ms`,
      error instanceof Skip ? error.message : `failed: ${describe(error)}`,
    );
  const tick = (label: string) => (run: number) => progress(`cancel latency: ${label}, run ${run}/${options.runs}`);
  const runs = { measured: options.runs, warmup: options.warmupRuns ?? WARMUP_RUNS };
  try {
    const { library, floor } = await measurePostgres(runs, tick('Postgres'));
    rows.push(row('postgres', library));
    floors.push(row('postgresFloor', floor));
  } catch (error) {
    rows.push(skipped('postgres', error));
    floors.push(skipped('postgresFloor', error));
  }
  for (const [key, measure] of [
    ['mysql', measureMysql],
    ['redis', (r: Runs, t: (run: number) => void) => measureRedis(r, t, ioredisClient)],
    ['nodeRedis', (r: Runs, t: (run: number) => void) => measureRedis(r, t, nodeRedisClient)],
  ] as const) {
    try {
      rows.push(row(key, await measure(runs, tick(ROWS[key].name.split(':')[0] as string))));
    } catch (error) {
      rows.push(skipped(key, error));
    }
  }
  return { budgetMs: BUDGET_MS, rows, floors };
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

/** How many runs per service: measured, and before them not measured. */
interface Runs {
  measured: number;
  warmup: number;
}

async function repeat(runs: Runs, tick: (run: number) => void, once: () => Promise<number>): Promise<number[]> {
  for (let i = 0; i < runs.warmup; i++) await once();
  const samples: number[] = [];
  for (let run = 1; run <= runs.measured; run++) {
    if (run === 1 || run % 10 === 0) tick(run);
    samples.push(await once());
  }
  return samples;
}

/** The instant an ErrorResponse arrived on a connection, and its SQLSTATE. */
interface Received {
  at: number;
  code: string | undefined;
  message: string;
}

/**
 * Library and floor, run by run in turn on the same pool, each sample from the deadline's instant to the
 * arrival of the statement's ErrorResponse. The library's statement is cancelled by `@deadline/pg` at its stop;
 * the floor's by a CancelRequest written here on a connection opened at the deadline (the timer set just ahead,
 * then a spin to the exact instant, so no timer lateness is counted in the floor).
 */
async function measurePostgres(
  runs: Runs,
  tick: (run: number) => void,
): Promise<{ library: number[]; floor: number[] }> {
  const url = POSTGRES_URL();
  await reachable('Postgres', url);
  const pool = new pg.Pool({
    connectionString: url,
    max: 2,
    application_name: `deadline-bench-${process.pid}`,
    connectionTimeoutMillis: 5_000,
  });
  pool.on('error', () => {});
  // Read where node-postgres parses the message: the instant its bytes reached this process, before any of
  // the library's (or the driver's) handling of it.
  let onReceived: ((received: Received) => void) | undefined;
  pool.on('connect', (client) => {
    client.connection.on('errorMessage', (error: { code?: string; message?: string }) => {
      onReceived?.({ at: performance.now(), code: error.code, message: error.message ?? '' });
    });
  });
  /** The next ErrorResponse on any of the pool's connections (one statement runs at a time here). */
  const nextError = () =>
    new Promise<Received>((resolve, reject) => {
      const timer = setTimeout(() => {
        onReceived = undefined;
        reject(new Error(`no ErrorResponse within ${LIMIT_MS} ms of the start`));
      }, LIMIT_MS);
      onReceived = (received) => {
        onReceived = undefined;
        clearTimeout(timer);
        resolve(received);
      };
    });
  // 57014 from our CancelRequest ("due to user request"), or — the cancel slower than its 50 ms grace — from
  // the library's statement_timeout belt: either way the moment the statement stopped.
  const cancelledAfter = (received: Received, deadlineAt: number) => {
    if (received.code !== '57014') throw new Error(`expected 57014, got ${received.code}: ${received.message}`);
    return received.at - deadlineAt;
  };
  try {
    await connecting('Postgres', pool.query('SELECT 1'));
    const { hostname, port } = new URL(url);
    const db = pgWithDeadline(pool);
    const library = async () => {
      const stopped = nextError();
      stopped.catch(() => {});
      let deadlineAt = 0;
      const error = await runWithDeadline(BUDGET_MS, () => {
        // The deadline's instant on the monotonic clock (performance.now()), not when anybody heard of it.
        deadlineAt = currentDeadline().expiresAt;
        return db.query('SELECT pg_sleep(5)');
      }).then(
        () => undefined,
        (e: unknown) => e,
      );
      if (!(error instanceof DeadlineExceededError)) {
        throw new Error(`expected DeadlineExceededError, got ${error === undefined ? 'a result' : describe(error)}`);
      }
      return cancelledAfter(await stopped, deadlineAt);
    };
    const floor = async () => {
      const client = await pool.connect();
      try {
        const { processID, secretKey } = client as unknown as { processID: number; secretKey: number };
        const stopped = nextError();
        stopped.catch(() => {});
        const deadlineAt = performance.now() + BUDGET_MS;
        const running = client.query('SELECT pg_sleep(5)').catch(() => {});
        const delivered = new Promise<void>((resolve) =>
          setTimeout(() => {
            while (performance.now() < deadlineAt) {
              // The deadline's exact instant: a timer's lateness is no part of the floor.
            }
            rawCancel(hostname, Number(port || 5432), processID, secretKey).then(resolve);
          }, BUDGET_MS - 2),
        );
        const sample = cancelledAfter(await stopped, deadlineAt);
        // The connection goes back only once the server closed the cancel connection: Postgres signals the
        // backend twice (the process, then its group), and a second signal late on a busy machine would cancel
        // the next statement on it — the library waits for the same close.
        await Promise.all([running, delivered]);
        return sample;
      } finally {
        client.release();
      }
    };
    const samples = { library: [] as number[], floor: [] as number[] };
    for (let run = 1 - runs.warmup; run <= runs.measured; run++) {
      if (run === 1 || run % 10 === 0) tick(run);
      // In turn, and each first every other run: neither gets the quieter moments of a shared machine.
      const [first, second] = run % 2 === 0 ? (['library', 'floor'] as const) : (['floor', 'library'] as const);
      const a = await (first === 'library' ? library() : floor());
      const b = await (second === 'library' ? library() : floor());
      if (run < 1) continue; // warm-up
      samples[first].push(a);
      samples[second].push(b);
    }
    return samples;
  } finally {
    await pool.end().catch(() => {});
  }
}

/** A CancelRequest as any client sends it: a new connection, 16 bytes; resolves when the server closed it. */
function rawCancel(host: string, port: number, processID: number, secretKey: number): Promise<void> {
  return new Promise((resolve) => {
    const socket = connect({ host, port, noDelay: true });
    socket.on('error', () => {});
    socket.once('close', () => resolve());
    socket.once('connect', () => {
      const message = Buffer.alloc(16);
      message.writeInt32BE(16, 0);
      message.writeInt32BE(80877102, 4);
      message.writeInt32BE(processID, 8);
      message.writeInt32BE(secretKey, 12);
      socket.end(message);
    });
  });
}

async function measureMysql(runs: Runs, tick: (run: number) => void): Promise<number[]> {
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

/** A blocking client under test: its connection's id and socket, a BLPOP through `@deadline/redis`, closing it. */
interface BlockingClient {
  id: string;
  /** The blocked connection's socket: nothing else is sent on it while it blocks. */
  socket: Socket;
  blpop(key: string): Promise<unknown>;
  close(): void;
}

/** The socket a client opens while `connect()` runs, seen on Node's `net.client.socket` channel. */
async function socketOpenedBy(connect: () => Promise<unknown>): Promise<Socket> {
  const sockets: Socket[] = [];
  const seen = ({ socket }: { socket: Socket }) => sockets.push(socket);
  subscribe('net.client.socket', seen as (message: unknown) => void);
  try {
    await connect();
  } finally {
    unsubscribe('net.client.socket', seen as (message: unknown) => void);
  }
  const socket = sockets.at(-1);
  if (socket === undefined) throw new Error('no socket seen while connecting');
  return socket;
}

/** ioredis, failing rather than retrying for ever (a service gone away must not hang the benchmark). */
async function ioredisClient(url: string): Promise<BlockingClient> {
  const raw = new Redis(url, {
    lazyConnect: true,
    maxRetriesPerRequest: 1,
    retryStrategy: () => null,
    connectTimeout: 5_000,
  });
  raw.on('error', () => {});
  try {
    await connecting('Redis', raw.connect());
    const redis = redisWithDeadline(raw);
    const id = String(await raw.client('ID'));
    const socket = (raw as unknown as { stream: Socket }).stream;
    return { id, socket, blpop: (key) => redis.blpop(key, 0), close: () => raw.disconnect() };
  } catch (error) {
    raw.disconnect();
    throw error;
  }
}

/** node-redis, likewise. */
async function nodeRedisClient(url: string): Promise<BlockingClient> {
  const raw = createClient({ url, socket: { reconnectStrategy: false, connectTimeout: 5_000 } });
  raw.on('error', () => {});
  try {
    const socket = await socketOpenedBy(() => connecting('Redis', raw.connect()));
    const redis = redisWithDeadline(raw);
    const id = String(await raw.clientId());
    return { id, socket, blpop: (key) => redis.blPop(key, 0), close: () => raw.destroy() };
  } catch (error) {
    raw.destroy();
    throw error;
  }
}

async function measureRedis(
  runs: Runs,
  tick: (run: number) => void,
  open: (url: string) => Promise<BlockingClient>,
): Promise<number[]> {
  const url = REDIS_URL();
  await reachable('Redis', url);
  const admin = new Redis(url, {
    lazyConnect: true,
    maxRetriesPerRequest: 1,
    retryStrategy: () => null,
    connectTimeout: 5_000,
  });
  admin.on('error', () => {});
  let client: BlockingClient | undefined;
  try {
    await connecting('Redis', admin.connect());
    client = await open(url);
    const { id, socket } = client;
    const blpop = client.blpop;
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
        .run(() => blpop(key))
        .then(
          () => undefined,
          (error: unknown) => error,
        );
      try {
        const limit = performance.now() + LIMIT_MS;
        while (!(await blocked())) {
          if (performance.now() > limit) throw new Error('BLPOP never seen blocked');
        }
        // Nothing else is sent on this connection while it blocks: its next bytes are the released command's reply.
        const answered = new Promise<number>((resolve) => socket.once('data', () => resolve(performance.now())));
        const cancelledAt = performance.now();
        ctx.cancel(new CancelledError('the client left', { reason: 'client-disconnected' }));
        const releasedAt = await Promise.race([answered, sleep(LIMIT_MS).then(() => Number.NaN)]);
        if (Number.isNaN(releasedAt)) throw new Error(`no reply ${LIMIT_MS} ms after cancel`);
        if (await blocked()) throw new Error('answered, yet still flagged blocked');
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
    client?.close();
    admin.disconnect();
  }
}
