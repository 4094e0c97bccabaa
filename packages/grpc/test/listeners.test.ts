/**
 * Nothing accumulates over many calls: 1,000 calls inside one long-lived context leave it without a listener or a
 * place in the expiry queue, every server-side context that started has ended, and no socket is left over.
 */
import diagnostics from 'node:diagnostics_channel';
import { type ContextStartMessage, createContext, currentContext, DiagnosticsChannel } from '@deadline/core';
import { waitingForExpiry } from '@deadline/core/internal';
import type { ServiceError } from '@grpc/grpc-js';
import { afterAll, beforeAll, expect, it } from 'vitest';
import { client, events, type Seen, type Served, serve, unary } from './support.ts';

let inventory: Served;

beforeAll(async () => {
  inventory = await serve({ serviceName: 'inventory', maxMs: 5_000 });
});
afterAll(async () => {
  await inventory?.close();
});

it('1,000 calls in one context: no listener, timer or context left behind, on either side', async () => {
  const c = client(inventory.address, { marginMs: 5 });
  // The channel's connection first, so that what is counted after is what the calls left.
  await createContext({ deadline: 5_000 }).run(() => unary(c, 'inspect', {}));
  const sockets = () => process.getActiveResourcesInfo().filter((r) => r === 'TCPSocketWrap').length;
  const socketsBefore = sockets();
  const waitingBefore = waitingForExpiry();
  let started = 0;
  let ended = 0;
  const onStart = (message: unknown) => {
    if ((message as ContextStartMessage).context.hop === 'inventory') started++;
  };
  const onEnd = (message: unknown) => {
    if ((message as ContextStartMessage).context.hop === 'inventory') ended++;
  };
  // The handler's runs: every answered call's, and those of the cut-off calls that reached it before their caller
  // gave up (on a loaded machine, a call's 20 ms may pass before the server gets to it: it then never starts there).
  let handled = 0;
  const onInspect = () => handled++;
  events.on('inspect', onInspect);
  diagnostics.subscribe(DiagnosticsChannel.ContextStart, onStart);
  diagnostics.subscribe(DiagnosticsChannel.ContextEnd, onEnd);
  const request = createContext({ deadline: 120_000, hop: 'gateway' });
  let answered = 0;
  let cutOff = 0;
  try {
    await request.run(async () => {
      for (let i = 0; i < 1_000; i++) {
        // Every fifth call is cut off by a deadline of its own while the handler waits; the rest are answered.
        if (i % 5 === 4) {
          const error = (await unary(c, 'inspect', { wait: true }, { deadline: Date.now() + 20 }).catch(
            (e: ServiceError) => e,
          )) as ServiceError;
          if (error.code === 4) cutOff++;
        } else {
          await unary<Seen>(c, 'inspect', {});
          answered++;
        }
      }
      const scope = currentContext() as unknown as { _listeners?: unknown[]; _waiting: number };
      expect(scope._listeners ?? []).toHaveLength(0);
      expect(scope._waiting).toBe(-1);
    });
    expect(answered).toBe(800);
    expect(cutOff).toBe(200);
    // The server's side of a cut-off call may end a moment after its caller gave up: wait for it, then count.
    await expect.poll(() => ended, { timeout: 10_000 }).toBe(started);
  } finally {
    request.end();
    events.off('inspect', onInspect);
    diagnostics.unsubscribe(DiagnosticsChannel.ContextStart, onStart);
    diagnostics.unsubscribe(DiagnosticsChannel.ContextEnd, onEnd);
  }
  expectOneContextPerCallServed(started, handled);
  expect(waitingForExpiry()).toBe(waitingBefore);
  expect(sockets()).toBe(socketsBefore);
  c.close();
}, 60_000);

/**
 * One server-side context per call the server got to, never two: at least one per handler run (every answered call
 * ran it; a cut-off call that reached it did too), at most one per call made. All 1,000 on a quiet machine.
 */
function expectOneContextPerCallServed(started: number, handled: number): void {
  expect(handled).toBeGreaterThanOrEqual(800);
  expect(started).toBeGreaterThanOrEqual(handled);
  expect(started).toBeLessThanOrEqual(1_000);
  if (started < 1_000) console.log(`${1_000 - started} cut-off calls never reached the server before they were cut`);
}
