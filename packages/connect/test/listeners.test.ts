/**
 * Nothing accumulates over many calls: 1,000 calls inside one long-lived context, half of them also given the same
 * long-lived AbortSignal of the caller's, leave neither the context, its signal nor that one with a listener; once
 * the context ended, none waits in the expiry queue; every server-side context ended.
 */
import diagnostics from 'node:diagnostics_channel';
import { getEventListeners } from 'node:events';
import {
  type ContextStartMessage,
  createContext,
  currentContext,
  DiagnosticsChannel,
  runWithDeadline,
} from '@deadline/core';
import { waitingForExpiry } from '@deadline/core/internal';
import { afterAll, beforeAll, expect, it } from 'vitest';
import { client, events, type Served, serve } from './support.ts';

let inventory: Served;

beforeAll(async () => {
  inventory = await serve({ serviceName: 'inventory', maxMs: 5_000 });
});
afterAll(async () => {
  await inventory?.close();
});

it('1,000 calls in one context with one signal: no listener, timer or context left behind, on either side', async () => {
  const c = client(inventory.baseUrl, 'grpc', { marginMs: 5 });
  // The session first, so that what is counted after is what the calls left.
  await runWithDeadline(5_000, () => c.inspect({}));
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
  const shutdown = new AbortController();
  let answered = 0;
  let cutOff = 0;
  try {
    await request.run(async () => {
      for (let i = 0; i < 1_000; i++) {
        // Every fifth call is cut off by a timeout of its own while the handler waits; the rest are answered. Every
        // other call brings the long-lived signal (a call of its own, linked to it), the others none (the
        // context's own signal, shared).
        const signal = i % 2 === 0 ? { signal: shutdown.signal } : {};
        if (i % 5 === 4) {
          await c.inspect({ wait: true }, { timeoutMs: 20, ...signal }).catch(() => cutOff++);
        } else {
          await c.inspect({}, signal);
          answered++;
        }
      }
      const context = currentContext();
      const scope = context as unknown as { _listeners?: unknown[] };
      expect(scope._listeners ?? []).toHaveLength(0);
      expect(getEventListeners(context?.signal as AbortSignal, 'abort')).toHaveLength(0);
    });
    expect(answered).toBe(800);
    expect(cutOff).toBe(200);
    expect(getEventListeners(shutdown.signal, 'abort')).toHaveLength(0);
    // The server's side of a cut-off call may end a moment after its caller gave up: wait for it, then count.
    await expect.poll(() => ended, { timeout: 10_000 }).toBe(started);
    expectOneContextPerCallServed(started, handled);
  } finally {
    request.end();
    events.off('inspect', onInspect);
    diagnostics.unsubscribe(DiagnosticsChannel.ContextStart, onStart);
    diagnostics.unsubscribe(DiagnosticsChannel.ContextEnd, onEnd);
  }
  expect(waitingForExpiry()).toBe(waitingBefore);
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
