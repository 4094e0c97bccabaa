/**
 * An express app shaped like the ones services run adopts the middleware: pino-http logging every request, routes
 * that query PostgreSQL, and a catch-all error handler of the app's own that logs at error level and answers 500.
 * A client that leaves mid-query and a request that runs out of its budget each end in the library's one line:
 * the catch-all never sees them, nothing is logged at error level, and the statement is gone from the server.
 */
import type { Server } from 'node:http';
import type { AddressInfo } from 'node:net';
import { withDeadline } from '@deadline/pg';
import { deadlineMixin } from '@deadline/pino';
import express from 'express';
import express4 from 'express4';
import pg from 'pg';
import pino from 'pino';
import { pinoHttp } from 'pino-http';
import { request } from 'undici';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { POSTGRES, requireService } from '../../../test/support/services.ts';
import { marker, ServerActivity } from '../../pg/test/support/activity.ts';
import { type LogLine, memoryDestination, repeatedMessages } from '../../server/test/harness.ts';
import { deadline, deadlineErrors } from '../src/index.ts';

const available = await requireService(POSTGRES);

/** pino's level numbers: error and fatal. */
const ERROR = 50;

/** How long the route's statement runs by itself (its `pg_sleep(5)`). */
const STATEMENT_MS = 5_000;
/**
 * How soon a cut statement is gone, and a cut request answered: well before {@link STATEMENT_MS}, so that it was the
 * cut that ended it, with room for what a loaded machine adds.
 */
const CUT_WITHIN_MS = STATEMENT_MS - 1_000;
/**
 * The budget of the request that runs out of it: a second, so that the statement is on the server before the
 * deadline however slow the machine (the cut then has a statement to stop), and still far short of its 5 s.
 */
const OUT_OF_BUDGET_MS = 1_000;

for (const [name, framework] of [
  ['express 5', express],
  ['express 4', express4],
] as const) {
  describe.runIf(available)(`${name}: an app with its own catch-all error handler`, () => {
    const logs: LogLine[] = [];
    const caught: unknown[] = [];
    let pool: pg.Pool;
    let activity: ServerActivity;
    let server: Server;
    let url = '';
    /** What the server answered statements with, read off the pool's connections (ErrorResponse codes). */
    const serverErrors: (string | undefined)[] = [];

    beforeAll(async () => {
      pool = new pg.Pool({
        connectionString: POSTGRES.url,
        max: 2,
        application_name: `deadline-express-${process.pid}`,
      });
      pool.on('connect', (connected) => {
        const connection = (connected as unknown as { connection: NodeJS.EventEmitter }).connection;
        connection.on('errorMessage', (message: { code?: string }) => serverErrors.push(message.code));
      });
      activity = await ServerActivity.open();
      const db = withDeadline(pool, { name: 'orders-db' });
      const logger = pino({ level: 'info', mixin: deadlineMixin() }, memoryDestination(logs));
      const app = framework();
      app.use(pinoHttp({ logger }));
      app.use(deadline({ serviceName: 'orders', defaultMs: 2_000 }));
      // express 4 does not route a handler's rejection to the error handlers: apps write `.catch(next)`.
      app.get('/orders/:marker', (req: express.Request, res: express.Response, next: express.NextFunction) => {
        db.query(`SELECT pg_sleep(5) /* ${req.params.marker} */`)
          .then(() => res.json({ ok: true }))
          .catch((error: unknown) => {
            req.log.info({ err: error }, 'the query failed');
            next(error);
          });
      });
      app.use(deadlineErrors());
      app.use((error: Error, req: express.Request, res: express.Response, _next: express.NextFunction) => {
        caught.push(error);
        req.log.error({ err: error }, 'unexpected error');
        res.status(500).json({ error: 'internal' });
      });
      server = await new Promise<Server>((resolve) => {
        const s = app.listen(0, '127.0.0.1', () => resolve(s));
      });
      url = `http://127.0.0.1:${(server.address() as AddressInfo).port}`;
    });
    afterAll(async () => {
      server?.closeAllConnections();
      await new Promise((resolve) => server?.close(resolve));
      await activity?.end();
      await pool?.end();
    });

    it('a client that leaves mid-query: one line from the library, the catch-all not reached, the statement gone', async () => {
      const m = marker();
      const before = logs.length;
      const client = new AbortController();
      const pending = request(`${url}/orders/${m}`, { signal: client.signal }).catch((error: unknown) => error);
      await activity.startedRunning(m);
      const left = performance.now();
      client.abort();
      await pending;
      const gone = await activity.goneAt(m);
      expect(gone - left).toBeLessThan(CUT_WITHIN_MS);
      const line = await lineOf(logs, before, 'deadline: cancelled');
      expect(line).toMatchObject({ hop: 'orders', statusCode: 499, outcome: 'cancelled' });
      const lines = logs.slice(before);
      expect(lines.filter((l) => l.level >= ERROR)).toEqual([]);
      expect(lines.filter((l) => String(l.msg).startsWith('deadline:'))).toHaveLength(1);
      expect(caught).toEqual([]);
      // What stopped the query and how the server confirmed it, each said once: the server answered the statement
      // 57014, our cancel. The error carries that answer when it came within the 50 ms the pg adapter waits for it; a
      // loaded server may answer later, and the error then says what stopped the query alone.
      await expect.poll(() => serverErrors).toContain('57014');
      const failed = lines.find((l) => l.msg === 'the query failed');
      expect(failed?.err).toMatchObject({ type: 'CancelledError', reason: 'client-disconnected' });
      const stopped = 'call to orders-db stopped: the client closed the connection before the response';
      expect([stopped, `${stopped}: canceling statement due to user request`]).toContain(
        (failed?.err as { message?: string } | undefined)?.message,
      );
      expect(repeatedMessages(lines)).toEqual([]);
    });

    it('a request out of budget: 504 naming the hop, its statement stopped, the catch-all not reached, nothing at error level', async () => {
      const m = marker();
      const before = logs.length;
      const sent = performance.now();
      const pending = request(`${url}/orders/${m}`, { headers: { 'x-request-deadline': String(OUT_OF_BUDGET_MS) } });
      // The statement ran on the server before the cut: the cut had it to stop.
      await activity.startedRunning(m);
      const response = await pending;
      const answered = performance.now();
      expect(response.statusCode).toBe(504);
      expect(response.headers['x-deadline-exceeded-by']).toBe('orders');
      expect(await response.body.json()).toMatchObject({ error: 'deadline_exceeded', exceededBy: 'orders' });
      expect(answered - sent).toBeGreaterThanOrEqual(OUT_OF_BUDGET_MS - 10);
      expect(answered - sent).toBeLessThan(CUT_WITHIN_MS);
      const gone = await activity.goneAt(m);
      expect(gone - sent).toBeLessThan(CUT_WITHIN_MS);
      const line = await lineOf(logs, before, 'deadline: deadline_exceeded');
      expect(line).toMatchObject({ statusCode: 504, exceededBy: 'orders', budgetMs: OUT_OF_BUDGET_MS });
      const lines = logs.slice(before);
      expect(lines.filter((l) => l.level >= ERROR)).toEqual([]);
      expect(caught).toEqual([]);
      expect(repeatedMessages(lines)).toEqual([]);
    });
  });
}

/** The first line with `msg` written since `from`, waited for (the end line follows the response's close). */
async function lineOf(logs: LogLine[], from: number, msg: string): Promise<LogLine> {
  const until = performance.now() + 5_000;
  for (;;) {
    const line = logs.slice(from).find((l) => l.msg === msg);
    if (line !== undefined) return line;
    if (performance.now() > until) throw new Error(`no "${msg}" line; lines: ${JSON.stringify(logs.slice(from))}`);
    await new Promise((resolve) => setImmediate(resolve));
  }
}
