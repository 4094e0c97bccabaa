/**
 * Random sequences of admissions, outcomes, clock steps, state reads and resets, fed to a real breaker and to a
 * reference model written the plain way (a list of timestamped outcomes filtered by bucket, a Map of probes):
 * every admission, every transition (with its reason and cooldown) and every stats read must agree, and the
 * invariants hold whatever the model says.
 */
import fc from 'fast-check';
import { describe, expect, it } from 'vitest';
import {
  type BreakerPermit,
  type BreakerStateEvent,
  CircuitBreaker,
  CircuitOpenError,
  type CircuitState,
} from '../src/index.ts';

const CONFIG = {
  failureThreshold: 2,
  failureRateThreshold: 0.5,
  minimumCalls: 3,
  windowMs: 1_000,
  buckets: 4,
  slowCallMs: 50,
  slowCallRateThreshold: 0.5,
  cooldownMs: 100,
  cooldownMultiplier: 2,
  maxCooldownMs: 400,
  halfOpenMaxProbes: 2,
  successesToClose: 2,
  probeTimeoutMs: 300,
} as const;
const BUCKET_MS = CONFIG.windowMs / CONFIG.buckets;

const ORIGIN = 10_000;

type Kind = 'success' | 'failure' | 'neutral' | 'slow' | 'slow-failure';
type Op =
  | { op: 'acquire' }
  | { op: 'settle'; pick: number; kind: Kind }
  | { op: 'advance'; ms: number }
  | { op: 'read' }
  | { op: 'reset' };

interface ModelPermit {
  id: number;
  generation: number;
  probe: boolean;
  startedAt: number;
}

/** The spec, written without any of the implementation's tricks (no ring, no typed arrays). */
class Model {
  state: CircuitState = 'closed';
  generation = 0;
  entries: { epoch: number; failed: boolean; slow: boolean }[] = [];
  openedAt = 0;
  cooldownMs: number = CONFIG.cooldownMs;
  probes = new Map<number, number>(); // permit id → admitted at
  successes = 0;
  opens = 0;
  transitions: string[] = [];

  epoch(now: number) {
    return Math.floor((now - ORIGIN) / BUCKET_MS);
  }
  inWindow(now: number) {
    const current = this.epoch(now);
    return this.entries.filter((e) => e.epoch > current - CONFIG.buckets);
  }
  transition(to: CircuitState, reason: string, now: number) {
    this.transitions.push(`${this.state}→${to}:${reason}@${to === 'open' ? this.cooldownMs : '-'}`);
    this.state = to;
    this.generation++;
    this.probes.clear();
    this.successes = 0;
    if (to === 'open') {
      this.openedAt = now;
      this.opens++;
    } else if (to === 'closed') {
      this.entries = [];
      this.cooldownMs = CONFIG.cooldownMs;
    }
  }
  reopen(reason: string, now: number) {
    this.cooldownMs = Math.min(this.cooldownMs * CONFIG.cooldownMultiplier, CONFIG.maxCooldownMs);
    this.transition('open', reason, now);
  }
  observe(now: number) {
    if (this.state === 'open') {
      if (now - this.openedAt >= this.cooldownMs) this.transition('half-open', 'cooldown-elapsed', now);
    } else if (this.state === 'half-open') {
      if ([...this.probes.values()].some((at) => now - at >= CONFIG.probeTimeoutMs)) {
        this.reopen('probe-timed-out', now);
      }
    }
  }
  acquire(now: number, id: number): ModelPermit | { refused: 'open' | 'half-open'; retryAfterMs: number } {
    if (this.state !== 'closed') this.observe(now);
    if (this.state === 'open') return { refused: 'open', retryAfterMs: this.openedAt + this.cooldownMs - now };
    if (this.state === 'half-open') {
      if (this.probes.size >= CONFIG.halfOpenMaxProbes) return { refused: 'half-open', retryAfterMs: 0 };
      this.probes.set(id, now);
      return { id, generation: this.generation, probe: true, startedAt: now };
    }
    return { id, generation: this.generation, probe: false, startedAt: now };
  }
  settle(permit: ModelPermit, kind: Kind, now: number) {
    if (permit.generation !== this.generation) return;
    const failed = kind === 'failure' || kind === 'slow-failure';
    const slow = kind === 'slow' || kind === 'slow-failure';
    if (!permit.probe) {
      if (kind === 'neutral') return;
      this.entries.push({ epoch: this.epoch(now), failed, slow });
      const w = this.inWindow(now);
      const calls = w.length;
      const failures = w.filter((e) => e.failed).length;
      const slowCalls = w.filter((e) => e.slow).length;
      if (calls < CONFIG.minimumCalls) return;
      if (failures >= CONFIG.failureThreshold && failures / calls >= CONFIG.failureRateThreshold) {
        this.transition('open', 'failure-rate', now);
      } else if (slowCalls / calls >= CONFIG.slowCallRateThreshold) {
        this.transition('open', 'slow-call-rate', now);
      }
      return;
    }
    this.probes.delete(permit.id);
    if (now - permit.startedAt >= CONFIG.probeTimeoutMs) return this.reopen('probe-timed-out', now);
    if (kind === 'neutral') return;
    if (failed) return this.reopen('probe-failed', now);
    if (slow) return this.reopen('probe-slow', now);
    if (++this.successes >= CONFIG.successesToClose) this.transition('closed', 'probes-succeeded', now);
  }
  reset(now: number) {
    if (this.state !== 'closed') return this.transition('closed', 'reset', now);
    this.generation++;
    this.entries = [];
    this.cooldownMs = CONFIG.cooldownMs;
  }
  stats(now: number) {
    if (this.state !== 'closed') this.observe(now);
    const w = this.inWindow(now);
    const calls = w.length;
    const failures = w.filter((e) => e.failed).length;
    const slowCalls = w.filter((e) => e.slow).length;
    return {
      state: this.state,
      calls,
      failures,
      slowCalls,
      failureRate: calls === 0 ? 0 : failures / calls,
      slowCallRate: calls === 0 ? 0 : slowCalls / calls,
      cooldownMs: this.cooldownMs,
      retryAfterMs: this.state === 'open' ? Math.max(0, this.openedAt + this.cooldownMs - now) : 0,
      probesInFlight: this.probes.size,
      consecutiveSuccesses: this.successes,
      opens: this.opens,
    };
  }
}

const ALLOWED = new Set([
  'closed→open',
  'open→half-open',
  'half-open→open',
  'half-open→closed',
  'open→closed', // reset() only
]);

const opArb: fc.Arbitrary<Op> = fc.oneof(
  { weight: 12, arbitrary: fc.constant({ op: 'acquire' as const }) },
  {
    weight: 12,
    arbitrary: fc.record({
      op: fc.constant('settle' as const),
      pick: fc.nat(),
      // Successes weigh more, or a half-open circuit would rarely see two in a row.
      kind: fc.oneof(
        { weight: 5, arbitrary: fc.constant<Kind>('success') },
        { weight: 2, arbitrary: fc.constant<Kind>('failure') },
        { weight: 1, arbitrary: fc.constantFrom<Kind>('neutral', 'slow', 'slow-failure') },
      ),
    }),
  },
  {
    weight: 6,
    arbitrary: fc.record({
      op: fc.constant('advance' as const),
      // Bucket and cooldown edges (…99, 100, 250, 300) come up often; a long idle now and then.
      ms: fc.oneof(fc.integer({ min: 0, max: 320 }), fc.constantFrom(1, 99, 100, 250, 299, 300, 1_000, 5_000)),
    }),
  },
  { weight: 2, arbitrary: fc.constant({ op: 'read' as const }) },
  { weight: 1, arbitrary: fc.constant({ op: 'reset' as const }) },
);

// Exactly slowCallMs is slow; one ms under is not: the boundary is exercised on every settle.
const durationOf = (kind: Kind) =>
  kind === 'slow' || kind === 'slow-failure' ? CONFIG.slowCallMs : CONFIG.slowCallMs - 1;

describe('CircuitBreaker against a reference model', () => {
  // 120 s: on a clock of its own (no timer, no I/O), its length is the CPU share it gets: about 8 s on a quiet machine,
  // 28 s with both cores busy, against the suite's 30 s a test.
  it('agrees on every admission, transition and stats read; invariants hold', () => {
    fc.assert(
      fc.property(fc.array(opArb, { minLength: 1, maxLength: 300, size: 'max' }), (ops) => {
        let now = ORIGIN;
        const breaker = new CircuitBreaker({ target: 'model', now: () => now, ...CONFIG });
        const model = new Model();
        const events: BreakerStateEvent[] = [];
        breaker.on('state', (event) => events.push(event));
        const outstanding: { real: BreakerPermit; model: ModelPermit }[] = [];
        let nextId = 0;
        let openUntil = Number.NEGATIVE_INFINITY; // from the events alone: no admission may happen before it

        for (const op of ops) {
          const eventsBefore = events.length;
          switch (op.op) {
            case 'acquire': {
              const expected = model.acquire(now, nextId);
              let real: BreakerPermit | CircuitOpenError;
              try {
                real = breaker.acquire();
              } catch (error) {
                if (!(error instanceof CircuitOpenError)) throw error;
                real = error;
              }
              if ('refused' in expected) {
                expect(real).toBeInstanceOf(CircuitOpenError);
                expect((real as CircuitOpenError).state).toBe(expected.refused);
                expect((real as CircuitOpenError).retryAfterMs).toBe(expected.retryAfterMs);
              } else {
                expect(real).not.toBeInstanceOf(CircuitOpenError);
                expect((real as BreakerPermit).probe).toBe(expected.probe);
                expect(now).toBeGreaterThanOrEqual(openUntil); // never admitted while open before the cooldown
                outstanding.push({ real: real as BreakerPermit, model: expected });
                nextId++;
              }
              break;
            }
            case 'settle': {
              if (outstanding.length === 0) break;
              const [permit] = outstanding.splice(op.pick % outstanding.length, 1);
              if (permit === undefined) break;
              model.settle(permit.model, op.kind, now);
              const duration = durationOf(op.kind);
              if (op.kind === 'neutral') permit.real.neutral();
              else if (op.kind === 'failure' || op.kind === 'slow-failure') permit.real.failure(duration);
              else permit.real.success(duration);
              break;
            }
            case 'advance':
              now += op.ms;
              break;
            case 'read':
              expect(breaker.stats).toEqual(model.stats(now));
              break;
            case 'reset':
              model.reset(now);
              breaker.reset();
              break;
          }
          // Transitions: the same ones, in the same order, along allowed edges only, chained.
          for (const event of events.slice(eventsBefore)) {
            expect(ALLOWED.has(`${event.from}→${event.to}`)).toBe(true);
            if (event.from === 'open' && event.to === 'closed') expect(event.reason).toBe('reset');
            expect(event.stats.state).toBe(event.to);
            expect(event.stats.probesInFlight).toBeLessThanOrEqual(CONFIG.halfOpenMaxProbes);
            openUntil = event.to === 'open' ? now + event.cooldownMs : Number.NEGATIVE_INFINITY;
          }
          for (let i = 1; i < events.length; i++) expect(events[i]?.from).toBe(events[i - 1]?.to);
          expect(events.map((e) => `${e.from}→${e.to}:${e.reason}@${e.to === 'open' ? e.cooldownMs : '-'}`)).toEqual(
            model.transitions,
          );
          // Never more than N probes in flight (the model counts them; the real breaker reports them on reads).
          expect(model.probes.size).toBeLessThanOrEqual(CONFIG.halfOpenMaxProbes);
        }
        expect(breaker.stats).toEqual(model.stats(now));
      }),
      { numRuns: 300 },
    );
  }, 120_000);
});
