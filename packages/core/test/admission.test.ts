/**
 * Admission's rule on its own, on this process's real event loop (kept busy on purpose where a test needs a queue):
 * an idle loop refuses only what could not finish at all; a loaded one refuses what cannot cover the queue plus the
 * route's time; urgency moves a request ahead or behind; an estimate poisoned by a burst is tested by probes and
 * recovers; the table of routes is bounded.
 */
import { describe, expect, it } from 'vitest';
import { spin, untilLoopIdle } from '../../../test/support/busy-loop.ts';
import { Admission, LOADED_MS, loopDelayMs } from '../src/internal.ts';

/** A route that answered `count` requests in time, taking `ms` each (or 50–150 ms, spread evenly, for `'spread'`). */
function taught(admission: Admission, key: string, ms: number | 'spread', count = 50) {
  const route = admission.route(key);
  for (let i = 0; i < count; i++) {
    route.enter();
    route.leave(ms === 'spread' ? 50 + (100 * i) / count : ms, true, false);
  }
  return route;
}

describe('Admission', () => {
  it('on an idle loop, refuses only a request with less left than the route fastest typical time', async () => {
    const admission = new Admission();
    const route = taught(admission, 'GET /a', 'spread');
    await untilLoopIdle(loopDelayMs);
    // Below the route's 90th percentile, but above its fastest: let in (no queue, it may well finish).
    expect(admission.check(route, 100, undefined)).toMatchObject({ admitted: true, probe: false });
    route.enter(); // one of the route's in flight: the estimate is not being tested
    const refused = admission.check(route, 40, undefined);
    expect(refused).toMatchObject({ admitted: false, reason: 'too-little-time', remainingMs: 40 });
    expect(refused.admitted === false && refused.neededMs).toBeGreaterThanOrEqual(60);
  });

  it('says nothing of a route before its warm-up: no estimate, no refusal on an idle loop', async () => {
    const admission = new Admission();
    const route = taught(admission, 'GET /new', 500, 5);
    await untilLoopIdle(loopDelayMs);
    route.enter();
    expect(admission.check(route, 1, undefined).admitted).toBe(true);
  });

  it('on a loaded loop, refuses what cannot cover the queue plus the route 90th percentile, with Retry-After', async () => {
    const admission = new Admission();
    const route = taught(admission, 'GET /b', 20);
    await untilLoopIdle(loopDelayMs);
    spin(200);
    const refused = admission.check(route, 150, undefined);
    expect(refused).toMatchObject({ admitted: false, reason: 'overloaded', retryAfterS: 1 });
    if (refused.admitted) return;
    expect(refused.queueMs).toBeGreaterThanOrEqual(150);
    expect(refused.neededMs).toBeGreaterThanOrEqual(refused.queueMs + 20);
    // With enough left for both, let in.
    expect(admission.check(route, 10_000, undefined).admitted).toBe(true);
  });

  it('urgency: below 3 is let in under load, above 3 is shed first, 3 or none is judged by its time', async () => {
    const admission = new Admission();
    const route = taught(admission, 'GET /c', 20);
    await untilLoopIdle(loopDelayMs);
    spin(LOADED_MS * 5);
    expect(admission.check(route, 5, 1).admitted).toBe(true);
    expect(admission.check(route, 100_000, 6)).toMatchObject({ admitted: false, reason: 'low-priority' });
    expect(admission.check(route, 100_000, 3).admitted).toBe(true);
    expect(admission.check(route, 100_000, undefined).admitted).toBe(true);
    await untilLoopIdle(loopDelayMs);
    // No load: urgency changes nothing.
    expect(admission.check(route, 100_000, 7).admitted).toBe(true);
  });

  it('a route poisoned by a burst of slow answers is tested by probes, and a few fast ones undo it', async () => {
    const admission = new Admission();
    const route = taught(admission, 'GET /d', 5, 200);
    // The burst: 1,000 answers of 2 s (a stall), enough to move even the route's fastest typical time.
    taught(admission, 'GET /d', 2_000, 1_000);
    await untilLoopIdle(loopDelayMs);
    route.enter();
    expect(admission.check(route, 500, undefined)).toMatchObject({ admitted: false, reason: 'too-little-time' });
    route.leave(0, false, false);
    // Nothing of the route in flight: let through to test the estimate.
    let probes = 0;
    for (; probes < 20; probes++) {
      const verdict = admission.check(route, 500, undefined);
      if (verdict.admitted && !verdict.probe) break;
      expect(verdict).toMatchObject({ admitted: true, probe: true });
      route.enter();
      route.leave(5, true, true);
    }
    // A handful of probes, not the hundreds of samples decay alone would need.
    expect(probes).toBeGreaterThan(0);
    expect(probes).toBeLessThanOrEqual(8);
  });

  it('learns from what it is told counts: an error does not move the estimate', () => {
    const admission = new Admission();
    const route = taught(admission, 'GET /e', 10);
    const before = route.time.estimate();
    for (let i = 0; i < 500; i++) {
      route.enter();
      route.leave(30_000, false, false);
    }
    expect(route.time.estimate()).toBe(before);
    expect(route.inFlight).toBe(0);
    // Requests cut at their deadline, counted at what they took: the survivors' 10 ms no longer stands.
    for (let i = 0; i < 500; i++) {
      route.enter();
      route.leave(1_000, true, false);
    }
    expect(route.time.estimate()).toBeGreaterThanOrEqual(1_000);
  });

  it('tells 1,000 routes apart and counts the rest together', () => {
    const admission = new Admission();
    const first = admission.route('GET /0');
    for (let i = 1; i < 1_000; i++) admission.route(`GET /${i}`);
    expect(admission.route('GET /0')).toBe(first);
    const overflow = admission.route('GET /1000');
    expect(overflow.key).toBe('*');
    expect(admission.route('GET /2000')).toBe(overflow);
  });
});
