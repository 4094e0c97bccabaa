/**
 * The interceptor and the dispatcher on real sockets: what reaches the downstream (budget, trace, nothing outside
 * a context), the short-circuit (no connection at all), and the cut-off of every way a downstream can hang. Both
 * ways run every test: undici's `request()` hands them a handler of the older API, its retry interceptor one of
 * the newer; fetch's own comes through in fetch.test.ts.
 */
import {
  CancelledError,
  createContext,
  DeadlineExceededError,
  InvalidArgumentError,
  runWithDeadline,
  traceFrom,
} from '@deadline/core';
import { Agent, type Dispatcher, interceptors } from 'undici';
import { afterAll, describe, expect, it } from 'vitest';
import { DeadlineDispatcher, deadlineInterceptor, type HttpDeadlineOptions } from '../src/index.ts';
import { expectBudgetAndTrace } from './client-conformance.ts';
import {
  downstreamsPerTest,
  drip,
  echo,
  exceededBy,
  type rawDownstream,
  refusedUrl,
  resetMidBody,
  silent,
} from './servers.ts';

const agents: Dispatcher[] = [];
function agent(): Dispatcher {
  const base = new Agent({ keepAliveTimeout: 5_000 });
  agents.push(base);
  return base;
}
afterAll(async () => {
  await Promise.all(agents.map((a) => a.close()));
});

/** The two ways in: the interceptor composed on an Agent, and the dispatcher wrapping one. */
type Way = 'deadlineInterceptor' | 'DeadlineDispatcher';
const WAYS: Way[] = ['deadlineInterceptor', 'DeadlineDispatcher'];

/** `base` under the deadline the chosen way, with `after` composed outside it (a retry resends through it). */
function underDeadline(
  way: Way,
  base: Dispatcher,
  options?: HttpDeadlineOptions,
  ...after: Dispatcher.DispatcherComposeInterceptor[]
): Dispatcher {
  const wrapped =
    way === 'deadlineInterceptor'
      ? base.compose(deadlineInterceptor(options))
      : new DeadlineDispatcher({ ...options, dispatcher: base });
  return after.length === 0 ? wrapped : wrapped.compose(...after);
}

/** A downstream on loopback, closed after each test. */
const downstream = downstreamsPerTest();

async function get(dispatcher: Dispatcher, url: string, headers?: Record<string, string> | string[]) {
  const { origin, pathname, search } = new URL(url);
  const res = await dispatcher.request({ origin, path: pathname + search, method: 'GET', headers: headers ?? {} });
  return { statusCode: res.statusCode, body: await res.body.text() };
}

describe.each(WAYS)('%s', (way) => {
  const deadlined = (options?: HttpDeadlineOptions, ...after: Dispatcher.DispatcherComposeInterceptor[]) =>
    underDeadline(way, agent(), options, ...after);

  describe('what the downstream receives', () => {
    it('outside any context: nothing added, nothing changed', async () => {
      const server = await downstream(echo);
      const res = await get(deadlined(), `${server.url}/x?token=secret`);
      expect(res.statusCode).toBe(200);
      const seen = JSON.parse(res.body);
      expect(seen['x-request-deadline']).toBeUndefined();
      expect(seen.traceparent).toBeUndefined();
    });

    it('inside a deadline: the remaining budget (whole ms, ≥ 1) and the trace; a caller-set budget is replaced', async () => {
      const server = await downstream(echo);
      const dispatcher = deadlined({ dialects: ['grpc', 'connect'] });
      const trace = traceFrom('00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01', 'vendor=x');
      const started = performance.now();
      const ctx = createContext({ root: true, deadline: 1_000, trace });
      const res = await ctx.run(() =>
        get(dispatcher, server.url, { 'X-Request-Deadline': '99999', 'grpc-timeout': '99S', accept: 'text/plain' }),
      );
      ctx.end();
      const seen = JSON.parse(res.body);
      expectBudgetAndTrace(seen, started);
    });

    it('replaces the budget in every header shape undici accepts (flat array, pairs)', async () => {
      const server = await downstream(echo);
      const dispatcher = deadlined();
      const flat = await runWithDeadline(1_000, () =>
        get(dispatcher, server.url, ['x-request-deadline', '99999', 'x-other', 'kept']),
      );
      expect(JSON.parse(flat.body)['x-request-deadline']).toMatch(/^\d+$/);
      expect(Number(JSON.parse(flat.body)['x-request-deadline'])).toBeLessThanOrEqual(1_000);
      expect(JSON.parse(flat.body)['x-other']).toBe('kept');
    });

    it('a margin is kept back from the budget sent', async () => {
      const server = await downstream(echo);
      const dispatcher = deadlined({ marginMs: 300 });
      const res = await runWithDeadline(1_000, () => get(dispatcher, server.url));
      expect(Number(JSON.parse(res.body)['x-request-deadline'])).toBeLessThanOrEqual(700);
    });

    it('two calls one after the other carry decreasing budgets', async () => {
      const server = await downstream(echo);
      const dispatcher = deadlined();
      const budgets = await runWithDeadline(2_000, async () => {
        const first = JSON.parse((await get(dispatcher, server.url)).body)['x-request-deadline'];
        // Spend a little of the budget between the calls, waiting on a timer (the point is time passing).
        await new Promise((resolve) => setTimeout(resolve, 30));
        const second = JSON.parse((await get(dispatcher, server.url)).body)['x-request-deadline'];
        return [Number(first), Number(second)];
      });
      expect(budgets[1]).toBeLessThan(budgets[0] as number);
    });

    it('every retry attempt gets a fresh budget (undici retry interceptor outside ours)', async () => {
      let attempts = 0;
      const server = await downstream((socket, headers) => {
        attempts++;
        if (attempts === 1) {
          socket.write('HTTP/1.1 503 Service Unavailable\r\ncontent-length: 0\r\nretry-after: 0\r\n\r\n');
          return;
        }
        echo(socket, headers, '');
      });
      const dispatcher = deadlined(
        undefined,
        interceptors.retry({ maxRetries: 1, minTimeout: 50, statusCodes: [503], methods: ['GET'] }),
      );
      const res = await runWithDeadline(2_000, () => get(dispatcher, server.url));
      expect(res.statusCode).toBe(200);
      expect(server.requests).toHaveLength(2);
      const [first, second] = server.requests.map((h) => Number(h['x-request-deadline']));
      expect(second).toBeLessThan(first as number);
    });

    it("a retry sent from undici's callbacks carries its own request's budget, not the pooled socket's", async () => {
      let attempts = 0;
      const server = await downstream((socket, headers) => {
        attempts++;
        if (attempts === 2) {
          socket.write('HTTP/1.1 503 Service Unavailable\r\ncontent-length: 0\r\nretry-after: 0\r\n\r\n');
          return;
        }
        echo(socket, headers, '');
      });
      const dispatcher = deadlined(
        undefined,
        interceptors.retry({ maxRetries: 1, minTimeout: 50, statusCodes: [503], methods: ['GET'] }),
      );
      // The pooled connection is opened inside a request with a long budget…
      await runWithDeadline(60_000, () => get(dispatcher, server.url));
      // …and reused by one with a short budget, whose retry is dispatched from that socket's callbacks.
      const res = await runWithDeadline(2_000, () => get(dispatcher, server.url));
      expect(res.statusCode).toBe(200);
      const budgets = server.requests.map((h) => Number(h['x-request-deadline']));
      expect(budgets[2]).toBeLessThanOrEqual(2_000);
    });
  });

  describe('no time left: the call is not made', () => {
    it('fails with DeadlineExceededError (before-call) and opens no connection', async () => {
      const server = await downstream(echo);
      const dispatcher = deadlined({ minMs: 50 });
      const ctx = createContext({ root: true, deadline: 20, hop: 'gateway' });
      const error = await ctx.run(() => get(dispatcher, `${server.url}/stock?id=1`)).catch((e: unknown) => e);
      ctx.end();
      expect(error).toBeInstanceOf(DeadlineExceededError);
      expect(error).toMatchObject({ phase: 'before-call', whose: 'local', hop: 'gateway' });
      expect((error as DeadlineExceededError).target).toBe(`GET ${server.url}/stock`);
      // A call made afterwards is this server's first connection: the refused one never connected.
      await get(dispatcher, server.url);
      expect(server.connections).toBe(1);
      expect(server.requests).toHaveLength(1);
    });

    it('a cancelled context (client gone) refuses with CancelledError', async () => {
      const server = await downstream(echo);
      const dispatcher = deadlined();
      const ctx = createContext({ root: true, deadline: 5_000 });
      ctx.cancel(new CancelledError('client left', { reason: 'client-disconnected' }));
      const error = await ctx.run(() => get(dispatcher, server.url)).catch((e: unknown) => e);
      expect(error).toBeInstanceOf(CancelledError);
      expect((error as CancelledError).reason).toBe('client-disconnected');
      expect(server.connections).toBe(0);
    });
  });

  describe('cut off at the deadline, socket closed, however the downstream misbehaves', () => {
    const BUDGET = 300;
    async function cutOff(behaviour: Parameters<typeof rawDownstream>[0]) {
      const server = await downstream(behaviour);
      const dispatcher = deadlined();
      const closed = server.nextClose();
      const started = performance.now();
      const error = await runWithDeadline(BUDGET, () => get(dispatcher, server.url)).catch((e: unknown) => e);
      const elapsed = performance.now() - started;
      await closed; // the downstream saw the socket close
      return { error, elapsed };
    }

    it.each([
      ['accepts and never answers', silent],
      ['headers never come (slow headers)', silent],
      ['drips one byte every 100 ms (each read is quick, the whole is not)', drip(100)],
    ])('%s', async (_name, behaviour) => {
      const { error, elapsed } = await cutOff(behaviour);
      expect(error).toBeInstanceOf(DeadlineExceededError);
      expect(error).toMatchObject({ phase: 'during-call', whose: 'local' });
      expect(elapsed).toBeGreaterThanOrEqual(BUDGET - 5);
      expect(elapsed).toBeLessThan(BUDGET + 1_500);
    });

    it('the margin cuts the call before the request deadline', async () => {
      const server = await downstream(silent);
      // The call gets 2 s less a margin of 1.5 s: it is cut near 500 ms, leaving 1.5 s before the request's own
      // deadline for whatever a loaded machine adds.
      const dispatcher = deadlined({ marginMs: 1_500 });
      const started = performance.now();
      const error = await runWithDeadline(2_000, () => get(dispatcher, server.url)).catch((e: unknown) => e);
      const elapsed = performance.now() - started;
      expect(error).toBeInstanceOf(DeadlineExceededError);
      expect((error as DeadlineExceededError).budgetMs).toBeLessThanOrEqual(500);
      expect(elapsed).toBeGreaterThanOrEqual(490);
      expect(elapsed).toBeLessThan(2_000);
    });

    it('a body being read when the deadline passes is cut too', async () => {
      const server = await downstream(drip(50));
      const dispatcher = deadlined();
      const closed = server.nextClose();
      const error = await runWithDeadline(300, async () => {
        const { origin } = new URL(server.url);
        const res = await dispatcher.request({ origin, path: '/', method: 'GET' });
        expect(res.statusCode).toBe(200);
        return res.body.text();
      }).catch((e: unknown) => e);
      await closed;
      expect(error).toBeInstanceOf(DeadlineExceededError);
    });

    it('a request still queued for a connection fails at its deadline and is never sent', async () => {
      const server = await downstream(silent);
      const base = new Agent({ connections: 1, pipelining: 1 }); // closed below
      const dispatcher = underDeadline(way, base);
      // The only connection is taken by a request that hangs…
      const holder = createContext({ root: true, deadline: 60_000 });
      const first = holder.run(() => get(dispatcher, server.url)).catch((e: unknown) => e);
      await server.arrived();
      // …so this one waits in undici's queue when its deadline passes.
      const started = performance.now();
      const error = await runWithDeadline(200, () => get(dispatcher, server.url)).catch((e: unknown) => e);
      expect(error).toBeInstanceOf(DeadlineExceededError);
      expect(performance.now() - started).toBeLessThan(1_500);
      // Free the connection: undici hands it the queued request, which is aborted before a byte is written.
      holder.cancel('done');
      await first;
      await base.close();
      // A probe sent after everything settled is the server's second request: the queued one never arrived.
      const probe = agent();
      const probed = get(probe, server.url, { 'x-probe': '1' }).catch(() => undefined);
      expect((await server.arrived(2))['x-probe']).toBe('1');
      await server.close();
      await probed;
    });

    it('connection refused fails at once with the connection error', async () => {
      const url = await refusedUrl();
      const error = await runWithDeadline(2_000, () => get(deadlined(), url)).catch((e: unknown) => e);
      expect((error as NodeJS.ErrnoException).code).toBe('ECONNREFUSED');
    });

    it('a reset mid-body fails with the socket error, before the deadline', async () => {
      const server = await downstream(resetMidBody);
      const started = performance.now();
      const error = await runWithDeadline(5_000, () => get(deadlined(), server.url)).catch((e: unknown) => e);
      expect(error).toBeInstanceOf(Error);
      expect(error).not.toBeInstanceOf(DeadlineExceededError);
      expect(performance.now() - started).toBeLessThan(4_000);
    });

    it('cancelling the context (the client left) aborts the call in flight', async () => {
      const server = await downstream(silent);
      const dispatcher = deadlined();
      const ctx = createContext({ root: true, deadline: 10_000 });
      const closed = server.nextClose();
      const pending = ctx.run(() => get(dispatcher, server.url)).catch((e: unknown) => e);
      await server.arrived();
      ctx.cancel(new CancelledError('client left', { reason: 'client-disconnected' }));
      const error = await pending;
      await closed;
      expect(error).toBeInstanceOf(CancelledError);
      expect((error as CancelledError).reason).toBe('client-disconnected');
    });

    it('maxMs bounds a call outside any context', async () => {
      const server = await downstream(silent);
      const error = await get(deadlined({ maxMs: 200 }), server.url).catch((e: unknown) => e);
      expect(error).toBeInstanceOf(DeadlineExceededError);
    });

    it('defaultMs gives calls outside a context a budget, sent on the wire', async () => {
      const server = await downstream(echo);
      const res = await get(deadlined({ defaultMs: 800 }), server.url);
      expect(JSON.parse(res.body)['x-request-deadline']).toBe('800');
    });
  });

  describe("a downstream's own deadline", () => {
    it('a 504 naming the hop becomes DeadlineExceededError whose downstream:<hop>', async () => {
      const server = await downstream(exceededBy('inventory'));
      const error = await runWithDeadline(2_000, () => get(deadlined(), server.url)).catch((e: unknown) => e);
      expect(error).toBeInstanceOf(DeadlineExceededError);
      expect(error).toMatchObject({ whose: 'downstream:inventory', hop: 'inventory', phase: 'during-call' });
      expect((error as DeadlineExceededError).headers).toEqual({ 'x-deadline-exceeded-by': 'inventory' });
    });

    it('can be turned off: the 504 is returned as a response', async () => {
      const server = await downstream(exceededBy('inventory'));
      const res = await runWithDeadline(2_000, () => get(deadlined({ downstreamErrors: false }), server.url));
      expect(res.statusCode).toBe(504);
    });

    it('a 504 without a valid hop name stays a response', async () => {
      const server = await downstream(exceededBy('bad\u00e9name'));
      const res = await runWithDeadline(2_000, () => get(deadlined(), server.url));
      expect(res.statusCode).toBe(504);
    });
  });

  describe('options', () => {
    it.each([
      [{ marginMs: -1 }, 'marginMs'],
      [{ maxMs: 0 }, 'maxMs'],
      [{ defaultMs: Number.NaN }, 'defaultMs'],
      [{ dialects: ['smoke'] }, 'dialects'],
      [{ downstreamErrors: 'yes' }, 'downstreamErrors'],
      [{ target: 'x' }, 'target'],
    ])('%o is refused, naming %s', (options, name) => {
      expect(() => deadlined(options as never)).toThrow(InvalidArgumentError);
      expect(() => deadlined(options as never)).toThrow(name);
    });

    it('target names the call in errors', async () => {
      const dispatcher = deadlined({ target: ({ method }) => `${method} inventory` });
      const ctx = createContext({ root: true, deadline: 0.5 });
      const error = await ctx.run(() => get(dispatcher, 'http://127.0.0.1:9/')).catch((e: unknown) => e);
      expect((error as DeadlineExceededError).target).toBe('GET inventory');
    });
  });
});
