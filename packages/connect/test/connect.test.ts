/**
 * @deadline/connect over real Connect (connect-node on node:http2) on loopback, in both the gRPC and the Connect
 * protocol: outgoing calls bounded by the request's budget, refused without sending when none is left, aborted
 * when the request stops; handlers in the context of their call's deadline, cancelled when the caller cancels,
 * answered deadline_exceeded naming the hop.
 */
import diagnostics from 'node:diagnostics_channel';
import { Code, ConnectError } from '@connectrpc/connect';
import {
  CancelledError,
  createContext,
  DeadlineExceededError,
  findDeadlineError,
  runWithContext,
  runWithDeadline,
  traceFrom,
} from '@deadline/core';
import { CircuitBreaker, CircuitOpenError } from '@deadline/resilience';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { fromConnectError } from '../src/index.ts';
import { client, events, leftAfter, next, type Protocol, type Served, serve } from './support.ts';

let inventory: Served;
let bare: Served;
let tight: Served;

/** The callers this service trusts to lengthen their budget: those that say they are internal. */
const internal = { 'x-internal': '1' };

beforeAll(async () => {
  inventory = await serve({
    serviceName: 'inventory',
    defaultMs: 1_500,
    maxMs: 5_000,
    trust: (req) => req.header.get('x-internal') === '1',
  });
  bare = await serve(false);
  tight = await serve({ serviceName: 'stock', maxMs: 150 });
});
afterAll(async () => {
  await inventory?.close();
  await bare?.close();
  await tight?.close();
});

const fail = (work: Promise<unknown>) =>
  work.then(
    () => {
      throw new Error('expected the call to fail');
    },
    (error: unknown) => error as ConnectError,
  );

describe.each<Protocol>(['grpc', 'connect'])('over the %s protocol', (protocol) => {
  describe('an outgoing call', () => {
    it('carries the remaining budget less the margin as its timeout', async () => {
      const c = client(inventory.baseUrl, protocol, { marginMs: 50 });
      const started = performance.now();
      const seen = await runWithDeadline(800, () => c.inspect({}));
      expect(seen.budgetMs).toBeLessThanOrEqual(750);
      expect(seen.budgetMs).toBeGreaterThanOrEqual(leftAfter(800, started, 50));
      expect(seen.hop).toBe('inventory');
    });

    it('keeps its own timeout when that is the earlier one', async () => {
      const c = client(inventory.baseUrl, protocol);
      const started = performance.now();
      const seen = await runWithDeadline(3_000, () => c.inspect({}, { timeoutMs: 400 }));
      expect(seen.budgetMs).toBeLessThanOrEqual(400);
      expect(seen.budgetMs).toBeGreaterThanOrEqual(leftAfter(400, started));
    });

    it('is not made when too little is left: deadline_exceeded at once, nothing sent', async () => {
      const c = client(inventory.baseUrl, protocol, { marginMs: 20 });
      let reached = 0;
      const onInspect = () => reached++;
      events.on('inspect', onInspect);
      const error = await fail(runWithDeadline(10, () => c.inspect({})));
      events.off('inspect', onInspect);
      expect(error).toBeInstanceOf(ConnectError);
      expect(error.code).toBe(Code.DeadlineExceeded);
      expect((findDeadlineError(error) as DeadlineExceededError).phase).toBe('before-call');
      expect(reached).toBe(0);
    });

    it("is aborted when its request is: canceled here, the handler's context cancelled there", async () => {
      const c = client(inventory.baseUrl, protocol);
      const request = createContext({ deadline: 5_000 });
      const stopped = next<unknown>('stopped');
      const call = fail(request.run(() => c.inspect({ wait: true })));
      await next('inspect');
      request.cancel(new CancelledError('client went away', { reason: 'client-disconnected' }));
      const error = await call;
      expect(error.code).toBe(Code.Canceled);
      expect(findDeadlineError(error)).toBeInstanceOf(CancelledError);
      expect(await stopped).toBeInstanceOf(CancelledError);
    });

    it('is cut off locally when its own share of the budget runs out', async () => {
      const c = client(bare.baseUrl, protocol, { marginMs: 20 });
      const started = performance.now();
      const error = await fail(runWithDeadline(300, () => c.inspect({ wait: true })));
      expect(error.code).toBe(Code.DeadlineExceeded);
      const typed = findDeadlineError(error) as DeadlineExceededError;
      expect(typed.whose).toBe('local');
      expect(performance.now() - started).toBeGreaterThan(250);
    });

    it('is refused with unavailable, nothing sent, once its circuit breaker opens', async () => {
      const breaker = new CircuitBreaker({ target: 'stock', failureThreshold: 2, minimumCalls: 2, cooldownMs: 60_000 });
      // Nothing listens here: each call fails to connect (unavailable), a failure the breaker counts.
      const c = client('http://127.0.0.1:9', protocol, { circuitBreaker: breaker });
      for (let i = 0; i < 2; i++) {
        expect((await fail(runWithDeadline(2_000, () => c.inspect({})))).code).toBe(Code.Unavailable);
      }
      let sockets = 0;
      const onSocket = () => sockets++;
      diagnostics.subscribe('net.client.socket', onSocket);
      const refused = await fail(runWithDeadline(2_000, () => c.inspect({})));
      diagnostics.unsubscribe('net.client.socket', onSocket);
      expect(refused.code).toBe(Code.Unavailable);
      expect(refused.cause).toBeInstanceOf(CircuitOpenError);
      expect(sockets).toBe(0);
    });
  });

  describe('an incoming call', () => {
    it("runs its handler in a context of its deadline, its hop and its caller's trace", async () => {
      const c = client(inventory.baseUrl, protocol);
      const trace = traceFrom();
      const started = performance.now();
      const seen = await runWithContext({ deadline: 900, trace }, () => c.inspect({}));
      expect(seen.budgetMs).toBeLessThanOrEqual(900);
      expect(seen.budgetMs).toBeGreaterThanOrEqual(leftAfter(900, started));
      expect(seen.traceId).toBe(trace.traceId);
    });

    it('gets the service default without a deadline; any caller may shorten it, a trusted one lengthen it', async () => {
      const c = client(inventory.baseUrl, protocol, false);
      expect((await c.inspect({})).budgetMs).toBeCloseTo(1_500, 6);
      const started = performance.now();
      const shorter = await c.inspect({}, { timeoutMs: 800 });
      expect(shorter.budgetMs).toBeLessThanOrEqual(800);
      expect(shorter.budgetMs).toBeGreaterThanOrEqual(leftAfter(800, started));
      // Asking for more than the default: only a trusted caller gets it, up to the maximum.
      expect((await c.inspect({}, { timeoutMs: 60_000 })).budgetMs).toBeCloseTo(1_500, 6);
      expect((await c.inspect({}, { timeoutMs: 60_000, headers: internal })).budgetMs).toBeCloseTo(5_000, 6);
    });

    it('is answered deadline_exceeded naming this hop when its own (clamped) deadline passes first', async () => {
      const c = client(tight.baseUrl, protocol);
      const stopped = next<unknown>('stopped');
      const error = await fail(runWithDeadline(5_000, () => c.inspect({ wait: true })));
      expect(error.code).toBe(Code.DeadlineExceeded);
      expect(error.metadata.get('x-deadline-exceeded-by')).toBe('stock');
      expect((findDeadlineError(error) as DeadlineExceededError).whose).toBe('downstream:stock');
      expect(fromConnectError(error)).toMatchObject({ whose: 'downstream:stock' });
      expect(await stopped).toBeInstanceOf(DeadlineExceededError);
    });

    it('lets detached work escape the deadline and keep the trace', async () => {
      const c = client(inventory.baseUrl, protocol);
      const trace = traceFrom();
      const seen = await runWithContext({ deadline: 900, trace }, () => c.inspect({ detach: true }));
      expect(seen.detachedTraceId).toBe(trace.traceId);
      expect(seen.detachedHasDeadline).toBe(false);
    });

    it('reads a client stream in its context', async () => {
      const c = client(inventory.baseUrl, protocol);
      const collected = next<{ hop?: string } | undefined>('collected');
      async function* items() {
        yield { n: 1 };
        yield { n: 2 };
      }
      const seen = await runWithDeadline(2_000, () => c.collect(items()));
      expect(seen.count).toBe(2);
      expect((await collected)?.hop).toBe('inventory');
    });
  });
});
