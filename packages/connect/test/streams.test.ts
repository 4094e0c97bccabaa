/**
 * Streaming calls under the deadline, over both protocols: a server stream is bounded as a whole by its call's
 * deadline, and a caller that cancels mid-stream (itself, or through its request's context) stops the server's work.
 */

import { setTimeout as sleep } from 'node:timers/promises';
import { Code, ConnectError, createClient, createRouterTransport } from '@connectrpc/connect';
import {
  CancelledError,
  createContext,
  DeadlineExceededError,
  findDeadlineError,
  runWithDeadline,
} from '@deadline/core';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { deadlineInterceptor } from '../src/index.ts';
import { client, events, Inventory, next, type Protocol, type Served, serve } from './support.ts';

let inventory: Served;

beforeAll(async () => {
  inventory = await serve({ serviceName: 'inventory', maxMs: 400 });
});
afterAll(async () => {
  await inventory?.close();
});

/** Reads a stream to its end: the messages, and the error it ended with. */
async function drain(
  messages: AsyncIterable<{ n: number }>,
  onMessage: (n: number) => void | Promise<void> = () => {},
) {
  let received = 0;
  try {
    for await (const tick of messages) {
      received++;
      await onMessage(tick.n);
    }
    return { received, error: undefined };
  } catch (error) {
    return { received, error: error as ConnectError };
  }
}

describe.each<Protocol>(['grpc', 'connect'])('a server stream over the %s protocol', (protocol) => {
  it('is bounded as a whole: it ends deadline_exceeded at its deadline, naming the hop, and the work stops', async () => {
    const c = client(inventory.baseUrl, protocol);
    const stopped = next<{ reason: unknown; n: number }>('ticks-stopped');
    const started = performance.now();
    // The caller allows 5 s; the service allows a call 400 ms at most, stream and all.
    const { received, error } = await runWithDeadline(5_000, () => drain(c.ticks({ count: 0, intervalMs: 20 })));
    const elapsed = performance.now() - started;
    expect(received).toBeGreaterThan(3);
    expect(error).toBeInstanceOf(ConnectError);
    expect(error?.code).toBe(Code.DeadlineExceeded);
    expect(error?.metadata.get('x-deadline-exceeded-by')).toBe('inventory');
    expect((findDeadlineError(error) as DeadlineExceededError).whose).toBe('downstream:inventory');
    expect(elapsed).toBeGreaterThan(350);
    expect(elapsed).toBeLessThan(3_000);
    const { reason, n } = await stopped;
    expect(reason).toBeInstanceOf(DeadlineExceededError);
    // The handler's sleep went with its context: the last tick is one a 400 ms stream had time for.
    expect(n).toBeLessThan(40);
  });

  it("stops the server's work when the client aborts mid-stream", async () => {
    const c = client(inventory.baseUrl, protocol);
    const stopped = next<{ reason: unknown; n: number }>('ticks-stopped');
    const controller = new AbortController();
    const request = createContext({ deadline: 5_000 });
    const { error } = await request.run(() =>
      drain(c.ticks({ count: 0, intervalMs: 10 }, { signal: controller.signal }), (n) => {
        if (n === 3) controller.abort();
      }),
    );
    request.end();
    expect(error?.code).toBe(Code.Canceled);
    const { reason, n } = await stopped;
    expect(reason).toBeInstanceOf(CancelledError);
    expect(n).toBeLessThan(40);
  });

  it("stops the server's work when the client's request is cancelled mid-stream", async () => {
    const c = client(inventory.baseUrl, protocol);
    const stopped = next<{ reason: unknown; n: number }>('ticks-stopped');
    const request = createContext({ deadline: 5_000 });
    const { error } = await request.run(() =>
      drain(c.ticks({ count: 0, intervalMs: 10 }), (n) => {
        if (n === 3) request.cancel(new CancelledError('client went away', { reason: 'client-disconnected' }));
      }),
    );
    expect(error?.code).toBe(Code.Canceled);
    expect(findDeadlineError(error)).toBeInstanceOf(CancelledError);
    expect((await stopped).reason).toBeInstanceOf(CancelledError);
  });

  it('ends normally when it finishes in time, its context no busier at the last message than at the first', async () => {
    const c = client(inventory.baseUrl, protocol);
    // What the handler's context has listening, per message: each read is raced against the deadline, and that
    // race's listener must go with the read, not pile up for the length of the stream.
    const listening: number[] = [];
    const onTick = (_n: number, listeners: number) => listening.push(listeners);
    events.on('tick', onTick);
    const { received, error } = await runWithDeadline(3_000, () => drain(c.ticks({ count: 100, intervalMs: 1 })));
    events.off('tick', onTick);
    expect(error).toBeUndefined();
    expect(received).toBe(100);
    expect(listening).toHaveLength(100);
    expect(Math.max(...listening)).toBe(listening[0]);
  });
});

it('a reader slower than the deadline: the handler’s generator, left at its yield, is told to finish', async () => {
  // Connect's in-memory router: the real server path, each message pulled when the reader asks for it, so the
  // deadline passes while the handler's generator waits at a `yield` (on a loaded machine, a network stream does
  // the same now and then). Its `finally` must run: that is where a handler lets go of what it holds.
  let finished = 0;
  const transport = createRouterTransport(
    (router) =>
      router.service(Inventory, {
        async *ticks() {
          try {
            for (let n = 1; ; n++) yield { n };
          } finally {
            finished++;
          }
        },
      } as never),
    { router: { interceptors: [deadlineInterceptor({ serviceName: 'inventory', defaultMs: 100 })] } },
  );
  const reader = createClient(Inventory, transport) as unknown as {
    ticks(request: object): AsyncIterable<{ n: number }>;
  };
  const { error } = await drain(reader.ticks({}), async () => {
    await sleep(250);
  });
  expect(error?.code).toBe(Code.DeadlineExceeded);
  await expect.poll(() => finished).toBe(1);
});
