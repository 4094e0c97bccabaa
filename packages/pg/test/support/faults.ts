/**
 * What the fault tests measure and check around a fault (a backend terminated, a server restarted) under a
 * steady load: which errors the calls saw and how long they took, whether the load came back to its rate,
 * whether the process saw anything uncaught, whether the pool's connections are as the server made them, and
 * whether a cancel for a dead backend can reach a live one.
 */
import { DeadlineExceededError, isDeadlineError, runWithDeadline } from '@deadline/core';
import pg from 'pg';
import { expect } from 'vitest';
import { expectProcessLives as expectLives } from '../../../../test/support/process-watch.ts';
import { POSTGRES } from '../../../../test/support/services.ts';
import {
  besideTwin,
  longestGap,
  type SteadyLoad,
  steadyLoad,
  type TwinJudgement,
} from '../../../../test/support/steady-load.ts';
import { type CancelTarget, sendCancelRequest } from '../../src/cancel-request.ts';
import { type DeadlinePool, withDeadline } from '../../src/index.ts';

/** The budget of every call of the load (the report's `runWithDeadline(300, …)`). */
export const DEADLINE_MS = 300;
/** The report's statement: each call holds its connection ~20 ms. */
export const SLEEP = 'SELECT pg_sleep(0.02)';
/** How late past its deadline a call may settle on this noisy 2-core machine and still count as on time. */
export const SETTLE_MARGIN_MS = 1_000;
/** The first success after the server is back comes within this long (plus any stall the twin saw meanwhile)… */
const FIRST_SUCCESS_MS = 1_000;
/** …and the rate over the second after is at least this share of the one expected beside the twin. */
const RECOVERED_SHARE = 0.5;

/**
 * The errors a call may fail with when its server goes away: the server's 57P01 (terminated), 57P02 (crash),
 * 57P03 (starting up, shutting down), a connection exception (08xxx), the driver's "Connection terminated
 * unexpectedly", or the socket's own (refused, reset, broken pipe).
 */
const CLEAR = /^(57P0[1-3]|08\d{3}|ECONNREFUSED|ECONNRESET|EPIPE) |^Connection terminated unexpectedly$/;

/** An error in one line: its SQLSTATE or errno and its message; a deadline error with its cause. */
export function explain(error: unknown): string {
  const e = error as { name?: string; code?: unknown; message?: unknown; cause?: unknown } | undefined;
  if (isDeadlineError(error)) return `${e?.name}${e?.cause === undefined ? '' : ` (cause: ${explain(e.cause)})`}`;
  return `${typeof e?.code === 'string' ? `${e.code} ` : ''}${String(e?.message)}`;
}

/** Whether the error says plainly that the connection or the server went away. */
export function isClear(error: unknown): boolean {
  return CLEAR.test(explain(error));
}

/** Runs `test` and checks that nothing reached the process (see test/support/process-watch.ts). */
export function expectProcessLives(test: () => Promise<void>): Promise<void> {
  return expectLives(test, explain);
}

/**
 * The load's calls, in turn, each under the report's budget: a query, a transaction, a statement on a client
 * from `connect()` — the ways the wrapper holds a connection in a context.
 */
export function mixedCalls(db: DeadlinePool): () => Promise<unknown> {
  const kinds = [
    () => db.query(SLEEP),
    () => db.transaction((tx) => tx.query(SLEEP)),
    async () => {
      const client = await db.connect();
      try {
        return await client.query(SLEEP);
      } finally {
        client.release();
      }
    },
  ];
  let next = 0;
  return () => runWithDeadline(DEADLINE_MS, kinds[next++ % kinds.length] as () => Promise<unknown>);
}

let poolNumber = 0;

/** A pool as the report had it: its own application_name, and an 'error' handler that records. */
export function faultPool(url: string, max: number): { pool: pg.Pool; name: string; poolErrors: Error[] } {
  const name = `deadline-fault-${process.pid}-${++poolNumber}`;
  // No idle timeout: the idle connections a test made stay idle until the fault.
  const pool = new pg.Pool({ connectionString: url, max, application_name: name, idleTimeoutMillis: 0 });
  const poolErrors: Error[] = [];
  pool.on('error', (error) => poolErrors.push(error));
  return { pool, name, poolErrors };
}

/** Fills the pool to `max` connections and leaves them idle (the load then uses some, the rest wait). */
export async function fillPool(pool: pg.Pool): Promise<void> {
  const clients = await Promise.all(Array.from({ length: pool.options.max }, () => pool.connect()));
  for (const client of clients) client.release();
}

/**
 * Terminates every backend of the application `name` (`pg_terminate_backend`, as an operator or a failover
 * would); resolves with the state each was in — `active` ones were running a statement, `idle` ones not.
 */
export async function terminateAll(monitor: pg.Client, name: string): Promise<string[]> {
  const { rows } = await monitor.query<{ state: string; ok: boolean }>(
    'SELECT state, pg_terminate_backend(pid) AS ok FROM pg_stat_activity WHERE application_name = $1',
    [name],
  );
  expect(rows.every((row) => row.ok)).toBe(true);
  return rows.map((row) => row.state);
}

/** Waits, query after query, until no backend of the application `name` is left on the server. */
export async function allGone(monitor: pg.Client, name: string, limitMs = 10_000): Promise<void> {
  const until = performance.now() + limitMs;
  while (performance.now() < until) {
    const { rows } = await monitor.query(
      'SELECT count(*)::int AS n FROM pg_stat_activity WHERE application_name = $1',
      [name],
    );
    if ((rows[0] as { n: number }).n === 0) return;
  }
  throw new Error(`backends of ${name} still there after ${limitMs} ms`);
}

/** Waits for the load's successes until `time` (performance.now()) has passed: a window fills by itself. */
async function loadUntil(load: SteadyLoad, time: number): Promise<void> {
  while (performance.now() < time) await load.successes(1, 10_000);
}

/**
 * Once the load and its twin are going (20 successes each), a second of both: the window whose rate is the one
 * to come back to.
 */
export async function baseline(load: SteadyLoad, twin: SteadyLoad): Promise<readonly [number, number]> {
  await Promise.all([load.successes(20), twin.successes(20)]);
  const from = performance.now();
  await Promise.all([loadUntil(load, from + 1_000), loadUntil(twin, from + 1_000)]);
  return [from, from + 1_000];
}

/** A query under the report's budget, over and over: a load of single statements. */
export function plainCalls(db: DeadlinePool): () => Promise<unknown> {
  return () => runWithDeadline(DEADLINE_MS, () => db.query(SLEEP));
}

/**
 * A twin of a test's load: the same calls (`loops` at once) on a pool of its own on the shared server, which no
 * fault touches. The machine slows it as it slows the load, so the load's rate after a fault is judged beside it
 * (test/support/steady-load.ts). `stop()` ends the load and the pool.
 */
export async function twinLoad(
  loops: number,
  calls: (db: DeadlinePool) => () => Promise<unknown> = mixedCalls,
): Promise<SteadyLoad> {
  const { pool } = faultPool(POSTGRES.url, loops);
  await fillPool(pool);
  const load = steadyLoad(loops, calls(withDeadline(pool)));
  return {
    ...load,
    async stop() {
      await load.stop();
      await pool.end();
    },
  };
}

/**
 * Runs `fault` under the load (and its twin beside it); it resolves when the server accepts connections again
 * (performance.now()), or with nothing when that is at once. Then a second more of both, and what the fault did.
 */
export async function throughFault(
  load: SteadyLoad,
  twin: SteadyLoad,
  before: readonly [number, number],
  fault: () => Promise<number | undefined>,
): Promise<FaultReport> {
  const faultAt = performance.now();
  const backAt = (await fault()) ?? performance.now();
  await Promise.all([loadUntil(load, backAt + 1_000), loadUntil(twin, backAt + 1_000)]);
  return faultReport(load, twin, { before, faultAt, backAt });
}

/** What a fault did to the load, and how it came back. */
export interface FaultReport {
  /** Calls that were running when the fault came, and how each ended. */
  inFlight: string[];
  /** The calls that failed around the fault, by error. */
  failures: Record<string, number>;
  /** The longest a call took around the fault (ms). */
  slowestMs: number;
  /** Successes per second before the fault and in the second after the server was back, beside the twin's. */
  rates: TwinJudgement;
  /** From `backAt` to the first success of a call started after it (ms). */
  firstSuccessMs: number;
  /** The twin's longest wait for a success meanwhile (ms): how long the machine itself held calls up. */
  twinStallMs: number;
}

/**
 * The load around a fault that began at `faultAt` and was over (the server accepting again) at `backAt`: the
 * rate before is the load's in the `before` window (ms, performance.now()), the rate after over the second
 * that starts at `backAt`, each beside the twin's in the same window.
 */
function faultReport(
  load: SteadyLoad,
  twin: SteadyLoad,
  times: { before: readonly [number, number]; faultAt: number; backAt: number },
): FaultReport {
  const { before, faultAt, backAt } = times;
  const afterTo = backAt + 1_000;
  const around = load.outcomes.filter((o) => o.endedAt >= faultAt && o.startedAt < afterTo);
  const failures: Record<string, number> = {};
  for (const outcome of load.failures(faultAt, afterTo)) {
    const key = explain(outcome.error).replace(/:\d+$/, ':<port>');
    failures[key] = (failures[key] ?? 0) + 1;
  }
  // By start time, not end time: a call already running at `backAt` proves nothing about coming back.
  const first = load.outcomes.find((o) => o.error === undefined && o.startedAt >= backAt);
  const firstSuccessMs = first === undefined ? Number.POSITIVE_INFINITY : first.endedAt - backAt;
  return {
    inFlight: load.outcomes
      .filter((o) => o.startedAt < faultAt && o.endedAt >= faultAt)
      .map((o) => (o.error === undefined ? 'ok' : explain(o.error))),
    failures,
    slowestMs: Math.max(...around.map((o) => o.endedAt - o.startedAt)),
    rates: besideTwin({
      load: load.successTimes(),
      twin: twin.successTimes(),
      before,
      after: [backAt, afterTo],
    }),
    firstSuccessMs,
    twinStallMs: longestGap(twin.successTimes(), backAt, backAt + Math.min(firstSuccessMs, 1_000)),
  };
}

/**
 * How many calls the fault ended as they ran: those failed with the server's 57P0x (their backend ended under
 * them) or the driver's "Connection terminated unexpectedly". Counted by error, not by when they began: a fault
 * takes a while to land on a busy machine (a fast stop, the terminate's own query), and the calls running at the
 * moment it was asked for may all have ended by then.
 */
export function endedByTheFault(report: FaultReport): number {
  return Object.entries(report.failures)
    .filter(([error]) => /^57P0[1-3] |^Connection terminated unexpectedly$/.test(error))
    .reduce((sum, [, count]) => sum + count, 0);
}

/** The report in one line, for the log. */
export function summary(report: FaultReport): string {
  const { inFlight, failures, slowestMs, rates, firstSuccessMs, twinStallMs } = report;
  return [
    `in flight: ${JSON.stringify(inFlight)}`,
    `failed: ${JSON.stringify(failures)}`,
    `slowest ${slowestMs.toFixed(0)} ms (deadline ${DEADLINE_MS})`,
    `rate ${rates.line}`,
    `first success ${firstSuccessMs.toFixed(0)} ms after back (the twin's longest wait meanwhile ${twinStallMs.toFixed(0)} ms)`,
  ].join('; ');
}

/**
 * The checks every fault test makes of the load: every failure clear, every call settled by its deadline
 * (plus a margin), the first success within 1 s of the server being back (plus as long as the machine held the
 * twin up meanwhile), and the rate after at least half the one expected beside the twin.
 */
export function expectRecovered(load: SteadyLoad, report: FaultReport): void {
  // A call's own deadline is as clear an end as the server's word: one that waited behind the fault, or behind
  // the rest of a busy machine (the load's 20 ms statements under 300 ms, four to a connection).
  const unclear = load.failures().filter((o) => !isClear(o.error) && !(o.error instanceof DeadlineExceededError));
  expect(unclear.map((o) => explain(o.error))).toEqual([]);
  const late = load.outcomes.filter((o) => o.endedAt - o.startedAt > DEADLINE_MS + SETTLE_MARGIN_MS);
  expect(late.map((o) => o.endedAt - o.startedAt)).toEqual([]);
  const line = summary(report);
  expect(report.firstSuccessMs, line).toBeLessThan(FIRST_SUCCESS_MS + report.twinStallMs);
  expect(report.rates.after, line).toBeGreaterThanOrEqual(report.rates.expectedAfter * RECOVERED_SHARE);
}

/**
 * Checks out every connection the pool may have, at once, and looks at each: `statement_timeout` at the
 * server's default, no session setting of anyone's (`pg_settings` from `SET`), outside any transaction. And
 * no backend of the pool is left `idle in transaction`.
 */
export async function expectCleanConnections(pool: pg.Pool, monitor: pg.Client, name: string): Promise<void> {
  // A fresh connection's value is the server's default (with the role's and the database's settings).
  const { rows: fresh } = await monitor.query('SHOW statement_timeout');
  const { rows: inTransaction } = await monitor.query(
    "SELECT count(*)::int AS n FROM pg_stat_activity WHERE application_name = $1 AND state LIKE 'idle in transaction%'",
    [name],
  );
  expect(inTransaction[0]).toEqual({ n: 0 });
  const clients = await Promise.all(Array.from({ length: pool.options.max }, () => pool.connect()));
  try {
    for (const client of clients) {
      const { rows } = await client.query(
        `SELECT current_setting('statement_timeout') AS statement_timeout, now() = statement_timestamp() AS outside,
                (SELECT count(*)::int FROM pg_settings WHERE source = 'session') AS set`,
      );
      expect(rows[0]).toEqual({ statement_timeout: fresh[0]?.statement_timeout, outside: true, set: 0 });
    }
  } finally {
    for (const client of clients) client.release();
  }
}

/** A pool connection's backend: its process id and secret key, as a CancelRequest names it. */
export async function backendOf(pool: pg.Pool): Promise<CancelTarget> {
  const client = await pool.connect();
  try {
    const { processID, secretKey } = client as unknown as { processID: number; secretKey: number };
    const { host, port } = client as unknown as { host: string; port: number };
    return { processID, secretKey, host, port };
  } finally {
    client.release();
  }
}

/** Waits, query after query, until the backend `pid` runs a statement. */
async function runningOn(monitor: pg.Client, pid: number): Promise<void> {
  const until = performance.now() + 10_000;
  while (performance.now() < until) {
    const { rows } = await monitor.query("SELECT 1 FROM pg_stat_activity WHERE pid = $1 AND state = 'active'", [pid]);
    if (rows.length > 0) return;
  }
  throw new Error(`backend ${pid} never ran its statement`);
}

/**
 * A CancelRequest naming a backend that has died (its process id and secret key) does not stop a new
 * backend's statement — neither sent as it is, nor with the new backend's process id, as it would read if the
 * operating system had given the dead backend's id to the new one (the server checks the secret key too). A
 * cancel with the new backend's own key does stop it: the check can tell.
 */
export async function expectStaleCancelMisses(url: string, dead: CancelTarget, monitor: pg.Client): Promise<void> {
  const { rows } = await monitor.query('SELECT count(*)::int AS n FROM pg_stat_activity WHERE pid = $1', [
    dead.processID,
  ]);
  expect(rows[0]).toEqual({ n: 0 });
  const fresh = new pg.Client({ connectionString: url, application_name: `deadline-fault-${process.pid}-fresh` });
  await fresh.connect();
  try {
    const { processID, secretKey } = fresh as unknown as { processID: number; secretKey: number };
    const sleeping = fresh.query('SELECT pg_sleep(0.3), 1 AS n');
    await runningOn(monitor, processID);
    // Each resolves once the server has read the request and closed the connection: it acted on it, or not.
    expect(await sendCancelRequest(dead)).toBe(true);
    expect(await sendCancelRequest({ ...dead, processID })).toBe(true);
    expect((await sleeping).rows[0]).toMatchObject({ n: 1 });
    const stopped = fresh.query('SELECT pg_sleep(5)').catch((error: unknown) => error);
    await runningOn(monitor, processID);
    expect(await sendCancelRequest({ ...dead, processID, secretKey })).toBe(true);
    expect(await stopped).toMatchObject({ code: '57014' });
  } finally {
    await fresh.end();
  }
}
