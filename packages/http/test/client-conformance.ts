/**
 * The behaviour every HTTP client adapter (`deadlineAxios`, `deadlineGot`) must show, on real sockets: what
 * reaches the downstream, no connection without time left, the cut-off (socket closed) with the typed error, the
 * caller's own signal, a downstream's 504. Each adapter's test file runs it with its own driver, and keeps beside
 * it only what is its client's own (retries, interceptors, its error types).
 */
import {
  CancelledError,
  createContext,
  DeadlineExceededError,
  InvalidArgumentError,
  runWithDeadline,
  traceFrom,
} from '@deadline/core';
import { describe, expect, it } from 'vitest';
import { watchingTheLoop } from '../../server/test/loop-lateness.ts';
import type { HttpDeadlineOptions } from '../src/index.ts';
import { downstreamsPerTest, echo, exceededBy, leftAfter, silent } from './servers.ts';

/** What the suite needs of a client adapter: how to make a client with the library, and a request with it. */
export interface HttpClientDriver<Client> {
  /** The client library, as it appears in the suite's name ('axios', 'got'). */
  name: string;
  /** A client through the adapter, with `options`. */
  client(options?: HttpDeadlineOptions): Client;
  /** Wraps a fresh client with `options` and nothing else: bad options throw here. */
  wrap(options: HttpDeadlineOptions): void;
  /** A GET, as the client's users make it: the response, or the client's error. */
  get(client: Client, url: string, init?: { headers?: Record<string, string>; signal?: AbortSignal }): Promise<unknown>;
  /** A GET whose JSON body (the `echo` downstream's copy of the request's headers) it resolves with. */
  json(client: Client, url: string, headers?: Record<string, string>): Promise<Record<string, string>>;
  /** Asserts `error` is what the client itself rejects with when the caller's own signal aborts its request. */
  expectCallerAbort(error: unknown): void;
}

export function httpClientConformance<Client>(driver: HttpClientDriver<Client>): void {
  describe(`${driver.name}: deadline client conformance`, () => {
    /** A downstream on loopback, closed after each test. */
    const downstream = downstreamsPerTest();

    describe('what the downstream receives', () => {
      it('outside any context: nothing added', async () => {
        const server = await downstream(echo);
        const seen = await driver.json(driver.client(), `${server.url}/x?token=secret`);
        expect(seen['x-request-deadline']).toBeUndefined();
        expect(seen.traceparent).toBeUndefined();
      });

      it('inside a deadline: the budget and the trace; a caller-set budget is replaced, other headers kept', async () => {
        const server = await downstream(echo);
        const instance = driver.client({ dialects: ['grpc', 'connect'] });
        const trace = traceFrom('00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01', 'vendor=x');
        const started = performance.now();
        const ctx = createContext({ root: true, deadline: 1_000, trace });
        const seen = await ctx.run(() =>
          driver.json(instance, server.url, { 'X-Request-Deadline': '99999', accept: 'text/plain', 'x-a': '1' }),
        );
        ctx.end();
        expectBudgetAndTrace(seen, started);
        expect(seen['x-a']).toBe('1');
      });
    });

    describe('no time left: the request is not made', () => {
      it('fails with DeadlineExceededError (before-call) and opens no connection', async () => {
        const server = await downstream(echo);
        const instance = driver.client({ minMs: 50 });
        const ctx = createContext({ root: true, deadline: 20, hop: 'gateway' });
        const error = await ctx.run(() => driver.get(instance, `${server.url}/stock?id=1`)).catch((e: unknown) => e);
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
        const error = await ctx.run(() => driver.get(driver.client(), server.url)).catch((e: unknown) => e);
        expect(error).toBeInstanceOf(CancelledError);
        expect(server.connections).toBe(0);
      });

      it('bad options throw at setup, naming the option', () => {
        expect(() => driver.wrap({ marginMs: -1 })).toThrow(InvalidArgumentError);
        expect(() => driver.wrap({ marginMs: -1 })).toThrow('marginMs');
        expect(() => driver.wrap({ maxMs: 0 })).toThrow(InvalidArgumentError);
        expect(() => driver.wrap({ maxMs: 0 })).toThrow('maxMs');
      });
    });

    describe('cut off at the deadline', () => {
      const BUDGET = 300;

      it('a silent downstream: DeadlineExceededError (during-call), not the client’s abort; the socket closed, no retry', async () => {
        const server = await downstream(silent);
        const closed = server.nextClose();
        const started = performance.now();
        // got retries GETs twice by default: a call cut by its deadline must not be.
        const error = await runWithDeadline(BUDGET, () => driver.get(driver.client(), server.url)).catch(
          (e: unknown) => e,
        );
        const elapsed = performance.now() - started;
        await closed;
        expect(error).toBeInstanceOf(DeadlineExceededError);
        expect(error).toMatchObject({ phase: 'during-call', whose: 'local' });
        expect(elapsed).toBeGreaterThanOrEqual(BUDGET - 5);
        expect(elapsed).toBeLessThan(BUDGET + 1_500);
        expect(server.connections).toBe(1);
      });

      it("with the caller's own signal too: the deadline still cuts", async () => {
        const server = await downstream(silent);
        const closed = server.nextClose();
        const caller = new AbortController();
        const error = await runWithDeadline(BUDGET, () =>
          driver.get(driver.client(), server.url, { signal: caller.signal }),
        ).catch((e: unknown) => e);
        await closed;
        expect(error).toBeInstanceOf(DeadlineExceededError);
      });

      it("the caller's own signal still aborts, with the client's own error", async () => {
        const server = await downstream(silent);
        const closed = server.nextClose();
        const caller = new AbortController();
        const pending = runWithDeadline(10_000, () =>
          driver.get(driver.client(), server.url, { signal: caller.signal }),
        ).then(
          () => {
            throw new Error('the request succeeded');
          },
          (e: unknown) => e,
        );
        await server.arrived();
        caller.abort();
        const error = await pending;
        await closed;
        driver.expectCallerAbort(error);
        expect(error).not.toBeInstanceOf(DeadlineExceededError);
      });

      it('cancelling the context aborts the request in flight with CancelledError', async () => {
        const server = await downstream(silent);
        const ctx = createContext({ root: true, deadline: 10_000 });
        const closed = server.nextClose();
        const pending = ctx.run(() => driver.get(driver.client(), server.url)).catch((e: unknown) => e);
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
          const error = await runWithDeadline(5_000, () => driver.get(driver.client(), server.url)).catch(
            (e: unknown) => e,
          );
          return { error, elapsed: performance.now() - started };
        });
        expect(error).toBeInstanceOf(DeadlineExceededError);
        expect(error).toMatchObject({ whose: 'downstream:inventory', phase: 'during-call' });
        // got would retry a 504 after a backoff of a second or more: at once instead, but for what this process's
        // loop lost to stalls (a loaded machine's).
        expect(server.requests).toHaveLength(1);
        expect(elapsed - stalledMs).toBeLessThan(900);
      });
    });
  });
}

/**
 * What a downstream must see of a call made at `started` in a context of 1,000 ms on trace 0af76519…, asked for
 * the gRPC and Connect dialects, with `accept: text/plain` and a caller-set `X-Request-Deadline` of its own: the
 * budget left (whole ms) in all three dialects, the trace, the caller's other headers. Shared with the undici
 * interceptor's test.
 */
export function expectBudgetAndTrace(seen: Record<string, string | undefined>, started: number): void {
  const budget = Number(seen['x-request-deadline']);
  expect(Number.isInteger(budget)).toBe(true);
  expect(budget).toBeGreaterThanOrEqual(leftAfter(1_000, started));
  expect(budget).toBeLessThanOrEqual(1_000);
  expect(seen['grpc-timeout']).toMatch(/^\d+[mu]$/);
  expect(Number(seen['connect-timeout-ms'])).toBe(budget);
  expect(seen.traceparent).toMatch(/^00-0af7651916cd43dd8448eb211c80319c-[0-9a-f]{16}-01$/);
  expect(seen.tracestate).toBe('vendor=x');
  expect(seen.accept).toBe('text/plain');
}
