import type { Server } from 'node:http';
import type { AddressInfo } from 'node:net';
import { currentContext, DeadlineExceededError } from '@deadline/core';
import { CircuitOpenError } from '@deadline/resilience';
import { serve } from '@hono/node-server';
import { type Context, Hono } from 'hono';
import { stream, streamText } from 'hono/streaming';
import pino from 'pino';
import { request } from 'undici';
import { afterAll, beforeAll, describe, expect, it, vi } from 'vitest';
import { admissionSuite } from '../../server/test/admission.ts';
import { conformanceSuite } from '../../server/test/conformance.ts';
import { closeServer, type Harness, type LogLine, memoryDestination } from '../../server/test/harness.ts';
import { longLivedSuite } from '../../server/test/long-lived.ts';
import { expectRouteLimitsNarrow } from '../../server/test/route-limits.ts';
import { type DeadlineEnv, deadline, deadlineErrors, longLived } from '../src/index.ts';

/** Serves `app` with @hono/node-server on a free port. */
async function listen(app: Hono<DeadlineEnv>): Promise<{ url: string; server: Server }> {
  const server = await new Promise<Server>((resolve) => {
    const s = serve({ fetch: app.fetch, port: 0, hostname: '127.0.0.1' }, () => resolve(s as Server));
  });
  return { url: `http://127.0.0.1:${(server.address() as AddressInfo).port}`, server };
}

/** What reached the app's own error handler (behind `deadlineErrors()`). */
function honoHarness(caught: unknown[]): Harness {
  return {
    name: 'hono',
    ownErrorBody: true,
    async start(options, routes) {
      const logs: LogLine[] = [];
      const app = new Hono<DeadlineEnv>();
      app.use(deadline({ ...(options as object), logger: pino({ level: 'debug' }, memoryDestination(logs)) }));
      app.onError(
        deadlineErrors((error, c) => {
          caught.push(error);
          return c.json({ error: 'internal' }, 500);
        }),
      );
      for (const route of routes) {
        const method = route.method === 'GET' ? 'get' : 'post';
        const handler = async (c: Context<DeadlineEnv>) => {
          let response: Response | undefined;
          await route.handler({
            deadline: c.var.deadline as NonNullable<typeof c.var.deadline>,
            body: route.method === 'POST' ? c.env.incoming : undefined,
            reply(status, body, headers) {
              response = c.json(body, status as 200, headers);
            },
            // Hono's streaming helpers run the writer at once, in the route: the response is handed over, not awaited.
            async stream(status, chunks) {
              c.status(status as 200);
              response = streamText(c, async (out) => {
                for await (const chunk of chunks) await out.write(chunk);
              });
            },
            async events(chunks) {
              c.header('content-type', 'text/event-stream');
              response = stream(c, async (out) => {
                for await (const chunk of chunks) await out.write(chunk);
              });
            },
          });
          return response ?? c.body(null, 204);
        };
        if (route.longLived) app[method](route.path, longLived(), handler);
        else app[method](route.path, handler);
      }
      const { url, server } = await listen(app);
      return { url, logs, close: () => closeServer(server) };
    },
  };
}

const caught: unknown[] = [];
conformanceSuite(honoHarness(caught));
longLivedSuite(honoHarness(caught));
admissionSuite(honoHarness(caught));

describe('hono middleware', () => {
  const logs: LogLine[] = [];
  const app = new Hono<DeadlineEnv>();
  let server: Server;
  let url = '';

  beforeAll(async () => {
    app.use(
      deadline({
        serviceName: 'orders',
        defaultMs: 2_000,
        maxMs: 4_000,
        trust: (req) => req.headers['x-internal'] === '1',
        logger: pino({ level: 'info' }, memoryDestination(logs)),
      }),
    );
    app.onError(deadlineErrors());
    app.get('/plain', (c) => {
      const context = currentContext();
      return c.json({
        budgetMs: c.var.deadline?.budget.budgetMs ?? null,
        inContext: context !== undefined && context === c.var.deadline?.context,
      });
    });
    app.get('/reports', deadline({ serviceName: 'orders', defaultMs: 300, maxMs: 500 }), (c) =>
      c.json({ budgetMs: c.var.deadline?.budget.budgetMs, left: c.var.deadline?.remainingMs() }),
    );
    app.get('/generous', deadline({ serviceName: 'orders', defaultMs: 3_000, maxMs: 4_000 }), (c) =>
      c.json({ left: c.var.deadline?.remainingMs() }),
    );
    app.get('/breaker', () => {
      throw new TypeError('fetch failed', { cause: new CircuitOpenError('inventory', 'open', 1_500) });
    });
    ({ server, url } = await listen(app));
  });
  afterAll(() => closeServer(server));

  it('is a named middleware', () => {
    expect(deadline().name).toBe('deadlineMiddleware');
    expect(longLived().name).toBe('longLivedRoute');
    expect(deadlineErrors().name).toBe('deadlineErrorHandler');
  });

  it('runs the routes in the request’s context', async () => {
    const res = await request(`${url}/plain`, { headers: { 'x-request-deadline': '900' } });
    expect(await res.body.json()).toEqual({ budgetMs: 900, inContext: true });
  });

  it('a route’s own middleware narrows the deadline to its SLA, never widens it', async () => {
    await expectRouteLimitsNarrow(url, { narrow: '/reports', generous: '/generous' });
  });

  it('a circuit breaker’s refusal wrapped by fetch: 503 with Retry-After', async () => {
    const res = await request(`${url}/breaker`);
    expect(res.statusCode).toBe(503);
    expect(res.headers['retry-after']).toBe('2');
    await res.body.dump();
  });

  it('off Node (app.request), the routes run as before, and it is said once', async () => {
    const warnings: Error[] = [];
    const onWarning = (warning: Error) => warnings.push(warning);
    process.on('warning', onWarning);
    try {
      for (let i = 0; i < 2; i++) {
        const res = await app.request('/plain');
        expect(await res.json()).toEqual({ budgetMs: null, inContext: false });
      }
      await new Promise((resolve) => setImmediate(resolve));
      expect(warnings.map((w) => (w as { code?: string }).code)).toEqual(['DEADLINE_HONO_OFF_NODE']);
    } finally {
      process.off('warning', onWarning);
    }
  });

  it('without deadlineErrors(): the deadline’s answer still, though Hono’s default handler prints the error', async () => {
    const printed: unknown[] = [];
    const spy = vi.spyOn(console, 'error').mockImplementation((error: unknown) => void printed.push(error));
    const bare = new Hono<DeadlineEnv>();
    bare.use(deadline({ serviceName: 'orders', logger: pino({ level: 'info' }, memoryDestination(logs)) }));
    bare.get('/', () => {
      throw new DeadlineExceededError({ phase: 'during-call', whose: 'downstream:inventory', budgetMs: 80 });
    });
    const { url: bareUrl, server: bareServer } = await listen(bare);
    try {
      const res = await request(bareUrl);
      expect(res.statusCode).toBe(504);
      expect(res.headers['x-deadline-exceeded-by']).toBe('inventory');
      expect(await res.body.json()).toMatchObject({ error: 'deadline_exceeded', exceededBy: 'inventory' });
      expect(printed).toEqual([expect.any(DeadlineExceededError)]);
    } finally {
      spy.mockRestore();
      await closeServer(bareServer);
    }
  });

  it('no deadline error reached the app’s own error handler in the whole file', () => {
    expect(caught).toEqual([]);
  });
});
