import type { Server } from 'node:http';
import { PassThrough, Readable } from 'node:stream';
import { currentContext } from '@deadline/core';
import { CircuitOpenError } from '@deadline/resilience';
import Router from '@koa/router';
import Koa from 'koa';
import koa2 from 'koa2';
import pino from 'pino';
import { request } from 'undici';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { admissionSuite } from '../../server/test/admission.ts';
import { conformanceSuite } from '../../server/test/conformance.ts';
import { closeServer, type Harness, type LogLine, listenApp, memoryDestination } from '../../server/test/harness.ts';
import { longLivedSuite } from '../../server/test/long-lived.ts';
import { expectRouteLimitsNarrow } from '../../server/test/route-limits.ts';
import { deadline, longLived } from '../src/index.ts';

type KoaClass = typeof Koa;

/** Every error Koa emitted on `app.on('error')` (its default listener prints each with its stack). */
function koaHarness(name: string, Framework: KoaClass, emitted: unknown[]): Harness {
  return {
    name,
    ownErrorBody: true,
    async start(options, routes) {
      const logs: LogLine[] = [];
      const app = new Framework();
      app.on('error', (error: unknown) => emitted.push(error));
      app.use(deadline({ ...(options as object), logger: pino({ level: 'debug' }, memoryDestination(logs)) }));
      const router = new Router();
      for (const route of routes) {
        const method = route.method === 'GET' ? 'get' : 'post';
        const extra = route.longLived ? [longLived()] : [];
        router[method](route.path, ...extra, async (ctx) => {
          await route.handler({
            deadline: ctx.deadline as NonNullable<typeof ctx.deadline>,
            body: route.method === 'POST' ? ctx.req : undefined,
            reply(status, body, headers) {
              ctx.status = status;
              ctx.set(headers ?? {});
              ctx.body = body;
            },
            // Koa writes the body once the middleware are done: the stream is handed over, not awaited.
            async stream(status, chunks) {
              ctx.status = status;
              ctx.type = 'text/plain';
              ctx.body = Readable.from(chunks);
            },
            async events(chunks) {
              ctx.status = 200;
              ctx.type = 'text/event-stream';
              ctx.body = Readable.from(chunks);
            },
          });
        });
      }
      app.use(router.routes());
      const { url, server } = await listenApp(app);
      return { url, logs, close: () => closeServer(server) };
    },
  };
}

for (const [name, Framework] of [
  ['koa 3', Koa],
  ['koa 2', koa2],
] as const) {
  const emitted: unknown[] = [];
  conformanceSuite(koaHarness(name, Framework, emitted));
  longLivedSuite(koaHarness(name, Framework, emitted));
  if (name === 'koa 3') admissionSuite(koaHarness(name, Framework, emitted));

  describe(`${name} middleware`, () => {
    const logs: LogLine[] = [];
    const app = new Framework();
    let server: Server;
    let url = '';

    beforeAll(async () => {
      app.on('error', (error: unknown) => emitted.push(error));
      app.use(
        deadline({
          serviceName: 'orders',
          defaultMs: 2_000,
          maxMs: 4_000,
          trust: (req) => req.headers['x-internal'] === '1',
          logger: pino({ level: 'info' }, memoryDestination(logs)),
        }),
      );
      const router = new Router();
      router.get('/plain', (ctx) => {
        ctx.body = { budgetMs: ctx.deadline?.budget.budgetMs };
      });
      router.get('/reports', deadline({ serviceName: 'orders', defaultMs: 300, maxMs: 500 }), (ctx) => {
        ctx.body = { budgetMs: ctx.deadline?.budget.budgetMs, left: ctx.deadline?.remainingMs() };
      });
      router.get('/generous', deadline({ serviceName: 'orders', defaultMs: 3_000, maxMs: 4_000 }), (ctx) => {
        ctx.body = { left: ctx.deadline?.remainingMs() };
      });
      router.get('/fails', () => {
        throw Object.assign(new Error('not a deadline'), { status: 418, expose: true });
      });
      router.get('/breaker', () => {
        throw new TypeError('fetch failed', { cause: new CircuitOpenError('inventory', 'open', 1_500) });
      });
      router.get('/stream-cut', (ctx) => {
        const body = new PassThrough();
        body.write('first\n');
        ctx.type = 'text/plain';
        ctx.body = body;
      });
      app.use(router.routes());
      ({ server, url } = await listenApp(app));
    });
    afterAll(() => closeServer(server));

    it('is a named middleware', () => {
      expect(deadline().name).toBe('deadlineMiddleware');
      expect(longLived().name).toBe('longLivedRoute');
    });

    it('a route’s own middleware narrows the deadline to its SLA, never widens it', async () => {
      await expectRouteLimitsNarrow(url, { narrow: '/reports', generous: '/generous' });
    });

    it('passes every other error on to Koa as it was', async () => {
      const before = emitted.length;
      const res = await request(`${url}/fails`);
      expect(res.statusCode).toBe(418);
      expect(await res.body.text()).toBe('not a deadline');
      await expect.poll(() => emitted.length).toBe(before + 1);
      expect(emitted.at(-1)).toMatchObject({ message: 'not a deadline' });
      emitted.pop();
    });

    it('a circuit breaker’s refusal wrapped by fetch reaches Koa unwrapped: 503 with Retry-After', async () => {
      const before = emitted.length;
      const res = await request(`${url}/breaker`);
      expect(res.statusCode).toBe(503);
      expect(res.headers['retry-after']).toBe('2');
      await res.body.dump();
      await expect.poll(() => emitted.length).toBe(before + 1);
      expect(emitted.at(-1)).toBeInstanceOf(CircuitOpenError);
      emitted.pop();
    });

    it('a streamed body still open at the deadline is cut, and Koa is not told of it', async () => {
      const before = emitted.length;
      const res = await request(`${url}/stream-cut`, { headers: { 'x-request-deadline': '200' } });
      expect(res.statusCode).toBe(200);
      await expect(res.body.text()).rejects.toThrow();
      await expect.poll(() => logs.some((l) => String(l.msg).includes('still streaming'))).toBe(true);
      expect(emitted.slice(before)).toEqual([]);
    });

    it('works beside Koa’s own asyncLocalStorage option: both contexts are there in a route', async () => {
      const own = new Framework({ asyncLocalStorage: true });
      own.use(deadline({ serviceName: 'orders' }));
      own.use(async (ctx) => {
        await new Promise((resolve) => setTimeout(resolve, 5));
        ctx.body = { koa: own.currentContext === ctx, deadline: currentContext() === ctx.deadline?.context };
      });
      const { url: ownUrl, server: ownServer } = await listenApp(own);
      try {
        expect(await (await request(ownUrl)).body.json()).toEqual({ koa: true, deadline: true });
      } finally {
        await closeServer(ownServer);
      }
    });

    it('tells Koa of no deadline error and no disconnect in the whole file', () => {
      expect(emitted).toEqual([]);
    });
  });
}
