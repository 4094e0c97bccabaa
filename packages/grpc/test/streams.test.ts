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

let inventory: Served;

beforeAll(async () => {
  inventory = await serve({ serviceName: 'inventory', maxMs: 400 });
});
afterAll(async () => {
  await inventory?.close();
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
    // The caller allows 5 s; the service allows a call 400 ms at most, stream and all.
    const { received, error } = await runWithDeadline(5_000, () => drain(ticks(c, { count: 0, intervalMs: 20 })));
    const elapsed = performance.now() - started;
    expect(received).toBeGreaterThan(3);
    expect(error?.code).toBe(grpc.status.DEADLINE_EXCEEDED);
    expect(error?.metadata.get('x-deadline-exceeded-by')).toEqual(['inventory']);
    expect((findDeadlineError(error) as DeadlineExceededError).whose).toBe('downstream:inventory');
    expect(elapsed).toBeGreaterThan(350);
    expect(elapsed).toBeLessThan(3_000);
    const { reason, n } = await stopped;
    expect(reason).toBeInstanceOf(DeadlineExceededError);
    // The handler's timer went with its context: the last tick is the one a 400 ms stream had time for.
    expect(n).toBeLessThan(40);
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
    const c = client(inventory.address);
    const { received, error } = await runWithDeadline(2_000, () => drain(ticks(c, { count: 5, intervalMs: 5 })));
    expect(error).toBeUndefined();
    expect(received).toBe(5);
    c.close();
  });
});
