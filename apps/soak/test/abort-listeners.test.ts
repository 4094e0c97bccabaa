/** The abort-listener count: listeners on live signals, added by anyone, removed ones gone, collected signals forgotten. */
import { setTimeout as sleep } from 'node:timers/promises';
import { describe, expect, it } from 'vitest';
import { liveAbortListeners, trackAbortListeners } from '../src/abort-listeners.ts';
import { sampleProcess } from '../src/process-probe.ts';

trackAbortListeners();

describe('liveAbortListeners', () => {
  it('counts the listeners a long-lived signal keeps, and not those removed', () => {
    const before = liveAbortListeners().listeners;
    const longLived = new AbortController();
    const listeners = Array.from({ length: 5 }, () => () => {});
    for (const listener of listeners) longLived.signal.addEventListener('abort', listener);
    expect(liveAbortListeners().listeners - before).toBe(5);
    for (const listener of listeners.slice(0, 3)) longLived.signal.removeEventListener('abort', listener);
    expect(liveAbortListeners().listeners - before).toBe(2);
    longLived.abort();
  });

  it('sees the listeners Node adds itself (a timers/promises sleep with a signal)', async () => {
    const before = liveAbortListeners().listeners;
    const controller = new AbortController();
    const sleeping = sleep(60_000, undefined, { signal: controller.signal }).catch(() => 'stopped');
    expect(liveAbortListeners().listeners - before).toBe(1);
    controller.abort();
    expect(await sleeping).toBe('stopped');
    expect(liveAbortListeners().listeners - before).toBe(0);
  });

  it('forgets signals once collected: 1,000 short-lived ones leave nothing counted', async () => {
    const before = liveAbortListeners();
    for (let i = 0; i < 1_000; i++) new AbortController().signal.addEventListener('abort', () => {});
    // A WeakRef keeps its target until the end of the current job: let it end, then collect.
    await sleep(0);
    sampleProcess();
    const after = liveAbortListeners();
    expect(after.signals).toBeLessThanOrEqual(before.signals);
    expect(after.listeners).toBeLessThanOrEqual(before.listeners);
  });
});
