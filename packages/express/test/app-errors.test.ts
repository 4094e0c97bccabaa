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

    beforeAll(async () => {
      pool = new pg.Pool({
        connectionString: POSTGRES.url,
        max: 2,
        application_name: `deadline-express-${process.pid}`,
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
      expect(gone - left).toBeLessThan(2_000);
      const line = await lineOf(logs, before, 'deadline: cancelled');
      expect(line).toMatchObject({ hop: 'orders', statusCode: 499, outcome: 'cancelled' });
      const lines = logs.slice(before);
      expect(lines.filter((l) => l.level >= ERROR)).toEqual([]);
      expect(lines.filter((l) => String(l.msg).startsWith('deadline:'))).toHaveLength(1);
      expect(caught).toEqual([]);
      // What stopped the query and how the server confirmed it, each said once.
      const failed = lines.find((l) => l.msg === 'the query failed');
      expect(failed?.err).toMatchObject({
        type: 'CancelledError',
        reason: 'client-disconnected',
        message:
          'call to orders-db stopped: the client closed the connection before the response: canceling statement due to user request',
      });
      expect(repeatedMessages(lines)).toEqual([]);
    });

    it('a request out of budget: 504 naming the hop, the catch-all not reached, nothing at error level', async () => {
      const m = marker();
      const before = logs.length;
      const sent = performance.now();
      const response = await request(`${url}/orders/${m}`, { headers: { 'x-request-deadline': '50' } });
      const answered = performance.now();
      expect(response.statusCode).toBe(504);
      expect(response.headers['x-deadline-exceeded-by']).toBe('orders');
      expect(await response.body.json()).toMatchObject({ error: 'deadline_exceeded', exceededBy: 'orders' });
      expect(answered - sent).toBeLessThan(1_500);
      const gone = await activity.goneAt(m);
      expect(gone - sent).toBeLessThan(2_000);
      const line = await lineOf(logs, before, 'deadline: deadline_exceeded');
      expect(line).toMatchObject({ statusCode: 504, exceededBy: 'orders', budgetMs: 50 });
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
