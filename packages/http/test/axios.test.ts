/**
 * `deadlineAxios` on real sockets: what reaches the downstream, no connection without time left, the cut-off
 * (socket closed) with the typed error, the caller's own signal, a downstream's 504, a request sent again.
 */
import {
  CancelledError,
  createContext,
  DeadlineExceededError,
  InvalidArgumentError,
  runWithDeadline,
  traceFrom,
} from '@deadline/core';
import axios, { type AxiosError, type AxiosInstance } from 'axios';
import { describe, expect, it } from 'vitest';
import { deadlineAxios } from '../src/axios.ts';
import { calls } from './calls.ts';
import { type Downstream, downstreamsPerTest, echo, exceededBy, leftAfter, silent } from './servers.ts';

/** A downstream on loopback, closed after each test. */
const downstream = downstreamsPerTest();

/** The success handler of a request that must fail. */
function unexpected(): never {
  throw new Error('the request succeeded');
}

function client(options?: Parameters<typeof deadlineAxios>[1]): AxiosInstance {
  const instance = axios.create();
  deadlineAxios(instance, options);
  return instance;
}

describe('what the downstream receives', () => {
  it('outside any context: nothing added', async () => {
    const server = await downstream(echo);
    const res = await client().get(`${server.url}/x?token=secret`);
    expect(res.data['x-request-deadline']).toBeUndefined();
    expect(res.data.traceparent).toBeUndefined();
  });

  it('inside a deadline: the budget and the trace; a caller-set budget is replaced, other headers kept', async () => {
    const server = await downstream(echo);
    const instance = client({ dialects: ['grpc'] });
    const trace = traceFrom('00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01', 'vendor=x');
    const started = performance.now();
    const ctx = createContext({ root: true, deadline: 1_000, trace });
    const res = await ctx.run(() =>
      instance.get(server.url, { headers: { 'X-Request-Deadline': '99999', accept: 'text/plain' } }),
    );
    ctx.end();
    const budget = Number(res.data['x-request-deadline']);
    expect(Number.isInteger(budget)).toBe(true);
    expect(budget).toBeGreaterThanOrEqual(leftAfter(1_000, started));
    expect(budget).toBeLessThanOrEqual(1_000);
    expect(res.data['grpc-timeout']).toMatch(/^\d+[mu]$/);
    expect(res.data.traceparent).toMatch(/^00-0af7651916cd43dd8448eb211c80319c-[0-9a-f]{16}-01$/);
    expect(res.data.tracestate).toBe('vendor=x');
    expect(res.data.accept).toBe('text/plain');
  });

  it('the eject function removes both interceptors', async () => {
    const server = await downstream(echo);
    const instance = axios.create();
    const eject = deadlineAxios(instance);
    eject();
    const res = await runWithDeadline(1_000, () => instance.get(server.url));
    expect(res.data['x-request-deadline']).toBeUndefined();
    expect(instance.interceptors.request.handlers?.filter(Boolean)).toHaveLength(0);
    expect(instance.interceptors.response.handlers?.filter(Boolean)).toHaveLength(0);
  });

  it('a request sent again (as axios-retry does) carries a fresh, smaller budget and the caller signal', async () => {
    // The first attempt fails with 503; the second hangs until the caller aborts.
    const server: Downstream = await downstream((socket) => {
      if (server.requests.length === 1) socket.write('HTTP/1.1 503 Service Unavailable\r\ncontent-length: 0\r\n\r\n');
    });
    const instance = client();
    const caller = new AbortController();
    const closed = server.nextClose();
    const error = await runWithDeadline(5_000, async () => {
      const first = await instance.get(server.url, { signal: caller.signal }).then(unexpected, (e: AxiosError) => e);
      expect(first.response?.status).toBe(503);
      // Let time pass between the attempts (a timer, not a synchronisation) so the budgets differ.
      await new Promise((resolve) => setTimeout(resolve, 20));
      const second = instance.request(first.config as NonNullable<AxiosError['config']>).catch((e: unknown) => e);
      await server.arrived(2);
      caller.abort();
      return second;
    });
    await closed;
    expect(axios.isCancel(error)).toBe(true);
    const [first, second] = server.requests.map((h) => Number(h['x-request-deadline']));
    expect(second).toBeLessThan(first as number);
  });
});

describe('each request is one call, ended with its outcome', () => {
  it('an answer, an error status, a downstream 504, a cut-off, a caller abort', async () => {
    const instance = client();
    const ok = await downstream(echo);
    expect(await calls(() => runWithDeadline(5_000, () => instance.get(ok.url)))).toEqual(['start', 'end ok 200']);
    const failing = await downstream((socket) =>
      socket.write('HTTP/1.1 500 Internal Server Error\r\ncontent-length: 0\r\n\r\n'),
    );
    expect(await calls(() => runWithDeadline(5_000, () => instance.get(failing.url)))).toEqual([
      'start',
      'end error 500',
    ]);
    const tired = await downstream(exceededBy('inventory'));
    expect(await calls(() => runWithDeadline(5_000, () => instance.get(tired.url)))).toEqual([
      'start',
      'end deadline_exceeded 504',
    ]);
    const quiet = await downstream(silent);
    expect(await calls(() => runWithDeadline(200, () => instance.get(quiet.url)))).toEqual([
      'start',
      'end deadline_exceeded -',
    ]);
    const caller = new AbortController();
    const aborted = calls(() => runWithDeadline(5_000, () => instance.get(quiet.url, { signal: caller.signal })));
    await quiet.arrived(2);
    caller.abort();
    expect(await aborted).toEqual(['start', 'end error -']);
  });
});

describe('no time left: the request is not made', () => {
  it('rejects with DeadlineExceededError (before-call) and opens no connection', async () => {
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
    expect(() => deadlineAxios(axios.create(), { marginMs: -1 })).toThrow(InvalidArgumentError);
    expect(() => deadlineAxios(axios.create(), { marginMs: -1 })).toThrow('marginMs');
  });
});

describe('cut off at the deadline', () => {
  const BUDGET = 300;

  it('a silent downstream: DeadlineExceededError (during-call), not CanceledError; the socket is closed', async () => {
    const server = await downstream(silent);
    const closed = server.nextClose();
    const started = performance.now();
    const error = await runWithDeadline(BUDGET, () => client().get(server.url)).catch((e: unknown) => e);
    const elapsed = performance.now() - started;
    await closed;
    expect(error).toBeInstanceOf(DeadlineExceededError);
    expect(error).toMatchObject({ phase: 'during-call', whose: 'local' });
    expect(elapsed).toBeGreaterThanOrEqual(BUDGET - 5);
    expect(elapsed).toBeLessThan(BUDGET + 1_500);
  });

  it("with the caller's own signal too: the deadline still cuts", async () => {
    const server = await downstream(silent);
    const closed = server.nextClose();
    const caller = new AbortController();
    const error = await runWithDeadline(BUDGET, () => client().get(server.url, { signal: caller.signal })).catch(
      (e: unknown) => e,
    );
    await closed;
    expect(error).toBeInstanceOf(DeadlineExceededError);
  });

  it("the caller's own signal still aborts (axios' CanceledError)", async () => {
    const server = await downstream(silent);
    const closed = server.nextClose();
    const caller = new AbortController();
    const pending = runWithDeadline(10_000, () => client().get(server.url, { signal: caller.signal })).catch(
      (e: unknown) => e,
    );
    await server.arrived();
    caller.abort();
    const error = await pending;
    await closed;
    expect(axios.isCancel(error)).toBe(true);
    expect(error).not.toBeInstanceOf(DeadlineExceededError);
  });

  it("a caller's smaller timeout is kept (axios' own timeout error)", async () => {
    const server = await downstream(silent);
    const error = await runWithDeadline(10_000, () => client().get(server.url, { timeout: 200 })).then(
      unexpected,
      (e: AxiosError) => e,
    );
    expect(error.code).toBe('ECONNABORTED');
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
  it('a 504 naming the hop rejects with DeadlineExceededError whose downstream:<hop>', async () => {
    const server = await downstream(exceededBy('inventory'));
    const error = await runWithDeadline(2_000, () => client().get(server.url)).catch((e: unknown) => e);
    expect(error).toBeInstanceOf(DeadlineExceededError);
    expect(error).toMatchObject({ whose: 'downstream:inventory', phase: 'during-call' });
  });

  it('with downstreamErrors: false it stays the AxiosError', async () => {
    const server = await downstream(exceededBy('inventory'));
    const error = await runWithDeadline(2_000, () => client({ downstreamErrors: false }).get(server.url)).then(
      unexpected,
      (e: AxiosError) => e,
    );
    expect(error.response?.status).toBe(504);
  });
});
