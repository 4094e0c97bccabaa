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
/**
 * What a stream that must end normally is allowed, by the caller and by its service: its 100 ticks of 1 ms take
 * ~150 ms alone and took 550 ms with both cores busy; 20 s leave it no way to run out, however slow the machine.
 */
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
    // The caller allows 5 s; the service allows a call MAX_MS at most, stream and all.
    const { received, error } = await runWithDeadline(CALLER_MS, () =>
      drain(c.ticks({ count: 0, intervalMs: TICK_MS })),
    );
    const elapsed = performance.now() - started;
    expect(received).toBeGreaterThan(3);
    expect(error).toBeInstanceOf(ConnectError);
    expect(error?.code).toBe(Code.DeadlineExceeded);
    expect(error?.metadata.get('x-deadline-exceeded-by')).toBe('inventory');
    expect((findDeadlineError(error) as DeadlineExceededError).whose).toBe('downstream:inventory');
    expect(elapsed).toBeGreaterThan(MAX_MS - 50);
    // Ended by the service's cut (the error names it), never by the caller's own deadline.
    expect(elapsed).toBeLessThan(CALLER_MS);
    const { reason, n } = await stopped;
    expect(reason).toBeInstanceOf(DeadlineExceededError);
    // The handler's sleep went with its context: the last tick is one a MAX_MS stream had time for, never one of a
    // stream that ran on past its cut (twice as many as fit, a margin: a slow machine only makes fewer).
    expect(n).toBeLessThan((2 * MAX_MS) / TICK_MS);
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
    const c = client(roomy.baseUrl, protocol);
    // What the handler's context has listening, per message: each read is raced against the deadline, and that
    // race's listener must go with the read, not pile up for the length of the stream.
    const listening: number[] = [];
    const onTick = (_n: number, listeners: number) => listening.push(listeners);
    events.on('tick', onTick);
    const { received, error } = await runWithDeadline(ROOMY_MS, () => drain(c.ticks({ count: 100, intervalMs: 1 })));
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
