/**
 * Work a handler starts and does not await — the audit insert written the careless way — on every server adapter,
 * against a real PostgreSQL. A request that ends well leaves it running under the request's deadline (and logs the
 * call as having outlived the request); a request that fails cancels it; `cancelOnEnd` gives Go's strict rule.
 * Adopting the library must not turn such code into an unhandled rejection. Each adapter's test file runs it with
 * its hosts (packages/jobs: fastify, express, node:http; koa, hono and nestjs their own).
 */

import { randomUUID } from 'node:crypto';
import diagnostics from 'node:diagnostics_channel';
import type { Server } from 'node:http';
import type { AddressInfo } from 'node:net';
import { Writable } from 'node:stream';
import { type CallOutlivedMessage, CancelledError, DeadlineExceededError, DiagnosticsChannel } from '@deadline/core';
import { type DeadlinePool, withDeadline } from '@deadline/pg';
import pg from 'pg';
import pino from 'pino';
import { request } from 'undici';
import { afterAll, afterEach, beforeAll, beforeEach, describe, expect, it } from 'vitest';
import { type ProcessWatch, watchProcess } from './process-watch.ts';
import { POSTGRES, requireService } from './services.ts';

const available = await requireService(POSTGRES);

/** What a route does with the request; `respond` sends the body the host's way. */
export type Route = (respond: (body: string) => void) => Promise<void> | void;

export interface Running {
  url: string;
  lines: Record<string, unknown>[];
  close(): Promise<void>;
}

/** The one option these tests vary. */
export interface Options {
  cancelOnEnd?: boolean;
}

/** A pino logger whose lines the test reads. */
export function memoryLogger() {
  const lines: Record<string, unknown>[] = [];
  const stream = new Writable({
    write(chunk, _encoding, done) {
      for (const line of String(chunk).split('\n')) if (line) lines.push(JSON.parse(line));
      done();
    },
  });
  return { logger: pino(stream), lines };
}

/** `server` listening on a free port of 127.0.0.1: its URL. */
export async function listen(server: Server): Promise<string> {
  await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve));
  return `http://127.0.0.1:${(server.address() as AddressInfo).port}`;
}

/** Closes `server` and its connections. */
export function closeServer(server: Server): Promise<void> {
  server.closeAllConnections();
  return new Promise((resolve) => server.close(() => resolve()));
}

/** Starts a host: the route at GET /route, with the library's options (`serviceName: 'orders'`, `options`). */
export type StartHost = (route: Route, options: Options) => Promise<Running>;

// Unique to the run: files of several packages run this suite at once on the shared server.
const table = `deadline_unawaited_${randomUUID().replaceAll('-', '')}`;
let pool: pg.Pool;
let db: DeadlinePool<pg.Pool>;
let monitor: pg.Client;
let rowNumber = 0;

/** What reached the process while a test ran (an unhandled rejection, say): the library must add nothing. */
let watch: ProcessWatch;

/** `deadline:call:outlived` messages published while a test ran. */
const outlived: CallOutlivedMessage[] = [];
const onOutlived = (message: unknown) => outlived.push(message as CallOutlivedMessage);

async function rowLanded(key: string, limitMs = 10_000): Promise<number> {
  const until = performance.now() + limitMs;
  while (performance.now() < until) {
    const { rows } = await monitor.query(`SELECT count(*)::int AS n FROM ${table} WHERE key = $1`, [key]);
    if ((rows[0] as { n: number }).n > 0) return performance.now();
  }
  throw new Error(`row ${key} never landed`);
}

async function statementGone(marker: string, limitMs = 10_000): Promise<number> {
  const until = performance.now() + limitMs;
  while (performance.now() < until) {
    const { rows } = await monitor.query(
      "SELECT count(*)::int AS n FROM pg_stat_activity WHERE state = 'active' AND query LIKE $1 AND pid <> pg_backend_pid()",
      [`%${marker}%`],
    );
    if ((rows[0] as { n: number }).n === 0) return performance.now();
  }
  throw new Error(`${marker} still running after ${limitMs} ms`);
}

/** The line our server package wrote for a call that outlived its request, once it is there. */
async function outlivedLine(lines: Record<string, unknown>[], limitMs = 10_000) {
  const until = performance.now() + limitMs;
  while (performance.now() < until) {
    const line = lines.find((l) => String(l.msg).includes('outlived its request'));
    if (line !== undefined) return line;
    await new Promise((resolve) => setTimeout(resolve, 10));
  }
  throw new Error('no line for the call that outlived its request');
}

/** The suite, on each of `hosts`. */
export function unawaitedWorkSuite(hosts: Record<string, StartHost>): void {
  describe.runIf(available)('work the handler did not await (PostgreSQL)', () => {
    beforeAll(async () => {
      pool = new pg.Pool({ connectionString: POSTGRES.url, max: 6 });
      pool.on('error', () => {});
      db = withDeadline(pool, { name: 'audit-db' });
      monitor = new pg.Client({ connectionString: POSTGRES.url });
      await monitor.connect();
      await monitor.query(`CREATE TABLE IF NOT EXISTS ${table} (key text NOT NULL)`);
    });
    afterAll(async () => {
      await monitor?.query(`DROP TABLE IF EXISTS ${table}`);
      await monitor?.end();
      await pool?.end();
    });
    beforeEach(() => {
      outlived.length = 0;
      watch = watchProcess();
      diagnostics.subscribe(DiagnosticsChannel.CallOutlived, onOutlived);
    });
    afterEach(() => {
      watch.stop();
      diagnostics.unsubscribe(DiagnosticsChannel.CallOutlived, onOutlived);
    });

    /** `INSERT … FROM pg_sleep(s)`, not awaited: the row lands `s` seconds after the response, or never. */
    const audit = (key: string, seconds = 0.2) =>
      db.query(`INSERT INTO ${table} SELECT $1 FROM pg_sleep(${seconds}) /* ${key} */`, [key]);

    for (const [host, start] of Object.entries(hosts)) {
      describe(host, () => {
        it('a fire-and-forget insert without .catch: 200 before the insert ends, the row lands, one line and one event, no unhandled rejection', async () => {
          const key = `${host}-plain-${++rowNumber}`;
          // A second's insert: the response must not wait for it, and on a loaded machine a first request to a new
          // server took 387 ms (CI), longer than the 200 ms insert the other tests use.
          const server = await start((respond) => {
            void audit(key, 1); // the careless way: no await, no catch
            respond('ok');
          }, {});
          try {
            const sent = performance.now();
            const response = await request(`${server.url}/route`);
            expect(response.statusCode).toBe(200);
            expect(await response.body.text()).toBe('ok');
            const answered = performance.now();
            const landed = await rowLanded(key);
            // Answered before the insert's second was up: the response did not wait for it (however long this busy
            // machine took to answer, the row landed well after).
            expect(answered - sent).toBeLessThan(landed - sent);
            expect(landed - answered).toBeGreaterThan(100);
            const line = await outlivedLine(server.lines);
            expect(line).toMatchObject({ level: 40, hop: 'orders', target: 'audit-db', outcome: 'ok' });
            expect(line.outlivedMs).toBeGreaterThanOrEqual(100);
            expect(String(line.msg)).toContain('runInBackground()');
            expect(String(line.traceId)).toMatch(/^[0-9a-f]{32}$/);
            expect(outlived).toHaveLength(1);
            expect(outlived[0]).toMatchObject({ target: 'audit-db', outcome: 'ok' });
            expect(server.lines.filter((l) => String(l.msg).includes('outlived'))).toHaveLength(1);
            expect(watch.seen).toEqual([]);
          } finally {
            await server.close();
          }
        });

        it('with .catch: the catch is never called, the row lands', async () => {
          const key = `${host}-caught-${++rowNumber}`;
          const caught: unknown[] = [];
          let settled!: Promise<unknown>;
          const server = await start((respond) => {
            settled = audit(key).catch((error: unknown) => caught.push(error));
            respond('ok');
          }, {});
          try {
            const response = await request(`${server.url}/route`);
            expect(response.statusCode).toBe(200);
            await response.body.dump();
            await settled;
            await rowLanded(key);
            expect(caught).toEqual([]);
            expect(watch.seen).toEqual([]);
          } finally {
            await server.close();
          }
        });

        it('cancelOnEnd: true — Go’s rule: the insert is cancelled on the server when the response is sent', async () => {
          const key = `${host}-strict-${++rowNumber}`;
          let settled!: Promise<unknown>;
          const server = await start(
            (respond) => {
              settled = audit(key).then(
                () => 'done',
                (error: unknown) => error,
              );
              respond('ok');
            },
            { cancelOnEnd: true },
          );
          try {
            const response = await request(`${server.url}/route`);
            expect(response.statusCode).toBe(200);
            await response.body.dump();
            const outcome = await settled;
            expect(outcome).toBeInstanceOf(CancelledError);
            expect(outcome).toMatchObject({ reason: 'context-ended' });
            await statementGone(key);
            const { rows } = await monitor.query(`SELECT count(*)::int AS n FROM ${table} WHERE key = $1`, [key]);
            expect(rows[0]).toEqual({ n: 0 });
            expect(outlived).toEqual([]);
          } finally {
            await server.close();
          }
        });

        it('a request whose client leaves cancels the work it left running, as before', async () => {
          const key = `${host}-left-${++rowNumber}`;
          let settled!: Promise<unknown>;
          let handlerRunning!: () => void;
          const running = new Promise<void>((resolve) => {
            handlerRunning = resolve;
          });
          const server = await start(async (respond) => {
            // A second long, not audit()'s 200 ms: the client leaves at once, and under load a cancel that reached
            // the backend before the statement, then its re-send 50 ms later (a new connection, a fork on the
            // server), took longer than 200 ms in CI, so the insert committed first (2 of 7 runs).
            settled = db.query(`INSERT INTO ${table} SELECT $1 FROM pg_sleep(1) /* ${key} */`, [key]).then(
              () => 'done',
              (error: unknown) => error,
            );
            handlerRunning();
            await new Promise((resolve) => setTimeout(resolve, 5_000)); // the client leaves long before
            respond('late');
          }, {});
          try {
            const controller = new AbortController();
            const response = request(`${server.url}/route`, { signal: controller.signal }).catch(() => undefined);
            await running;
            controller.abort();
            await response;
            const outcome = await settled;
            expect(outcome).toBeInstanceOf(CancelledError);
            expect(outcome).toMatchObject({ reason: 'client-disconnected' });
            await statementGone(key);
            const { rows } = await monitor.query(`SELECT count(*)::int AS n FROM ${table} WHERE key = $1`, [key]);
            expect(rows[0]).toEqual({ n: 0 });
          } finally {
            await server.close();
          }
        });

        it('a hedged Promise.race: the winner answers, the loser runs on and is cut on the server at the deadline', async () => {
          const marker = `${host}_loser_${++rowNumber}`;
          let loser!: Promise<unknown>;
          const server = await start(async (respond) => {
            const fast = db.query('SELECT 1 AS n FROM pg_sleep(0.05)');
            loser = db.query(`SELECT 2 AS n FROM pg_sleep(5) /* ${marker} */`);
            const winner = await Promise.race([fast, loser]);
            respond(String((winner as { rows: { n: number }[] }).rows[0]?.n));
          }, {});
          try {
            const sent = performance.now();
            const response = await request(`${server.url}/route`, { headers: { 'x-request-deadline': '600' } });
            expect(response.statusCode).toBe(200);
            expect(await response.body.text()).toBe('1');
            const error = await loser.catch((e: unknown) => e);
            const cutAt = performance.now() - sent;
            expect(error).toBeInstanceOf(DeadlineExceededError);
            expect(error).toMatchObject({ phase: 'during-call', target: 'audit-db', hop: 'orders' });
            expect(cutAt).toBeGreaterThanOrEqual(550);
            expect(cutAt).toBeLessThan(2_500);
            await statementGone(marker);
            const line = await outlivedLine(server.lines);
            expect(line).toMatchObject({ target: 'audit-db', outcome: 'deadline_exceeded' });
            expect(line.outlivedMs).toBeGreaterThan(300);
            // Promise.race handled the loser's rejection: nothing unhandled.
            expect(watch.seen).toEqual([]);
          } finally {
            await server.close();
          }
        });
      });
    }
  });
}
