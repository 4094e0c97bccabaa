import { createServer, type Server } from 'node:http';
import type { AddressInfo } from 'node:net';
import { Readable } from 'node:stream';
import { pipeline } from 'node:stream/promises';
import { currentContext, DeadlineExceededError } from '@deadline/core';
import { deadlineMixin } from '@deadline/pino';
import express from 'express';
import express4 from 'express4';
import pino from 'pino';
import { pinoHttp } from 'pino-http';
import { request } from 'undici';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { admissionSuite } from '../../server/test/admission.ts';
import { conformanceSuite } from '../../server/test/conformance.ts';
import { closeServer, type Harness, type LogLine, listenApp, memoryDestination } from '../../server/test/harness.ts';
import { longLivedSuite } from '../../server/test/long-lived.ts';
import { expectRouteLimitsNarrow } from '../../server/test/route-limits.ts';
import { deadline, deadlineErrors, longLived } from '../src/index.ts';

type Express = typeof express;

function expressHarness(name: string, framework: Express): Harness {
  return {
    name,
    ownErrorBody: true,
    async start(options, routes) {
      const logs: LogLine[] = [];
      const app = framework();
      app.use(deadline({ ...(options as object), logger: pino({ level: 'debug' }, memoryDestination(logs)) }));
      for (const route of routes) {
        const method = route.method === 'GET' ? 'get' : 'post';
        // `.catch(next)`: express 4 does not route a handler's rejection to the error handlers itself.
        const extra = route.longLived ? [longLived()] : [];
        app[method](route.path, ...extra, (req: express.Request, res: express.Response, next: express.NextFunction) => {
          route
            .handler({
              deadline: req.deadline as NonNullable<typeof req.deadline>,
              body: route.method === 'POST' ? req : undefined,
              reply(status, body, headers) {
                res
                  .status(status)
                  .set(headers ?? {})
                  .json(body);
              },
              async stream(status, chunks) {
                res.status(status).type('text/plain');
                await pipeline(Readable.from(chunks), res);
              },
              async events(chunks) {
                res.status(200).type('text/event-stream');
                await pipeline(Readable.from(chunks), res);
              },
            })
            .catch(next);
        });
      }
      app.use(deadlineErrors());
      const { url, server } = await listenApp(app);
      return { url, logs, close: () => closeServer(server) };
    },
  };
}

for (const [name, framework] of [
  ['express 5', express],
  ['express 4', express4],
] as const) {
  conformanceSuite(expressHarness(name, framework));
  longLivedSuite(expressHarness(name, framework));
  if (name === 'express 5') admissionSuite(expressHarness(name, framework));

  describe(`${name} middleware`, () => {
    const logs: LogLine[] = [];
    const logger = pino({ level: 'info', mixin: deadlineMixin() }, memoryDestination(logs));
    const app = framework();
    let server: Server;
    let url = '';

    beforeAll(async () => {
      app.use(pinoHttp({ logger, autoLogging: false }));
      app.use(
        deadline({
          serviceName: 'orders',
          defaultMs: 2_000,
          maxMs: 4_000,
          trust: (req) => req.headers['x-internal'] === '1',
        }),
      );
      app.get('/plain', (req, res) => {
        req.log.info('loading the order');
        res.json({ budgetMs: req.deadline?.budget.budgetMs });
      });
      const reports = framework.Router();
      reports.use(deadline({ serviceName: 'orders', defaultMs: 300, maxMs: 500 }));
      reports.get('/', (req, res) =>
        res.json({ budgetMs: req.deadline?.budget.budgetMs, left: req.deadline?.remainingMs() }),
      );
      app.use('/reports', reports);
      const generous = framework.Router();
      generous.use(deadline({ serviceName: 'orders', defaultMs: 3_000, maxMs: 4_000 }));
      generous.get('/', (req, res) => res.json({ left: req.deadline?.remainingMs() }));
      app.use('/generous', generous);
      ({ server, url } = await listenApp(app));
    });
    afterAll(() => closeServer(server));

    it('is a named middleware', () => {
      expect(deadline().name).toBe('deadlineMiddleware');
      expect(deadlineErrors().name).toBe('deadlineErrorHandler');
      expect(deadlineErrors().length).toBe(4); // express recognises error middleware by arity
    });

    it('a router’s own middleware narrows the deadline to its SLA, never widens it', async () => {
      await expectRouteLimitsNarrow(url, { narrow: '/reports/', generous: '/generous/' });
    });

    it('writes its end line through pino-http’s req.log, and the mixin tags handler lines', async () => {
      const res = await request(`${url}/plain`, {
        headers: {
          traceparent: '00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01',
          'x-request-deadline': '900',
        },
      });
      expect(await res.body.json()).toEqual({ budgetMs: 900 });
      const line = logs.findLast((l) => l.msg === 'loading the order');
      expect(line).toMatchObject({ traceId: '4bf92f3577b34da6a3ce929d0e0e4736', hop: 'orders', budgetMs: 900 });
      expect(line?.req).toBeDefined(); // pino-http's own bindings are kept
      await new Promise((resolve) => setImmediate(resolve));
      const end = logs.findLast((l) => l.msg === 'deadline: ok');
      expect(end).toMatchObject({ path: '/plain', budgetMs: 900, traceId: '4bf92f3577b34da6a3ce929d0e0e4736' });
    });

    it('a router’s minMs refuses a budget below it; its lines name the full path', async () => {
      const app2 = framework();
      const lines: LogLine[] = [];
      app2.use(deadline({ serviceName: 'orders', logger: pino(memoryDestination(lines)) }));
      const strict = framework.Router();
      strict.use(deadline({ serviceName: 'orders', defaultMs: 1_000, minMs: 200 }));
      let ran = 0;
      strict.get('/x', (_req, res) => {
        ran++;
        res.json({});
      });
      app2.use('/strict', strict);
      const { url: url2, server: server2 } = await listenApp(app2);
      try {
        const res = await request(`${url2}/strict/x?token=secret`, { headers: { 'x-request-deadline': '50' } });
        expect(res.statusCode).toBe(504);
        await res.body.dump();
        expect(ran).toBe(0);
        await new Promise((resolve) => setImmediate(resolve));
        const line = lines.findLast((l) => typeof l.msg === 'string' && l.msg.startsWith('deadline:'));
        expect(line).toMatchObject({ path: '/strict/x', outcome: 'deadline_exceeded' });
      } finally {
        await closeServer(server2);
      }
    });

    it('a handler’s late deadline error after the 504 goes nowhere; a throwing trust is reported, not fatal', async () => {
      const app2 = framework();
      const lines: LogLine[] = [];
      const reached: unknown[] = [];
      let lateFailure: () => void = () => {};
      const failedLate = new Promise<void>((resolve) => {
        lateFailure = resolve;
      });
      app2.use(
        deadline({
          serviceName: 'orders',
          logger: pino(memoryDestination(lines)),
          trust: (req) => {
            if (req.headers['x-boom'] !== undefined) throw new Error('trust bug');
            return true;
          },
        }),
      );
      app2.get('/late', (req, _res, next) => {
        const signal = req.deadline?.context.signal as AbortSignal;
        const failLate = () => {
          setTimeout(() => {
            next(signal.reason); // what an aborted fetch would reject with
            lateFailure();
          }, 10);
        };
        // A loaded machine may get to the handler after its 50 ms: its signal is then aborted already.
        if (signal.aborted) failLate();
        else signal.addEventListener('abort', failLate, { once: true });
      });
      app2.get('/ok', (req, res) =>
        res.json({ budgetMs: req.deadline?.budget.budgetMs, trusted: req.deadline?.budget.trusted }),
      );
      app2.use(deadlineErrors());
      app2.use((error: unknown, _req: unknown, _res: unknown, next: (e?: unknown) => void) => {
        reached.push(error);
        next(error);
      });
      const { url: url2, server: server2 } = await listenApp(app2);
      try {
        const res = await request(`${url2}/late`, { headers: { 'x-request-deadline': '50' } });
        expect(res.statusCode).toBe(504);
        await res.body.dump();
        await failedLate;
        // next() has run; what it defers (express goes on in a later turn at most: setImmediate) has run after one
        // turn of the event loop.
        await new Promise((resolve) => setImmediate(resolve));
        expect(reached).toEqual([]);
        const ok = await request(`${url2}/ok`, { headers: { 'x-request-deadline': '70000', 'x-boom': '1' } });
        expect(await ok.body.json()).toEqual({ budgetMs: 15_000, trusted: false });
        expect(lines.some((l) => l.msg === 'deadline: the trust hook threw')).toBe(true);
      } finally {
        await closeServer(server2);
      }
    });

    it('a request’s end runs its listeners in the request’s context, before or after the answer', async () => {
      const app2 = framework();
      app2.use(deadline({ serviceName: 'orders' }));
      const inContext: boolean[] = [];
      // Answered first: Node's own 'end' listener joins the handler's.
      app2.get('/after', (req, res) => {
        const ctx = currentContext();
        res.json({ ok: true });
        req.on('end', () => inContext.push(ctx !== undefined && currentContext() === ctx));
      });
      // The handler's listener alone, the answer from inside it.
      app2.get('/before', (req, res) => {
        const ctx = currentContext();
        req.on('end', () => {
          inContext.push(ctx !== undefined && currentContext() === ctx);
          res.json({ ok: true });
        });
        req.resume();
      });
      app2.get('/plain', (_req, res) => res.json({ ok: true }));
      const { url: url2, server: server2 } = await listenApp(app2);
      try {
        for (const path of ['/plain', '/after', '/before', '/plain', '/after', '/before']) {
          const res = await request(`${url2}${path}`);
          expect(await res.body.json()).toEqual({ ok: true });
        }
        // The `end` of an answered request may come a moment after its answer: waited for, not guessed.
        await expect.poll(() => inContext.length).toBe(4);
        expect(inContext).toEqual([true, true, true, true]);
      } finally {
        await closeServer(server2);
      }
    });

    it('req.deadline lasts until the request and its response have both closed, their close listeners included (Node 20, 22: then let go)', async () => {
      const app2 = framework();
      app2.use(deadline({ serviceName: 'orders' }));
      const seen: unknown[] = [];
      let bothClosed: (req: { deadline?: unknown }) => void = () => {};
      const after = new Promise<unknown>((resolve) => {
        bothClosed = (req) => setImmediate(() => resolve(req.deadline));
      });
      app2.get('/', (req, res) => {
        let closes = 0;
        const onClose = (which: string) => () => {
          seen.push(`${which}: ${req.deadline?.outcome}`);
          if (++closes === 2) bothClosed(req);
        };
        req.on('close', onClose('request'));
        res.on('close', onClose('response'));
        res.json({ ok: true });
      });
      const { url: url2, server: server2 } = await listenApp(app2);
      try {
        await (await request(url2)).body.dump();
        // After both, on Node 20 and 22: the state is let go (a WeakMap entry kept until a collection cost ~8k
        // instructions a request). From Node 24 the state is a property of the request, and goes with it.
        const left = await after;
        if (Number(process.versions.node.split('.')[0]) >= 24) expect(left).toMatchObject({ outcome: 'ok' });
        else expect(left).toBeUndefined();
        expect([...seen].sort()).toEqual(['request: ok', 'response: ok']);
      } finally {
        await closeServer(server2);
      }
    });

    it('middleware that pauses before it: each request’s own headers and socket are read, another having started since', async () => {
      const app2 = framework();
      // Holds every request until two have arrived: the first then reaches deadline() after the second started.
      let held: (() => void)[] | undefined = [];
      let bothHeld: () => void = () => {};
      const holding = new Promise<void>((resolve) => {
        bothHeld = resolve;
      });
      app2.use((_req, _res, next) => {
        if (held === undefined) return next();
        held.push(next);
        if (held.length === 2) bothHeld();
      });
      app2.use(deadline({ serviceName: 'orders' }));
      let waiting: () => void = () => {};
      const handlerWaits = new Promise<void>((resolve) => {
        waiting = resolve;
      });
      let waitedWith: number | undefined;
      const stopped = new Promise<unknown>((resolve) => {
        app2.get('/wait', (req) => {
          waitedWith = req.deadline?.budget.budgetMs;
          const signal = req.deadline?.context.signal as AbortSignal;
          signal.addEventListener('abort', () => resolve(signal.reason));
          waiting();
        });
      });
      app2.get('/budget', (req, res) => res.json({ budgetMs: req.deadline?.budget.budgetMs }));
      const { url: url2, server: server2 } = await listenApp(app2);
      try {
        const leaving = new AbortController();
        const first = request(`${url2}/wait`, { headers: { 'x-request-deadline': '4000' }, signal: leaving.signal });
        first.catch(() => {}); // aborted below
        const second = request(`${url2}/budget`, { headers: { 'x-request-deadline': '2500' } });
        await holding;
        const release = held ?? [];
        held = undefined;
        for (const next of release) next();
        expect(await (await second).body.json()).toEqual({ budgetMs: 2500 });
        await handlerWaits;
        expect(waitedWith).toBe(4000);
        // No middleware pauses any more: the request just started is the one read.
        const third = await request(`${url2}/budget`, { headers: { 'x-request-deadline': '1500' } });
        expect(await third.body.json()).toEqual({ budgetMs: 1500 });
        // The first request's own socket: its client leaving cancels its context.
        leaving.abort();
        expect(await stopped).toMatchObject({ reason: 'client-disconnected' });
      } finally {
        await closeServer(server2);
      }
    });

    it('two apps in turn, emit wrapped after ours or per request, a plain node:http request: each is told apart', async () => {
      const apps = [framework(), framework()];
      for (const [at, each] of apps.entries()) {
        // Some requests get an `emit` of their own before deadline() (someone wrapping it per request).
        each.use((req, _res, next) => {
          if (req.headers['x-own-emit'] !== undefined) {
            const inherited = req.emit;
            req.emit = function ownEmit(this: typeof req, ...args: Parameters<typeof req.emit>) {
              return inherited.apply(this, args);
            };
          }
          next();
        });
        each.use(deadline({ serviceName: `app${at}` }));
        // The request's body events reach the handler in the request's context (the wrapped emit).
        each.post('/', (req, res) => {
          const ctx = currentContext();
          let chunks = 0;
          let inContext = true;
          req.on('data', () => {
            chunks++;
            inContext &&= ctx !== undefined && currentContext() === ctx;
          });
          // No chunk seen would prove nothing about the wrapped emit: it counts as out of context.
          req.on('end', () =>
            res.json({ app: at, budgetMs: req.deadline?.budget.budgetMs, inContext: chunks > 0 && inContext }),
          );
        });
      }
      // A `log` the app's requests inherit is not a request's own (pino-http's): end lines never go to it, on any Node.
      let inheritedLines = 0;
      const inherited = () => {
        inheritedLines++;
      };
      Object.assign(apps[0]?.request as object, { log: { info: inherited, warn: inherited, debug: inherited } });
      const servers = await Promise.all(apps.map((app) => listenApp(app)));
      const shared = framework.request as unknown as { emit: (...args: unknown[]) => boolean };
      const ours = shared.emit;
      let wrapperCalls = 0;
      const post = (at: number, headers: Record<string, string> = {}) =>
        request(`${servers[at]?.url}/`, {
          method: 'POST',
          body: 'x'.repeat(10),
          headers: { 'x-request-deadline': '900', ...headers },
        });
      try {
        for (const at of [0, 1, 0, 1]) {
          expect(await (await post(at)).body.json()).toEqual({ app: at, budgetMs: 900, inContext: true });
        }
        // Someone else wraps express's shared request after us: its objects are still express's.
        shared.emit = function wrapped(this: unknown, ...args: unknown[]) {
          wrapperCalls++;
          return Reflect.apply(ours, this, args) as boolean;
        };
        for (const at of [1, 0]) {
          expect(await (await post(at)).body.json()).toEqual({ app: at, budgetMs: 900, inContext: true });
        }
        expect(wrapperCalls).toBeGreaterThan(0);
        for (const at of [0, 0, 1]) {
          const res = await post(at, { 'x-own-emit': '1' });
          expect(await res.body.json()).toEqual({ app: at, budgetMs: 900, inContext: true });
        }
        expect(inheritedLines).toBe(0);
      } finally {
        shared.emit = ours;
        await Promise.all(servers.map(({ server }) => closeServer(server)));
      }
      // A plain node:http request given to the middleware: not express's, so its own objects carry the deadline.
      const middleware = deadline({ serviceName: 'plain' });
      const plain = createServer((req, res) => {
        middleware(req, res, () => {
          const ctx = currentContext();
          req.on('data', () => {});
          req.on('end', () => {
            res.setHeader('content-type', 'application/json');
            res.end(
              JSON.stringify({
                own: Object.hasOwn(req, 'deadline'),
                inContext: ctx !== undefined && currentContext() === ctx,
              }),
            );
          });
        });
      });
      await new Promise<void>((resolve) => plain.listen(0, '127.0.0.1', resolve));
      try {
        const res = await request(`http://127.0.0.1:${(plain.address() as AddressInfo).port}/`, {
          method: 'POST',
          body: 'y',
        });
        expect(await res.body.json()).toEqual({ own: true, inContext: true });
      } finally {
        await closeServer(plain);
      }
    });

    it('without deadlineErrors(), express’s final handler still answers 504 with the header', async () => {
      const app2 = framework();
      app2.use(deadline({ serviceName: 'orders' }));
      app2.get('/', (_req, _res, next) => {
        next(new DeadlineExceededError({ phase: 'during-call', whose: 'downstream:inventory' }));
      });
      const { url: url2, server: server2 } = await listenApp(app2);
      try {
        const res = await request(url2);
        expect(res.statusCode).toBe(504);
        expect(res.headers['x-deadline-exceeded-by']).toBe('inventory');
        await res.body.dump();
      } finally {
        await closeServer(server2);
      }
    });
  });
}
