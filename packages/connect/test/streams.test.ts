/**
 * Streaming calls under the deadline, over both protocols. What every RPC adapter must do is the shared suite's
 * (test/support/rpc-client-conformance.ts) — a server stream is bounded as a whole by its call's deadline, and a
 * caller that cancels mid-stream (itself, or through its request's context) stops the server's work — run here
 * once per protocol; here besides, what is Connect's own: each read of a handler's generator raced against the
 * deadline without piling up listeners, and a generator left at its yield told to finish.
 */
import { setTimeout as sleep } from 'node:timers/promises';
import { Code, type ConnectError, createClient, createRouterTransport } from '@connectrpc/connect';
import { runWithDeadline } from '@deadline/core';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { rpcStreamConformance } from '../../../test/support/rpc-client-conformance.ts';
import { deadlineInterceptor } from '../src/index.ts';
import { client, connectDriver, events, Inventory, type Protocol, type Served, serve } from './support.ts';

/**
 * What a stream that must end normally is allowed, by the caller and by its service: its 100 ticks of 1 ms take
 * ~150 ms alone and took 550 ms with both cores busy; 20 s leave it no way to run out, however slow the machine.
 */
const ROOMY_MS = 20_000;

/** The service, with room for any stream that ends by itself. */
let roomy: Served;

beforeAll(async () => {
  roomy = await serve({ serviceName: 'inventory', maxMs: ROOMY_MS });
});
afterAll(async () => {
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

for (const protocol of ['grpc', 'connect'] as const) rpcStreamConformance(connectDriver(protocol));

describe.each<Protocol>(['grpc', 'connect'])(
  'a server stream over the %s protocol, as Connect serves it',
  (protocol) => {
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
  },
);

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
