/**
 * A Koa app shaped like the ones services run adopts the middleware: koa-pino-logger logging every request, CORS, a
 * body parser, `@koa/router` routes that query PostgreSQL, and the catch-all error middleware Koa apps put first (log
 * at error level, answer 500, emit on `app.on('error')`). A deadline error escaping a route — this hop's before its
 * timer, a downstream's, one wrapped by fetch — answers 504 naming whose deadline it was; a client that leaves
 * mid-query and a request out of budget each end in the library's one line, the statement gone from the server. The
 * catch-all and Koa's `'error'` event never hear of any of them; every other error reaches them as before.
 */
import type { Server } from 'node:http';
import type { AddressInfo } from 'node:net';
import { CancelledError, DeadlineExceededError, timeoutFor } from '@deadline/core';
import { withDeadline } from '@deadline/pg';
import { deadlineMixin } from '@deadline/pino';
import { bodyParser } from '@koa/bodyparser';
import cors from '@koa/cors';
import Router from '@koa/router';
import Koa from 'koa';
import koaPinoLogger from 'koa-pino-logger';
import koa2 from 'koa2';
import pg from 'pg';
import pino from 'pino';
import { request } from 'undici';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { POSTGRES, requireService } from '../../../test/support/services.ts';
import { ServerActivity } from '../../pg/test/support/activity.ts';
import { leaveMidQuery, lineOf, postWithinBudget, runOutOfBudget } from '../../server/test/app-errors.ts';
import { type LogLine, memoryDestination } from '../../server/test/harness.ts';
import { deadline } from '../src/index.ts';

const available = await requireService(POSTGRES);

const downstream = () =>
  new DeadlineExceededError({ phase: 'during-call', whose: 'downstream:inventory', budgetMs: 80 });

for (const [name, Framework] of [
  ['koa 3', Koa],
  ['koa 2', koa2],
] as const) {
  describe.runIf(available)(`${name}: an app with its own catch-all error middleware`, () => {
    const logs: LogLine[] = [];
    /** What the catch-all caught, and what Koa emitted on `app.on('error')`. */
    const caught: unknown[] = [];
    const emitted: unknown[] = [];
    let pool: pg.Pool;
    let activity: ServerActivity;
    let server: Server;
    let url = '';
    const sleeping = () => ({ url, logs, activity, path: (m: string) => `/orders/${m}` });

    beforeAll(async () => {
      pool = new pg.Pool({ connectionString: POSTGRES.url, max: 2, application_name: `deadline-koa-${process.pid}` });
      activity = await ServerActivity.open();
      const db = withDeadline(pool, { name: 'orders-db' });
      const logger = pino({ level: 'info', mixin: deadlineMixin() }, memoryDestination(logs));
      const app = new Framework();
      app.on('error', (error: unknown) => emitted.push(error));
      app.use(koaPinoLogger({ logger }));
      app.use(cors());
      app.use(async (ctx, next) => {
        try {
          await next();
        } catch (error) {
          caught.push(error);
          ctx.log.error({ err: error }, 'unexpected error');
          ctx.status = 500;
          ctx.body = { error: 'internal' };
          ctx.app.emit('error', error, ctx);
        }
      });
      app.use(deadline({ serviceName: 'orders', defaultMs: 2_000 }));
      app.use(bodyParser());
      const router = new Router();
      router.get('/orders/:marker', async (ctx) => {
        try {
          await db.query(`SELECT pg_sleep(5) /* ${ctx.params.marker} */`);
        } catch (error) {
          ctx.log.info({ err: error }, 'the query failed');
          throw error;
        }
        ctx.body = { ok: true };
      });
      router.post('/orders', async (ctx) => {
        ctx.body = { received: ctx.request.body, left: ctx.deadline?.remainingMs() };
      });
      router.get('/downstream', async () => {
        throw downstream();
      });
      // This hop's own deadline, before it passed: a call needing more than what is left is not made.
      router.get('/no-time-for-the-call', async (ctx) => {
        timeoutFor('orders-db', { marginMs: 60_000 });
        ctx.body = 'called';
      });
      router.get('/wrapped', async () => {
        throw new TypeError('fetch failed', { cause: downstream() });
      });
      router.get('/cancelled', async () => {
        throw new CancelledError('stopped on purpose');
      });
      router.get('/bug', async () => {
        throw new Error('a bug');
      });
      app.use(router.routes());
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

    it('a downstream’s deadline and one refused before this hop’s passed: 504 naming whose, logged deadline_exceeded', async () => {
      const before = logs.length;
      const res = await request(`${url}/downstream`, { headers: { origin: 'https://shop.example' } });
      expect(res.statusCode).toBe(504);
      expect(res.headers['x-deadline-exceeded-by']).toBe('inventory');
      // What the app's middleware outside it set is kept.
      expect(res.headers['access-control-allow-origin']).toBe('*');
      expect(await res.body.json()).toMatchObject({ error: 'deadline_exceeded', exceededBy: 'inventory' });
      expect(await lineOf(logs, before, 'deadline: deadline_exceeded')).toMatchObject({
        statusCode: 504,
        outcome: 'deadline_exceeded',
        exceededBy: 'inventory',
      });
      const own = await request(`${url}/no-time-for-the-call`);
      expect(own.statusCode).toBe(504);
      expect(own.headers['x-deadline-exceeded-by']).toBe('orders');
      expect(await own.body.json()).toMatchObject({ error: 'deadline_exceeded', exceededBy: 'orders' });
      expect(caught).toEqual([]);
      expect(emitted).toEqual([]);
    });

    it('a deadline error wrapped by someone else (fetch failed) and a cancellation are answered too', async () => {
      const wrapped = await request(`${url}/wrapped`);
      expect(wrapped.statusCode).toBe(504);
      expect(wrapped.headers['x-deadline-exceeded-by']).toBe('inventory');
      await wrapped.body.dump();
      const cancelled = await request(`${url}/cancelled`);
      expect(cancelled.statusCode).toBe(499);
      await cancelled.body.dump();
      expect(caught).toEqual([]);
      expect(emitted).toEqual([]);
    });

    it('every other error reaches the catch-all as it was thrown', async () => {
      const res = await request(`${url}/bug`);
      expect(res.statusCode).toBe(500);
      expect(await res.body.json()).toEqual({ error: 'internal' });
      expect(caught).toEqual([expect.objectContaining({ message: 'a bug' })]);
      expect(emitted).toEqual([expect.objectContaining({ message: 'a bug' })]);
      caught.length = 0;
      emitted.length = 0;
    });

    it('the body parser runs inside the budget', async () => {
      await postWithinBudget(`${url}/orders`);
    });

    it('a client that leaves mid-query: one line from the library, the catch-all not reached, the statement gone', async () => {
      const lines = await leaveMidQuery(sleeping(), 'orders');
      const failed = lines.find((l) => l.msg === 'the query failed');
      expect(failed?.err).toMatchObject({ type: 'CancelledError', reason: 'client-disconnected' });
      expect(caught).toEqual([]);
      expect(emitted).toEqual([]);
    });

    it('a request out of budget: 504 naming the hop, its statement stopped, nothing at error level', async () => {
      const before = logs.length;
      await runOutOfBudget(sleeping(), 'orders');
      // The statement's failure reaches the route after the answer: logged by the route, at info.
      await lineOf(logs, before, 'the query failed');
      expect(caught).toEqual([]);
      expect(emitted).toEqual([]);
    });
  });
}
