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
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { POSTGRES, requireService } from '../../../test/support/services.ts';
import { ServerActivity } from '../../pg/test/support/activity.ts';
import { leaveMidQuery, runOutOfBudget } from '../../server/test/app-errors.ts';
import { type LogLine, memoryDestination } from '../../server/test/harness.ts';
import { deadline, deadlineErrors } from '../src/index.ts';

const available = await requireService(POSTGRES);

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
    const sleeping = () => ({ url, logs, activity, path: (m: string) => `/orders/${m}` });
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
      const lines = await leaveMidQuery(sleeping(), 'orders');
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
    });

    it('a request out of budget: 504 naming the hop, its statement stopped, the catch-all not reached, nothing at error level', async () => {
      await runOutOfBudget(sleeping(), 'orders');
      expect(caught).toEqual([]);
    });
  });
}
