/**
 * A Hono app shaped like the ones services run on Node adopts the middleware: served by `@hono/node-server`, CORS and
 * secure headers, routes on a sub-app (`app.route()`) that query PostgreSQL, and the app's own `onError` that logs at
 * error level and answers 500, behind `deadlineErrors()`. A deadline error escaping a route — this hop's before its
 * timer, a downstream's, one wrapped by fetch — answers 504 naming whose deadline it was; a client that leaves
 * mid-query and a request out of budget each end in the library's one line, the statement gone from the server. The
 * app's handler never sees any of them, nothing is printed; every other error reaches it as before.
 */
import type { Server } from 'node:http';
import type { AddressInfo } from 'node:net';
import { CancelledError, DeadlineExceededError, timeoutFor } from '@deadline/core';
import { withDeadline } from '@deadline/pg';
import { serve } from '@hono/node-server';
import { Hono } from 'hono';
import { cors } from 'hono/cors';
import { secureHeaders } from 'hono/secure-headers';
import pg from 'pg';
import pino from 'pino';
import { request } from 'undici';
import { afterAll, beforeAll, describe, expect, it, vi } from 'vitest';
import { POSTGRES, requireService } from '../../../test/support/services.ts';
import { ServerActivity } from '../../pg/test/support/activity.ts';
import { leaveMidQuery, lineOf, postWithinBudget, runOutOfBudget } from '../../server/test/app-errors.ts';
import { closeServer, type LogLine, memoryDestination } from '../../server/test/harness.ts';
import { type DeadlineEnv, deadline, deadlineErrors } from '../src/index.ts';

const available = await requireService(POSTGRES);

const downstream = () =>
  new DeadlineExceededError({ phase: 'during-call', whose: 'downstream:inventory', budgetMs: 80 });

describe.runIf(available)('hono: an app with its own onError', () => {
  const logs: LogLine[] = [];
  const caught: unknown[] = [];
  let pool: pg.Pool;
  let activity: ServerActivity;
  let server: Server;
  let url = '';
  const sleeping = () => ({ url, logs, activity, path: (m: string) => `/api/orders/${m}` });
  /** What went to stderr: Hono's default handler and @hono/node-server print there. */
  const printed: unknown[][] = [];

  beforeAll(async () => {
    vi.spyOn(console, 'error').mockImplementation((...args: unknown[]) => void printed.push(args));
    pool = new pg.Pool({ connectionString: POSTGRES.url, max: 2, application_name: `deadline-hono-${process.pid}` });
    activity = await ServerActivity.open();
    const db = withDeadline(pool, { name: 'orders-db' });
    const logger = pino({ level: 'info' }, memoryDestination(logs));
    const api = new Hono<DeadlineEnv>();
    api.get('/orders/:marker', async (c) => {
      try {
        await db.query(`SELECT pg_sleep(5) /* ${c.req.param('marker')} */`);
      } catch (error) {
        logger.info({ err: error }, 'the query failed');
        throw error;
      }
      return c.json({ ok: true });
    });
    api.post('/orders', async (c) => c.json({ received: await c.req.json(), left: c.var.deadline?.remainingMs() }));
    api.get('/downstream', () => {
      throw downstream();
    });
    // This hop's own deadline, before it passed: a call needing more than what is left is not made.
    api.get('/no-time-for-the-call', (c) => {
      timeoutFor('orders-db', { marginMs: 60_000 });
      return c.text('called');
    });
    api.get('/wrapped', () => {
      throw new TypeError('fetch failed', { cause: downstream() });
    });
    api.get('/cancelled', () => {
      throw new CancelledError('stopped on purpose');
    });
    api.get('/bug', () => {
      throw new Error('a bug');
    });
    const app = new Hono<DeadlineEnv>();
    app.use(deadline({ serviceName: 'orders', defaultMs: 2_000, logger }));
    app.use(cors());
    app.use(secureHeaders());
    app.onError(
      deadlineErrors((error, c) => {
        caught.push(error);
        logger.error({ err: error }, 'unexpected error');
        return c.json({ error: 'internal' }, 500);
      }),
    );
    app.route('/api', api);
    server = await new Promise<Server>((resolve) => {
      const s = serve({ fetch: app.fetch, port: 0, hostname: '127.0.0.1' }, () => resolve(s as Server));
    });
    url = `http://127.0.0.1:${(server.address() as AddressInfo).port}`;
  });
  afterAll(async () => {
    vi.restoreAllMocks();
    if (server !== undefined) await closeServer(server);
    await activity?.end();
    await pool?.end();
  });

  it('a downstream’s deadline and one refused before this hop’s passed: 504 naming whose, logged deadline_exceeded', async () => {
    const before = logs.length;
    const res = await request(`${url}/api/downstream`, { headers: { origin: 'https://shop.example' } });
    expect(res.statusCode).toBe(504);
    expect(res.headers['x-deadline-exceeded-by']).toBe('inventory');
    // What the app's middleware set on the way out is kept.
    expect(res.headers['access-control-allow-origin']).toBe('*');
    expect(res.headers['x-content-type-options']).toBe('nosniff');
    expect(await res.body.json()).toMatchObject({ error: 'deadline_exceeded', exceededBy: 'inventory' });
    expect(await lineOf(logs, before, 'deadline: deadline_exceeded')).toMatchObject({
      statusCode: 504,
      outcome: 'deadline_exceeded',
      exceededBy: 'inventory',
    });
    const own = await request(`${url}/api/no-time-for-the-call`);
    expect(own.statusCode).toBe(504);
    expect(own.headers['x-deadline-exceeded-by']).toBe('orders');
    expect(await own.body.json()).toMatchObject({ error: 'deadline_exceeded', exceededBy: 'orders' });
    expect(caught).toEqual([]);
  });

  it('a deadline error wrapped by someone else (fetch failed) and a cancellation are answered too', async () => {
    const wrapped = await request(`${url}/api/wrapped`);
    expect(wrapped.statusCode).toBe(504);
    expect(wrapped.headers['x-deadline-exceeded-by']).toBe('inventory');
    await wrapped.body.dump();
    const cancelled = await request(`${url}/api/cancelled`);
    expect(cancelled.statusCode).toBe(499);
    await cancelled.body.dump();
    expect(caught).toEqual([]);
  });

  it('every other error reaches the app’s handler as it was thrown', async () => {
    const res = await request(`${url}/api/bug`);
    expect(res.statusCode).toBe(500);
    expect(await res.body.json()).toEqual({ error: 'internal' });
    expect(caught).toEqual([expect.objectContaining({ message: 'a bug' })]);
    caught.length = 0;
  });

  it('the body is read inside the budget', async () => {
    await postWithinBudget(`${url}/api/orders`);
  });

  it('a client that leaves mid-query: one line from the library, the app’s handler not reached, the statement gone', async () => {
    const lines = await leaveMidQuery(sleeping(), 'orders');
    const failed = lines.find((l) => l.msg === 'the query failed');
    expect(failed?.err).toMatchObject({ type: 'CancelledError', reason: 'client-disconnected' });
    expect(caught).toEqual([]);
  });

  it('a request out of budget: 504 naming the hop, its statement stopped, nothing at error level', async () => {
    const before = logs.length;
    await runOutOfBudget(sleeping(), 'orders');
    // The statement's failure reaches the route after the answer: logged by the route, at info.
    await lineOf(logs, before, 'the query failed');
    expect(caught).toEqual([]);
  });

  it('nothing was printed to stderr', () => {
    expect(printed).toEqual([]);
  });
});
