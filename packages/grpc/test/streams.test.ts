/**
 * Streaming calls under the deadline: a server stream is bounded as a whole by its call's deadline, and a caller
 * that cancels mid-stream (itself, or through its request's context) stops the server's work.
 */
import {
  CancelledError,
  createContext,
  DeadlineExceededError,
  findDeadlineError,
  runWithDeadline,
} from '@deadline/core';
import grpc, { type ServiceError } from '@grpc/grpc-js';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { client, next, type Served, serve } from './support.ts';

/**
 * The most the service allows a call, stream and all: the cut the bounded stream below ends at. A second, not less,
 * so that a stream of 20 ms ticks has sent some before it (a stall of a few hundred ms on a loaded machine leaves
 * most of them), while the caller's own 5 s stay far off.
 */
const MAX_MS = 1_000;
/** The interval of the ticks of a stream that runs until it is cut. */
const TICK_MS = 20;
/** What the caller allows a stream that runs until it is cut: far more than the service's {@link MAX_MS}. */
const CALLER_MS = 5_000;
/** What a stream that must end normally is allowed, by the caller and by its service: no machine is that slow. */
const ROOMY_MS = 20_000;

let inventory: Served;
/** The same service, with room for any stream that ends by itself. */
let roomy: Served;

beforeAll(async () => {
  inventory = await serve({ serviceName: 'inventory', maxMs: MAX_MS });
  roomy = await serve({ serviceName: 'inventory', maxMs: ROOMY_MS });
});
afterAll(async () => {
  await inventory?.close();
  await roomy?.close();
});

type TickStream = grpc.ClientReadableStream<{ n: number }>;
const ticks = (c: grpc.Client, request: object, options: grpc.CallOptions = {}) =>
  (c as unknown as { ticks(r: object, o: grpc.CallOptions): TickStream }).ticks(request, options);

/** Reads a stream to its end: the messages, and the error it ended with. */
function drain(stream: TickStream, onMessage: (n: number) => void = () => {}) {
  return new Promise<{ received: number; error: ServiceError | undefined }>((resolve) => {
    let received = 0;
    stream.on('data', (tick: { n: number }) => {
      received++;
      onMessage(tick.n);
    });
    stream.on('error', (error: ServiceError) => resolve({ received, error }));
    stream.on('end', () => resolve({ received, error: undefined }));
  });
}

describe('a server stream', () => {
  it('is bounded as a whole: it ends DEADLINE_EXCEEDED at its deadline, naming the hop, and the work stops', async () => {
    const c = client(inventory.address);
    const stopped = next<{ reason: unknown; n: number }>('ticks-stopped');
    const started = performance.now();
    // The caller allows 5 s; the service allows a call MAX_MS at most, stream and all.
    const { received, error } = await runWithDeadline(CALLER_MS, () =>
      drain(ticks(c, { count: 0, intervalMs: TICK_MS })),
    );
    const elapsed = performance.now() - started;
    expect(received).toBeGreaterThan(3);
    expect(error?.code).toBe(grpc.status.DEADLINE_EXCEEDED);
    expect(error?.metadata.get('x-deadline-exceeded-by')).toEqual(['inventory']);
    expect((findDeadlineError(error) as DeadlineExceededError).whose).toBe('downstream:inventory');
    expect(elapsed).toBeGreaterThan(MAX_MS - 50);
    // Ended by the service's cut (the error names it), never by the caller's own deadline.
    expect(elapsed).toBeLessThan(CALLER_MS);
    const { reason, n } = await stopped;
    expect(reason).toBeInstanceOf(DeadlineExceededError);
    // The handler's timer went with its context: the last tick is one a MAX_MS stream had time for, never one of a
    // stream that ran on past its cut (twice as many as fit, a margin: a slow machine only makes fewer).
    expect(n).toBeLessThan((2 * MAX_MS) / TICK_MS);
    expect(n).toBeGreaterThanOrEqual(received);
    c.close();
  });

  it("stops the server's work when the client cancels mid-stream", async () => {
    const c = client(inventory.address);
    const stopped = next<{ reason: unknown; n: number }>('ticks-stopped');
    const request = createContext({ deadline: 5_000 });
    const stream = request.run(() => ticks(c, { count: 0, intervalMs: 10 }));
    const { error } = await drain(stream, (n) => {
      if (n === 3) stream.cancel();
    });
    request.end();
    expect(error?.code).toBe(grpc.status.CANCELLED);
    const { reason, n } = await stopped;
    expect(reason).toBeInstanceOf(CancelledError);
    expect((reason as CancelledError).reason).toBe('client-disconnected');
    expect(n).toBeLessThan(40);
    c.close();
  });

  it("stops the server's work when the client's request is cancelled mid-stream", async () => {
    const c = client(inventory.address);
    const stopped = next<{ reason: unknown; n: number }>('ticks-stopped');
    const request = createContext({ deadline: 5_000 });
    const stream = request.run(() => ticks(c, { count: 0, intervalMs: 10 }));
    const { error } = await drain(stream, (n) => {
      if (n === 3) request.cancel(new CancelledError('client went away', { reason: 'client-disconnected' }));
    });
    expect(error?.code).toBe(grpc.status.CANCELLED);
    expect(findDeadlineError(error)).toBeInstanceOf(CancelledError);
    expect((await stopped).reason).toBeInstanceOf(CancelledError);
    c.close();
  });

  it('ends normally when it finishes in time, its context ended with it', async () => {
    const c = client(roomy.address);
    const { received, error } = await runWithDeadline(ROOMY_MS, () => drain(ticks(c, { count: 5, intervalMs: 5 })));
    expect(error).toBeUndefined();
    expect(received).toBe(5);
    c.close();
  });
});
