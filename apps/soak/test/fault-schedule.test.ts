/** The fault plan: the same five faults in the same order at any length, holds scaled with a floor, quiet at the end. */
import fc from 'fast-check';
import { describe, expect, it } from 'vitest';
import { faultPlan } from '../src/fault-schedule.ts';

describe('faultPlan', () => {
  it('ten minutes: a restart at 90 s, 30 s of drip from 390 s, nothing after 420 s', () => {
    const plan = faultPlan(600_000);
    expect(plan.map((f) => f.kind)).toEqual([
      'postgres-restart',
      'redis-restart',
      'mariadb-kill',
      'hop-paused',
      'slow-drip',
    ]);
    expect(plan[0]).toEqual({ kind: 'postgres-restart', at: 90_000, holdMs: 0 });
    expect(plan[3]?.holdMs).toBe(5_000);
    expect(plan[4]).toEqual({ kind: 'slow-drip', at: 390_000, holdMs: 30_000 });
  });

  it('any length from 30 s: in order, each fault over before the next starts, the last quarter quiet', () => {
    fc.assert(
      fc.property(fc.integer({ min: 30_000, max: 24 * 3_600_000 }), (durationMs) => {
        const plan = faultPlan(durationMs);
        for (let i = 1; i < plan.length; i++) {
          const previous = plan[i - 1] as (typeof plan)[number];
          expect((plan[i] as (typeof plan)[number]).at).toBeGreaterThan(previous.at + previous.holdMs);
        }
        const last = plan.at(-1) as (typeof plan)[number];
        expect(last.at + last.holdMs).toBeLessThanOrEqual(0.82 * durationMs);
      }),
    );
  });

  it('refuses a run too short for the plan, or not a number', () => {
    for (const bad of [0, 29_999, Number.NaN, -1]) expect(() => faultPlan(bad)).toThrow(RangeError);
  });
});
