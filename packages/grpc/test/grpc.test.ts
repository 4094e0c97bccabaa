/**
 * @deadline/grpc over real grpc-js on loopback: outgoing calls bounded by the request's budget, refused without
 * sending when none is left, cancelled when the request stops; incoming calls' handlers in the context of their
 * call's deadline, cancelled when the caller cancels, answered DEADLINE_EXCEEDED naming the hop.
 */
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
import grpc, { type ServiceError } from '@grpc/grpc-js';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { fromGrpcStatus } from '../src/index.ts';
import { client, events, leftAfter, next, type Seen, type Served, serve, unary } from './support.ts';

let inventory: Served;
let bare: Served;

/** The callers this service trusts to lengthen their budget: those that say they are internal. */
const internal = { 'x-internal': '1' };

beforeAll(async () => {
  inventory = await serve({
    serviceName: 'inventory',
    defaultMs: 1_500,
    maxMs: 5_000,
    trust: (call) => call.metadata.get('x-internal')[0] === '1',
  });
  bare = await serve(false);
});
afterAll(async () => {
  await inventory?.close();
  await bare?.close();
});

describe('an outgoing call', () => {
  it('carries the remaining budget less the margin as its deadline', async () => {
    const c = client(inventory.address, { marginMs: 50 });
    const started = performance.now();
    const seen = await runWithDeadline(800, () => unary<Seen>(c, 'inspect', {}));
    expect(seen.budgetMs).toBeLessThanOrEqual(750);
    expect(seen.budgetMs).toBeGreaterThanOrEqual(leftAfter(800, started, 50));
    expect(seen.hop).toBe('inventory');
    c.close();
  });

  it('keeps its own deadline when that is the earlier one', async () => {
    const c = client(inventory.address);
    const started = performance.now();
    const seen = await runWithDeadline(3_000, () => unary<Seen>(c, 'inspect', {}, { deadline: Date.now() + 400 }));
    expect(seen.budgetMs).toBeLessThanOrEqual(400);
    expect(seen.budgetMs).toBeGreaterThanOrEqual(leftAfter(400, started));
    c.close();
  });

  it("is bounded even when the call brings interceptors of its own, which replace the client's", async () => {
    const passThrough: grpc.Interceptor = (options, nextCall) => new grpc.InterceptingCall(nextCall(options));
    const c = client(inventory.address, { marginMs: 50 }, { interceptors: [passThrough] });
    const seen = await runWithDeadline(800, () => unary<Seen>(c, 'inspect', {}, { interceptors: [passThrough] }));
    expect(seen.budgetMs).toBeLessThanOrEqual(750);
    c.close();
  });

  it('is not made when too little is left: DEADLINE_EXCEEDED at once, no connection opened', async () => {
    const c = client(inventory.address, { marginMs: 20 });
    const error = await runWithDeadline(10, () => unary(c, 'inspect', {})).catch((e: ServiceError) => e);
    expect((error as ServiceError).code).toBe(grpc.status.DEADLINE_EXCEEDED);
    const typed = findDeadlineError(error);
    expect(typed).toBeInstanceOf(DeadlineExceededError);
    expect((typed as DeadlineExceededError).phase).toBe('before-call');
    // Nothing was sent: the channel never even left IDLE to connect.
    expect(c.getChannel().getConnectivityState(false)).toBe(grpc.connectivityState.IDLE);
    c.close();
  });

  it("is cancelled when its request is: CANCELLED here, the handler's context cancelled there", async () => {
    const c = client(inventory.address);
    const ctx = createContext({ deadline: 5_000 });
    const stopped = next<unknown>('stopped');
    const call = ctx.run(() => unary(c, 'inspect', { wait: true }));
    await next('inspect');
    ctx.cancel(new CancelledError('client went away', { reason: 'client-disconnected' }));
    const error = (await call.catch((e: ServiceError) => e)) as ServiceError;
    expect(error.code).toBe(grpc.status.CANCELLED);
    expect(findDeadlineError(error)).toBeInstanceOf(CancelledError);
    const reason = await stopped;
    expect(reason).toBeInstanceOf(CancelledError);
    expect((reason as CancelledError).reason).toBe('client-disconnected');
    c.close();
  });

  it('is refused with UNAVAILABLE, nothing sent, once its circuit breaker opens', async () => {
    const failing = await serve({ serviceName: 'stock' }, () => Promise.reject(new Error('disk on fire')));
    const breaker = new CircuitBreaker({ target: 'stock', failureThreshold: 2, minimumCalls: 2, cooldownMs: 60_000 });
    const c = client(failing.address, { circuitBreaker: breaker });
    let reached = 0;
    const onError = () => reached++;
    events.on('query-error', onError);
    try {
      for (let i = 0; i < 2; i++) {
        const error = (await runWithDeadline(2_000, () => unary(c, 'query', { sql: 'x' })).catch(
          (e: ServiceError) => e,
        )) as ServiceError;
        expect(error.code).toBe(grpc.status.UNKNOWN);
      }
      const refused = (await runWithDeadline(2_000, () => unary(c, 'query', { sql: 'x' })).catch(
        (e: ServiceError) => e,
      )) as ServiceError;
      expect(refused.code).toBe(grpc.status.UNAVAILABLE);
      expect(refused.cause).toBeInstanceOf(CircuitOpenError);
      expect(reached).toBe(2);
    } finally {
      events.off('query-error', onError);
      c.close();
      await failing.close();
    }
  });

  it('is cut off locally when its own share of the budget runs out', async () => {
    const c = client(bare.address, { marginMs: 20 });
    const started = performance.now();
    const error = (await runWithDeadline(300, () => unary(c, 'inspect', { wait: true })).catch(
      (e: ServiceError) => e,
    )) as ServiceError;
    const elapsed = performance.now() - started;
    expect(error.code).toBe(grpc.status.DEADLINE_EXCEEDED);
    const typed = findDeadlineError(error) as DeadlineExceededError;
    expect(typed.whose).toBe('local');
    expect(typed.phase).toBe('during-call');
    expect(elapsed).toBeGreaterThan(250);
    expect(elapsed).toBeLessThan(2_000);
    c.close();
  });
});

describe('an incoming call', () => {
  it("runs its handler in a context of its deadline, its hop and its caller's trace", async () => {
    const c = client(inventory.address);
    const trace = traceFrom();
    const started = performance.now();
    const seen = await runWithContext({ deadline: 900, trace }, () => unary<Seen>(c, 'inspect', {}));
    expect(seen.budgetMs).toBeLessThanOrEqual(900);
    expect(seen.budgetMs).toBeGreaterThanOrEqual(leftAfter(900, started));
    expect(seen.traceId).toBe(trace.traceId);
    c.close();
  });

  it('gets the service default without a deadline; any caller may shorten it, a trusted one lengthen it', async () => {
    const c = client(inventory.address, false);
    expect((await unary<Seen>(c, 'inspect', {})).budgetMs).toBeCloseTo(1_500, 6);
    const started = performance.now();
    const shorter = await unary<Seen>(c, 'inspect', {}, { deadline: Date.now() + 800 });
    expect(shorter.budgetMs).toBeLessThanOrEqual(800);
    expect(shorter.budgetMs).toBeGreaterThanOrEqual(leftAfter(800, started));
    // Asking for more than the default: only a trusted caller gets it, up to the maximum.
    const greedy = await unary<Seen>(c, 'inspect', {}, { deadline: Date.now() + 60_000 });
    expect(greedy.budgetMs).toBeCloseTo(1_500, 6);
    const trusted = await unary<Seen>(c, 'inspect', {}, { deadline: Date.now() + 60_000 }, internal);
    expect(trusted.budgetMs).toBeCloseTo(5_000, 6);
    c.close();
  });

  it('is answered DEADLINE_EXCEEDED naming this hop when its own (clamped) deadline passes first', async () => {
    const tight = await serve({ serviceName: 'stock', maxMs: 150 });
    const c = client(tight.address);
    const stopped = next<unknown>('stopped');
    const error = (await runWithDeadline(5_000, () => unary(c, 'inspect', { wait: true })).catch(
      (e: ServiceError) => e,
    )) as ServiceError;
    expect(error.code).toBe(grpc.status.DEADLINE_EXCEEDED);
    expect(error.metadata.get('x-deadline-exceeded-by')).toEqual(['stock']);
    const typed = findDeadlineError(error) as DeadlineExceededError;
    expect(typed.whose).toBe('downstream:stock');
    expect(fromGrpcStatus(error)).toMatchObject({ whose: 'downstream:stock' });
    expect(await stopped).toBeInstanceOf(DeadlineExceededError);
    c.close();
    await tight.close();
  });

  it('is refused before its handler runs when less than minMs is left', async () => {
    // The caller's 1 s is below the 2 s minimum, and leaves the refusal time to come back before the caller's own
    // timer fires, however slow the machine (with 100 ms, a loaded one's connection took longer, and the caller's
    // timer answered instead, naming no one).
    const strict = await serve({ serviceName: 'strict', minMs: 2_000 });
    const c = client(strict.address, false);
    let ran = false;
    const ranInspect = () => {
      ran = true;
    };
    const { events } = await import('./support.ts');
    events.on('inspect', ranInspect);
    const error = (await unary(c, 'inspect', {}, { deadline: Date.now() + 1_000 }).catch(
      (e: ServiceError) => e,
    )) as ServiceError;
    events.off('inspect', ranInspect);
    expect(error.code).toBe(grpc.status.DEADLINE_EXCEEDED);
    expect(error.metadata.get('x-deadline-exceeded-by')).toEqual(['strict']);
    expect(ran).toBe(false);
    c.close();
    await strict.close();
  });

  it('lets detached work escape the deadline and keep the trace', async () => {
    const c = client(inventory.address);
    const trace = traceFrom();
    const seen = await runWithContext({ deadline: 900, trace }, () => unary<Seen>(c, 'inspect', { detach: true }));
    expect(seen.detachedTraceId).toBe(trace.traceId);
    expect(seen.detachedHasDeadline).toBe(false);
    c.close();
  });

  it('runs the listeners its handler puts on the call in its context', async () => {
    const c = client(inventory.address);
    const collected = next<{ hop?: string } | undefined>('collected');
    const reply = await runWithDeadline(
      2_000,
      () =>
        new Promise<Seen>((resolve, reject) => {
          const call = (
            c.collect as (cb: (e: ServiceError | null, r: Seen) => void) => grpc.ClientWritableStream<unknown>
          )((e, r) => (e === null ? resolve(r) : reject(e)));
          call.write({ n: 1 });
          call.write({ n: 2 });
          call.end();
        }),
    );
    expect(reply.count).toBe(2);
    expect((await collected)?.hop).toBe('inventory');
    c.close();
  });
});
