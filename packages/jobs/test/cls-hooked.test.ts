/**
 * The cls-hooked bridge on real express and fastify servers (loopback, real HTTP) with a real cls-hooked
 * namespace: inside the handler, across a timer, a promise chain and a real socket round trip, the namespace
 * shows the request's own deadline context, concurrent requests do not see each other's, nothing shows outside
 * a request, and a body parsed after the hook ran does not lose it. Also the measured limits: hook order, a
 * router that narrows the deadline, callbacks on the request stream, background tasks.
 */
import diagnostics from 'node:diagnostics_channel';
import { once } from 'node:events';
import http from 'node:http';
import type { AddressInfo } from 'node:net';
import {
  currentContext,
  Deadline,
  DeadlineExceededError,
  InvalidArgumentError,
  runWithContext,
  runWithDeadline,
  traceFrom,
} from '@deadline/core';
import { deadline } from '@deadline/express';
import fastifyDeadline from '@deadline/fastify';
import { createNamespace } from 'cls-hooked';
import express from 'express';
import Fastify from 'fastify';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import {
  CLS_KEYS,
  type ClsDeadlineValues,
  clsFastifyHook,
  clsMiddleware,
  runInClsNamespace,
} from '../src/cls-hooked.ts';
import { Background, type LoggerLike } from '../src/index.ts';

const ns = createNamespace<ClsDeadlineValues>('deadline-cls-test');

const TRACE_A = '4bf92f3577b34da6a3ce929d0e0e4736';
const TRACE_B = '0af7651916cd43dd8448eb211c80319c';
const traceparent = (traceId: string) => `00-${traceId}-00f067aa0ba902b7-01`;
const BUDGET_MS = 20_000;

/** What the namespace shows at one point of a handler. */
interface Look {
  traceId: string | undefined;
  /** The namespace's context is the one AsyncLocalStorage has (the truth). */
  sameContext: boolean;
  /** The namespace's Deadline is the context's own object (a reference, not a copy). */
  sameDeadline: boolean;
  remainingMs: number | undefined;
}

function look(): Look {
  const context = ns.get(CLS_KEYS.context);
  return {
    traceId: ns.get(CLS_KEYS.traceId),
    sameContext: context !== undefined && context === currentContext(),
    sameDeadline: ns.get(CLS_KEYS.deadline) === currentContext()?.deadline,
    remainingMs: ns.get(CLS_KEYS.deadline)?.remainingMs(),
  };
}

function deferred<T = void>() {
  let resolve!: (value: T) => void;
  const promise = new Promise<T>((r) => (resolve = r));
  return { promise, resolve };
}

/**
 * A downstream service for the handlers' socket round trip. It answers only once `expected` requests are
 * waiting, last first: concurrent handlers are then all suspended on a socket at once, and resume out of order.
 */
function downstream() {
  const waiting: http.ServerResponse[] = [];
  let expected = 1;
  const server = http.createServer((_req, res) => {
    waiting.push(res);
    if (waiting.length >= expected) for (const held of waiting.splice(0).reverse()) held.end('ok');
  });
  return {
    url: '',
    expect(count: number) {
      expected = count;
    },
    async start() {
      server.listen(0, '127.0.0.1');
      await once(server, 'listening');
      this.url = `http://127.0.0.1:${(server.address() as AddressInfo).port}/`;
    },
    close: () => new Promise((resolve) => server.close(resolve)),
  };
}

const echo = downstream();
beforeAll(() => echo.start());
afterAll(() => echo.close());

/** The handler's work: looks at the namespace before and after each kind of await. */
async function observe(): Promise<Look[]> {
  const looks = [look()];
  await new Promise((resolve) => setTimeout(resolve, 2));
  looks.push(look());
  await Promise.resolve(1)
    .then((n) => Promise.resolve(n + 1))
    .then((n) => new Promise((resolve) => setImmediate(resolve, n)));
  looks.push(look());
  const res = await fetch(echo.url);
  await res.text();
  looks.push(look());
  return looks;
}

function expectRequestValues(looks: Look[], traceId: string): void {
  expect(looks).toHaveLength(4);
  for (const seen of looks) {
    expect(seen).toMatchObject({ traceId, sameContext: true, sameDeadline: true });
    expect(seen.remainingMs).toBeGreaterThan(0);
    expect(seen.remainingMs).toBeLessThanOrEqual(BUDGET_MS);
  }
  const remaining = looks.map((seen) => seen.remainingMs as number);
  for (let i = 1; i < remaining.length; i++) expect(remaining[i]).toBeLessThanOrEqual(remaining[i - 1] as number);
  // A live Deadline: the 2 ms timer alone makes it count down.
  expect(remaining[3]).toBeLessThan(remaining[0] as number);
}

async function get(url: string, traceId: string): Promise<Look[]> {
  const res = await fetch(url, {
    headers: { traceparent: traceparent(traceId), 'x-request-deadline': String(BUDGET_MS) },
  });
  expect(res.status).toBe(200);
  return (await res.json()) as Look[];
}

/**
 * A JSON POST whose body arrives only after the server said it has the headers (and ran the hooks): the
 * framework parses it in a later socket event.
 */
async function slowPost(url: string, traceId: string, headersArrived: Promise<void>) {
  const req = http.request(url, {
    method: 'POST',
    headers: {
      'content-type': 'application/json',
      'transfer-encoding': 'chunked',
      traceparent: traceparent(traceId),
      'x-request-deadline': String(BUDGET_MS),
    },
  });
  req.write('{"order":');
  req.flushHeaders();
  await headersArrived;
  req.end('42}');
  const [res] = (await once(req, 'response')) as [http.IncomingMessage];
  let text = '';
  for await (const chunk of res) text += chunk;
  expect(res.statusCode).toBe(200);
  return JSON.parse(text) as { body: unknown; looks: Look[] };
}

/** What the routes tell the test, and what they wait for; each test sets its own. */
interface Signals {
  /** A POST ran the hooks; its body has not arrived. */
  headersArrived(): void;
  /** `/gate` is in its handler. */
  entered(): void;
  /** `/gate` answers when this resolves. */
  gate(): Promise<void>;
}

interface Harness {
  name: string;
  start(signals: Signals): Promise<{ url: string; close(): Promise<unknown> }>;
}

const harnesses: Harness[] = [
  {
    name: 'express 5',
    async start(signals) {
      const app = express();
      app.use(deadline({ serviceName: 'orders' }));
      app.use(clsMiddleware(ns));
      app.post('/observe', (_req, _res, next) => {
        signals.headersArrived();
        next();
      });
      app.use(express.json());
      app.get('/observe', async (_req, res) => {
        res.json(await observe());
      });
      app.post('/observe', async (req, res) => {
        res.json({ body: req.body, looks: await observe() });
      });
      app.get('/gate', async (_req, res) => {
        signals.entered();
        await signals.gate();
        res.json([look()]);
      });
      const server = app.listen(0, '127.0.0.1');
      await once(server, 'listening');
      return {
        url: `http://127.0.0.1:${(server.address() as AddressInfo).port}`,
        close: () => new Promise((resolve) => server.close(resolve)),
      };
    },
  },
  {
    name: 'fastify 5',
    async start(signals) {
      const app = Fastify();
      await app.register(fastifyDeadline, { serviceName: 'orders' });
      app.addHook('onRequest', clsFastifyHook(ns));
      app.addHook('preParsing', (request, _reply, payload, done) => {
        if (request.method === 'POST') signals.headersArrived();
        done(null, payload);
      });
      app.get('/observe', () => observe());
      app.post('/observe', async (request) => ({ body: request.body, looks: await observe() }));
      app.get('/gate', async () => {
        signals.entered();
        await signals.gate();
        return [look()];
      });
      const url = await app.listen({ port: 0, host: '127.0.0.1' });
      return { url, close: () => app.close() };
    },
  },
];

describe.each(harnesses)('cls-hooked bridge on $name', (harness) => {
  let server: { url: string; close(): Promise<unknown> };
  let headers = deferred();
  let gate = deferred();
  let entered = deferred();
  beforeAll(async () => {
    server = await harness.start({
      headersArrived: () => headers.resolve(),
      entered: () => entered.resolve(),
      gate: () => gate.promise,
    });
  });
  afterAll(() => server.close());

  it('the handler sees the request’s trace id and live deadline after a timer, a promise chain and a socket', async () => {
    echo.expect(1);
    expectRequestValues(await get(`${server.url}/observe`, TRACE_A), TRACE_A);
  });

  it('two concurrent requests each see their own values, though they resume out of order', async () => {
    echo.expect(2);
    const [a, b] = await Promise.all([get(`${server.url}/observe`, TRACE_A), get(`${server.url}/observe`, TRACE_B)]);
    expectRequestValues(a, TRACE_A);
    expectRequestValues(b, TRACE_B);
  });

  it('keeps the values when the body is parsed in a later socket event', async () => {
    echo.expect(1);
    headers = deferred();
    const { body, looks } = await slowPost(`${server.url}/observe`, TRACE_B, headers.promise);
    expect(body).toEqual({ order: 42 });
    expectRequestValues(looks, TRACE_B);
  });

  it('shows nothing outside a request, while one is in flight and after it', async () => {
    gate = deferred();
    entered = deferred();
    const response = get(`${server.url}/gate`, TRACE_A);
    await entered.promise;
    // Callbacks scheduled from here run outside any request: the namespace has no context for them.
    const outside = await new Promise<unknown[]>((resolve) =>
      setImmediate(() => resolve([ns.active, ns.get(CLS_KEYS.context), ns.get(CLS_KEYS.traceId)])),
    );
    expect(outside).toEqual([null, undefined, undefined]);
    gate.resolve();
    const [inside] = await response;
    expect(inside).toMatchObject({ traceId: TRACE_A, sameContext: true });
    expect([ns.active, ns.get(CLS_KEYS.deadline)]).toEqual([null, undefined]);
  });

  it('agrees with AsyncLocalStorage in a pooled connection’s callbacks', async () => {
    echo.expect(1);
    const seen: boolean[] = [];
    const onHeaders = (message: unknown) => {
      const { request } = message as { request: { origin: string } };
      if (`${request.origin}/` === echo.url) seen.push(ns.get(CLS_KEYS.context) === currentContext());
    };
    diagnostics.subscribe('undici:request:headers', onHeaders);
    try {
      // The second request may reuse the first one's connection: its socket callbacks then run in the context of
      // the request that opened it, in both stores alike.
      await get(`${server.url}/observe`, TRACE_A);
      await get(`${server.url}/observe`, TRACE_B);
    } finally {
      diagnostics.unsubscribe('undici:request:headers', onHeaders);
    }
    expect(seen).toEqual([true, true]);
  });
});

/** Collects process warnings with the bridge's code until the test ends. */
function bridgeWarnings() {
  const warnings: Error[] = [];
  const onWarning = (warning: Error & { code?: string }) => {
    if (warning.code === 'DEADLINE_CLS_OUTSIDE_CONTEXT') warnings.push(warning);
  };
  process.on('warning', onWarning);
  return { warnings, stop: () => process.off('warning', onWarning) };
}

describe('hook order', () => {
  it('fastify: a hook added after register() runs after the plugin’s, even without await', async () => {
    const app = Fastify();
    app.register(fastifyDeadline);
    app.addHook('onRequest', clsFastifyHook(ns));
    app.get('/', () => [look()]);
    const url = await app.listen({ port: 0, host: '127.0.0.1' });
    try {
      const [seen] = await get(url, TRACE_A);
      expect(seen).toMatchObject({ traceId: TRACE_A, sameContext: true });
    } finally {
      await app.close();
    }
  });

  it('fastify: a hook added before the plugin sets undefined keys, warns once, and the request still works', async () => {
    const { warnings, stop } = bridgeWarnings();
    const app = Fastify();
    app.addHook('onRequest', clsFastifyHook(ns));
    app.register(fastifyDeadline);
    app.get('/', () => [look()]);
    const url = await app.listen({ port: 0, host: '127.0.0.1' });
    try {
      const firstWarning = once(process, 'warning');
      const [seen] = await get(url, TRACE_A);
      await get(url, TRACE_B);
      await firstWarning;
      // JSON drops the undefined trace id and remaining time.
      expect(seen).toEqual({ sameContext: false, sameDeadline: false });
      expect(warnings).toHaveLength(1);
      expect(warnings[0]?.message).toMatch(/clsFastifyHook ran outside a deadline context/);
    } finally {
      stop();
      await app.close();
    }
  });

  it('fastify: a preHandler hook needs no ordering (onRequest hooks all run before it)', async () => {
    const app = Fastify();
    app.addHook('preHandler', clsFastifyHook(ns));
    app.register(fastifyDeadline);
    app.get('/', () => [look()]);
    const url = await app.listen({ port: 0, host: '127.0.0.1' });
    try {
      const [seen] = await get(url, TRACE_A);
      expect(seen).toMatchObject({ traceId: TRACE_A, sameContext: true });
    } finally {
      await app.close();
    }
  });

  it('express: middleware mounted before deadline() sets undefined keys and warns', async () => {
    const { warnings, stop } = bridgeWarnings();
    const app = express();
    app.use(clsMiddleware(ns));
    app.use(deadline());
    app.get('/', (_req, res) => {
      res.json([look()]);
    });
    const server = app.listen(0, '127.0.0.1');
    await once(server, 'listening');
    try {
      const firstWarning = once(process, 'warning');
      const [seen] = await get(`http://127.0.0.1:${(server.address() as AddressInfo).port}/`, TRACE_A);
      await firstWarning;
      expect(seen).toEqual({ sameContext: false, sameDeadline: false });
      expect(warnings).toHaveLength(1);
    } finally {
      stop();
      server.close();
    }
  });
});

/** The budget the namespace shows and the one the context has, to the ms. */
const budgets = () => ({
  namespace: Math.round(ns.get(CLS_KEYS.deadline)?.budgetMs ?? Number.NaN),
  context: Math.round(currentContext()?.deadline.budgetMs ?? Number.NaN),
});

describe('express: measured limits', () => {
  let url = '';
  let server: http.Server;
  let arrived = deferred();
  beforeAll(async () => {
    const app = express();
    app.use(deadline());
    app.use(clsMiddleware(ns));
    const narrowed = express.Router();
    narrowed.use(deadline({ maxMs: 1_000 }));
    narrowed.get('/stale', (_req, res) => {
      res.json(budgets());
    });
    narrowed.use(clsMiddleware(ns));
    narrowed.get('/again', (_req, res) => {
      res.json(budgets());
    });
    app.use('/narrowed', narrowed);
    app.post('/stream', (req, res) => {
      // Listeners on the request stream: its later chunks arrive in the socket's callbacks.
      if (req.query.bind !== undefined) ns.bindEmitter(req);
      const events: { namespace: string | undefined; context: string | undefined }[] = [];
      const record = () =>
        events.push({ namespace: ns.get(CLS_KEYS.traceId), context: currentContext()?.trace?.traceId });
      req.on('data', record);
      req.on('end', () => {
        record();
        res.json(events);
      });
      arrived.resolve();
    });
    server = app.listen(0, '127.0.0.1');
    await once(server, 'listening');
    url = `http://127.0.0.1:${(server.address() as AddressInfo).port}`;
  });
  afterAll(() => new Promise((resolve) => server.close(resolve)));

  it('a router that narrows the deadline needs its own clsMiddleware after its deadline()', async () => {
    const headers = { 'x-request-deadline': '5000' };
    expect(await (await fetch(`${url}/narrowed/stale`, { headers })).json()).toEqual({
      namespace: 5_000,
      context: 1_000,
    });
    expect(await (await fetch(`${url}/narrowed/again`, { headers })).json()).toEqual({
      namespace: 1_000,
      context: 1_000,
    });
  });

  async function streamed(path: string) {
    arrived = deferred();
    const req = http.request(`${url}${path}`, {
      method: 'POST',
      headers: { 'transfer-encoding': 'chunked', traceparent: traceparent(TRACE_A) },
    });
    req.flushHeaders();
    await arrived.promise;
    req.write('first');
    req.end('last');
    const [res] = (await once(req, 'response')) as [http.IncomingMessage];
    let text = '';
    for await (const chunk of res) text += chunk;
    return JSON.parse(text) as { namespace: string | undefined; context: string | undefined }[];
  }

  it('request stream events arrive outside the namespace (AsyncLocalStorage still has them) unless bound', async () => {
    const unbound = await streamed('/stream');
    expect(unbound.length).toBeGreaterThan(0);
    for (const event of unbound) expect(event).toEqual({ namespace: undefined, context: TRACE_A });
    const bound = await streamed('/stream?bind');
    for (const event of bound) expect(event).toEqual({ namespace: TRACE_A, context: TRACE_A });
  });
});

describe('runInClsNamespace', () => {
  it('checks its arguments, naming them', () => {
    expect(() => runInClsNamespace(undefined as never, () => 1)).toThrow(InvalidArgumentError);
    expect(() => runInClsNamespace({ run() {} } as never, () => 1)).toThrow(/namespace must be a cls-hooked namespace/);
    expect(() => runInClsNamespace(ns, 'no' as never)).toThrow(/fn must be a function/);
    expect(() => clsMiddleware({} as never)).toThrow(InvalidArgumentError);
    expect(() => clsFastifyHook(null as never)).toThrow(InvalidArgumentError);
  });

  it('returns what fn returns, and lets its errors through', async () => {
    expect(runInClsNamespace(ns, () => 7)).toBe(7);
    await expect(runInClsNamespace(ns, async () => 8)).resolves.toBe(8);
    expect(() =>
      runInClsNamespace(ns, () => {
        throw new RangeError('boom');
      }),
    ).toThrow(RangeError);
  });

  it('outside a deadline context runs fn with every key undefined, hiding an enclosing run’s values', () => {
    expect(currentContext()).toBeUndefined();
    const seen = ns.runAndReturn(() => {
      ns.set(CLS_KEYS.traceId, TRACE_A);
      ns.set(CLS_KEYS.deadline, Deadline.fromNow(1_000));
      return runInClsNamespace(ns, () => Object.values(CLS_KEYS).map((key) => ns.get(key)));
    });
    expect(seen).toEqual([undefined, undefined, undefined, undefined]);
  });

  it('holds the live deadline and a getter for its signal, which aborts when the deadline passes', async () => {
    await runWithDeadline(30, () =>
      runInClsNamespace(ns, async () => {
        const deadlineSeen = ns.get(CLS_KEYS.deadline) as Deadline;
        const first = deadlineSeen.remainingMs();
        const signal = ns.get(CLS_KEYS.getSignal)?.();
        expect(signal).toBe(currentContext()?.signal);
        // A namespace context opened inside (a managed Sequelize transaction runs in one) inherits the keys.
        expect(ns.runAndReturn(() => ns.get(CLS_KEYS.deadline))).toBe(deadlineSeen);
        await once(signal as AbortSignal, 'abort');
        expect(signal?.reason).toBeInstanceOf(DeadlineExceededError);
        expect(deadlineSeen.remainingMs()).toBe(0);
        expect(first).toBeGreaterThan(0);
      }),
    );
  });

  it('shows a background task its own context, where cls-hooked alone would carry the request’s', async () => {
    const quiet: LoggerLike = { info() {}, warn() {}, error() {} };
    const tasks = new Background({ logger: quiet });
    const seen: Record<string, unknown> = {};
    const task = (name: string) => () => {
      const context = ns.get(CLS_KEYS.context);
      seen[name] = {
        isCurrent: context === currentContext(),
        stopped: context?.stopReason?.name,
        budgetMs: ns.get(CLS_KEYS.deadline)?.budgetMs,
        traceId: ns.get(CLS_KEYS.traceId),
      };
    };
    // The request: it has ended by the time its tasks start.
    runWithContext({ deadline: 5_000, trace: traceFrom(traceparent(TRACE_A)) }, () =>
      runInClsNamespace(ns, () => {
        tasks.run('plain', task('plain'));
        tasks.run('bridged', () => runInClsNamespace(ns, task('bridged')));
      }),
    );
    expect((await tasks.drain({ timeoutMs: 10_000 })).completed).toBe(2);
    expect(seen).toEqual({
      plain: { isCurrent: false, stopped: 'CancelledError', budgetMs: 5_000, traceId: TRACE_A },
      bridged: { isCurrent: true, stopped: undefined, budgetMs: Number.POSITIVE_INFINITY, traceId: TRACE_A },
    });
  });
});
