/**
 * `deadlineGot` on real sockets: what reaches the downstream, no connection without time left, the cut-off
 * (socket closed) with the typed error, the caller's own signal, a downstream's 504, got's own retries.
 */
import http from 'node:http';
import {
  CancelledError,
  createContext,
  DeadlineExceededError,
  InvalidArgumentError,
  runWithDeadline,
  traceFrom,
} from '@deadline/core';
import got, { type Got, type RequestError } from 'got';
import { describe, expect, it } from 'vitest';
import { watchingTheLoop } from '../../server/test/loop-lateness.ts';
import { deadlineGot } from '../src/got.ts';
import { calls } from './calls.ts';
import { type Downstream, downstreamsPerTest, echo, exceededBy, leftAfter, silent } from './servers.ts';

/** A downstream on loopback, closed after each test. */
const downstream = downstreamsPerTest();

/** The success handler of a request that must fail. */
function unexpected(): never {
  throw new Error('the request succeeded');
}

function client(options?: Parameters<typeof deadlineGot>[0]): Got {
  return got.extend(deadlineGot(options));
}

const json = (instance: Got, url: string, headers?: Record<string, string>) =>
  instance.get(url, headers === undefined ? {} : { headers }).json<Record<string, string>>();

/** A retry after `delayMs` on 503s and resets, instead of got's default backoff of a second or more. */
const quickRetry = (delayMs: number) => ({
  retry: { limit: 1, calculateDelay: ({ computedValue }: { computedValue: number }) => (computedValue ? delayMs : 0) },
});

describe('what the downstream receives', () => {
  it('outside any context: nothing added', async () => {
    const server = await downstream(echo);
    const seen = await json(client(), `${server.url}/x?token=secret`);
    expect(seen['x-request-deadline']).toBeUndefined();
    expect(seen.traceparent).toBeUndefined();
  });

  it('inside a deadline: the budget and the trace; a caller-set budget is replaced, other headers kept', async () => {
    const server = await downstream(echo);
    const instance = client({ dialects: ['connect'] });
    const trace = traceFrom('00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01');
    const started = performance.now();
    const ctx = createContext({ root: true, deadline: 1_000, trace });
    const seen = await ctx.run(() => json(instance, server.url, { 'X-Request-Deadline': '99999', 'x-a': '1' }));
    ctx.end();
    const budget = Number(seen['x-request-deadline']);
    expect(Number.isInteger(budget)).toBe(true);
    expect(budget).toBeGreaterThanOrEqual(leftAfter(1_000, started));
    expect(budget).toBeLessThanOrEqual(1_000);
    expect(Number(seen['connect-timeout-ms'])).toBe(budget);
    expect(seen.traceparent).toMatch(/^00-0af7651916cd43dd8448eb211c80319c-[0-9a-f]{16}-01$/);
    expect(seen['x-a']).toBe('1');
  });

  it("a retry by got's own retry carries a fresh, smaller budget", async () => {
    const server: Downstream = await downstream((socket, headers) => {
      if (server.requests.length === 1) {
        socket.write('HTTP/1.1 503 Service Unavailable\r\ncontent-length: 0\r\n\r\n');
        return;
      }
      echo(socket, headers, '');
    });
    const instance = client().extend(quickRetry(20));
    const seen = await runWithDeadline(5_000, () => json(instance, server.url));
    expect(seen['x-request-deadline']).toBeDefined();
    const [first, second] = server.requests.map((h) => Number(h['x-request-deadline']));
    expect(second).toBeLessThan(first as number);
  });

  it("a retry of a request queued behind another's socket carries its own request's budget", async () => {
    // One socket for two requests: B waits for the socket A holds, and is sent from A's callbacks. B is reset,
    // and got's retry of B is scheduled from that socket's callbacks.
    let releaseA: (() => void) | undefined;
    const once = (release: (() => void) | undefined) => {
      releaseA = undefined;
      release?.();
    };
    const server: Downstream = await downstream((socket, headers) => {
      const n = server.requests.length;
      if (n === 1) releaseA = () => echo(socket, headers, '');
      else if (n === 2) socket.destroy();
      else echo(socket, headers, '');
    });
    const agent = new http.Agent({ keepAlive: true, maxSockets: 1 });
    const instance = client().extend(quickRetry(10), { agent: { http: agent } });
    try {
      const a = runWithDeadline(60_000, () => json(instance, server.url));
      await server.arrived(1);
      const b = runWithDeadline(2_000, () =>
        // Answer A once B is queued behind it (B's request function has run when the answer arrives).
        json(instance.extend({ hooks: { beforeRequest: [() => once(releaseA)] } }), server.url),
      );
      await a;
      const seen = await b;
      expect(server.requests).toHaveLength(3);
      expect(Number(server.requests[1]?.['x-request-deadline'])).toBeLessThanOrEqual(2_000);
      expect(Number(seen['x-request-deadline'])).toBeLessThanOrEqual(2_000);
    } finally {
      agent.destroy();
    }
  });
});

describe('each attempt is one call, ended with its outcome', () => {
  it('a redirect, then a 503 retried, then the answer: three calls, each ended', async () => {
    const server: Downstream = await downstream((socket, headers) => {
      const n = server.requests.length;
      if (n === 1) socket.write('HTTP/1.1 302 Found\r\nlocation: /next\r\ncontent-length: 0\r\n\r\n');
      else if (n === 2) socket.write('HTTP/1.1 503 Service Unavailable\r\ncontent-length: 0\r\n\r\n');
      else echo(socket, headers, '');
    });
    const instance = client().extend(quickRetry(10));
    const events = await calls(() => runWithDeadline(5_000, () => json(instance, server.url)));
    expect(events).toEqual(['start', 'end ok 302', 'start', 'end error 503', 'start', 'end ok 200']);
    const budgets = server.requests.map((h) => Number(h['x-request-deadline']));
    expect(budgets.every((b) => b > 0 && b <= 5_000)).toBe(true);
  });

  it('a reset retried; a cut-off; a downstream 504', async () => {
    const reset: Downstream = await downstream((socket, headers) => {
      if (reset.requests.length === 1) socket.destroy();
      else echo(socket, headers, '');
    });
    const instance = client().extend(quickRetry(10));
    expect(await calls(() => runWithDeadline(5_000, () => json(instance, reset.url)))).toEqual([
      'start',
      'end error -',
      'start',
      'end ok 200',
    ]);
    const quiet = await downstream(silent);
    expect(await calls(() => runWithDeadline(200, () => instance.get(quiet.url)))).toEqual([
      'start',
      'end deadline_exceeded -',
    ]);
    const tired = await downstream(exceededBy('inventory'));
    expect(await calls(() => runWithDeadline(5_000, () => instance.get(tired.url)))).toEqual([
      'start',
      'end deadline_exceeded 504',
    ]);
  });
});

describe('no time left: the request is not made', () => {
  it('fails with DeadlineExceededError (before-call) and opens no connection', async () => {
    const server = await downstream(echo);
    const instance = client({ minMs: 50 });
    const ctx = createContext({ root: true, deadline: 20, hop: 'gateway' });
    const error = await ctx.run(() => instance.get(`${server.url}/stock?id=1`)).catch((e: unknown) => e);
    ctx.end();
    expect(error).toBeInstanceOf(DeadlineExceededError);
    expect(error).toMatchObject({ phase: 'before-call', hop: 'gateway' });
    expect((error as DeadlineExceededError).target).toBe(`GET ${server.url}/stock`);
    expect(server.connections).toBe(0);
  });

  it('a cancelled context refuses with CancelledError', async () => {
    const server = await downstream(echo);
    const ctx = createContext({ root: true, deadline: 5_000 });
    ctx.cancel(new CancelledError('client left', { reason: 'client-disconnected' }));
    const error = await ctx.run(() => client().get(server.url)).catch((e: unknown) => e);
    expect(error).toBeInstanceOf(CancelledError);
    expect(server.connections).toBe(0);
  });

  it('bad options throw at setup, naming the option', () => {
    expect(() => deadlineGot({ maxMs: 0 })).toThrow(InvalidArgumentError);
    expect(() => deadlineGot({ maxMs: 0 })).toThrow('maxMs');
  });
});

describe('cut off at the deadline', () => {
  const BUDGET = 300;

  it('a silent downstream: DeadlineExceededError (during-call), the socket closed, no retry', async () => {
    const server = await downstream(silent);
    const closed = server.nextClose();
    const started = performance.now();
    // got retries GETs twice by default: a call cut by its deadline must not be.
    const error = await runWithDeadline(BUDGET, () => client().get(server.url)).catch((e: unknown) => e);
    const elapsed = performance.now() - started;
    await closed;
    expect(error).toBeInstanceOf(DeadlineExceededError);
    expect(error).toMatchObject({ phase: 'during-call', whose: 'local' });
    expect(elapsed).toBeGreaterThanOrEqual(BUDGET - 5);
    expect(elapsed).toBeLessThan(BUDGET + 1_500);
    expect(server.connections).toBe(1);
  });

  it("the caller's own signal still aborts (got's AbortError)", async () => {
    const server = await downstream(silent);
    const closed = server.nextClose();
    const caller = new AbortController();
    const pending = runWithDeadline(10_000, () => client().get(server.url, { signal: caller.signal })).then(
      unexpected,
      (e: RequestError) => e,
    );
    await server.arrived();
    caller.abort();
    const error = await pending;
    await closed;
    expect(error.name).toBe('AbortError');
  });

  it('with a `cache`, the call is cut all the same', async () => {
    const server = await downstream(silent);
    const closed = server.nextClose();
    const error = await runWithDeadline(BUDGET, () => client().get(server.url, { cache: new Map() })).catch(
      (e: unknown) => e,
    );
    await closed;
    expect(error).toBeInstanceOf(DeadlineExceededError);
  });

  it('cancelling the context aborts the request in flight with CancelledError', async () => {
    const server = await downstream(silent);
    const ctx = createContext({ root: true, deadline: 10_000 });
    const closed = server.nextClose();
    const pending = ctx.run(() => client().get(server.url)).catch((e: unknown) => e);
    await server.arrived();
    ctx.cancel(new CancelledError('client left', { reason: 'client-disconnected' }));
    const error = await pending;
    await closed;
    expect(error).toBeInstanceOf(CancelledError);
    expect((error as CancelledError).reason).toBe('client-disconnected');
  });
});

describe("a downstream's own deadline", () => {
  it('a 504 naming the hop fails with DeadlineExceededError whose downstream:<hop>, at once, not retried', async () => {
    const server = await downstream(exceededBy('inventory'));
    const {
      value: { error, elapsed },
      stalledMs,
    } = await watchingTheLoop(async () => {
      const started = performance.now();
      const error = await runWithDeadline(5_000, () => client().get(server.url)).catch((e: unknown) => e);
      return { error, elapsed: performance.now() - started };
    });
    expect(error).toBeInstanceOf(DeadlineExceededError);
    expect(error).toMatchObject({ whose: 'downstream:inventory', phase: 'during-call' });
    // got would retry a 504 after a backoff of a second or more: at once instead, but for what this process's loop
    // lost to stalls (a loaded machine's).
    expect(server.requests).toHaveLength(1);
    expect(elapsed - stalledMs).toBeLessThan(900);
  });

  it('with downstreamErrors: false it stays an HTTPError', async () => {
    const server = await downstream(exceededBy('inventory'));
    const error = await runWithDeadline(2_000, () =>
      client({ downstreamErrors: false }).get(server.url, { retry: { limit: 0 } }),
    ).then(unexpected, (e: RequestError) => e);
    expect(error.name).toBe('HTTPError');
    expect(error.response?.statusCode).toBe(504);
  });
});
