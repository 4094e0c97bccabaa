import diagnostics from 'node:diagnostics_channel';
import { once } from 'node:events';
import {
  CancelledError,
  currentSignal,
  DeadlineExceededError,
  InvalidArgumentError,
  remainingMs,
  runWithDeadline,
} from '@deadline/core';
import { afterEach, describe, expect, it, vi } from 'vitest';
import {
  BREAKER_STATE_CHANNEL,
  type BreakerStateEvent,
  CircuitBreaker,
  type CircuitBreakerOptions,
  CircuitOpenError,
  createBreakers,
} from '../src/index.ts';

// ————— helpers —————

interface FakeClock {
  now: () => number;
  advance(ms: number): void;
}
function fakeClock(start = 1_000): FakeClock {
  let t = start;
  return { now: () => t, advance: (ms) => void (t += ms) };
}

function breakerWith(clock: FakeClock, options: Partial<CircuitBreakerOptions> = {}) {
  const breaker = new CircuitBreaker({ target: 'inventory', now: clock.now, ...options });
  const events: BreakerStateEvent[] = [];
  breaker.on('state', (event) => events.push(event));
  return { breaker, events };
}

const fail = (b: CircuitBreaker, n = 1) => {
  for (let i = 0; i < n; i++) b.acquire().failure();
};
const succeed = (b: CircuitBreaker, n = 1, durationMs?: number) => {
  for (let i = 0; i < n; i++) b.acquire().success(durationMs);
};
const transitions = (events: BreakerStateEvent[]) => events.map((e) => `${e.from}→${e.to}:${e.reason}`);

/** Opens a fresh breaker with the default thresholds (10 failures). */
function openIt(b: CircuitBreaker) {
  fail(b, 10);
  expect(b.state).toBe('open');
}

function refusal(fn: () => unknown): CircuitOpenError {
  try {
    fn();
  } catch (error) {
    expect(error).toBeInstanceOf(CircuitOpenError);
    return error as CircuitOpenError;
  }
  throw new Error('expected a CircuitOpenError');
}

const subscriptions: [string, (message: unknown) => void][] = [];
function record<T>(name: string): T[] {
  const messages: T[] = [];
  const listener = (message: unknown) => messages.push(message as T);
  diagnostics.subscribe(name, listener);
  subscriptions.push([name, listener]);
  return messages;
}
afterEach(() => {
  for (const [name, listener] of subscriptions.splice(0)) diagnostics.unsubscribe(name, listener);
  vi.restoreAllMocks();
});

// ————— tests —————

describe('CircuitBreaker: opening (count AND rate AND volume)', () => {
  // Successes first, then failures, so the decision is taken on the last outcome recorded.
  it.each([
    // [successes, failures, open?, why]
    [5, 4, false, '9 calls: below minimumCalls even at 44%'],
    [0, 9, false, '9 failures, 100%: still below minimumCalls'],
    [0, 10, true, '10 failures: all three thresholds reached'],
    [5, 5, true, 'exactly at every threshold: 5 failures, 50%, 10 calls'],
    [6, 4, false, '10 calls at 40% with 4 failures: count and rate short'],
    [4, 5, false, '9 calls: one short of the volume'],
    [6, 5, false, '11 calls, 5 failures = 45%: count reached, rate not'],
    [20, 9, false, '9 failures ≥ 5 but 31%'],
    [15, 15, true, '50% of 30'],
  ] as const)('%i successes then %i failures → open=%s (%s)', (successes, failures, open, _why) => {
    const { breaker } = breakerWith(fakeClock());
    succeed(breaker, successes);
    fail(breaker, failures);
    expect(breaker.state).toBe(open ? 'open' : 'closed');
    expect(breaker.stats.calls).toBe(successes + failures);
  });

  it.each([
    // a rate of 0.3 must match 3 / 10 exactly (3 >= 0.3 * 10 is false in floating point)
    [{ failureThreshold: 3, failureRateThreshold: 0.3, minimumCalls: 10 }, 7, 3, true],
    [{ failureThreshold: 3, failureRateThreshold: 0.3, minimumCalls: 10 }, 8, 2, false],
    [{ failureThreshold: 4, failureRateThreshold: 0.3, minimumCalls: 10 }, 7, 3, false],
    [{ failureThreshold: 1, failureRateThreshold: 1, minimumCalls: 1 }, 0, 1, true],
    [{ failureThreshold: 1, failureRateThreshold: 1, minimumCalls: 2 }, 1, 1, false],
    [{ failureThreshold: 2, failureRateThreshold: 0.1, minimumCalls: 20 }, 18, 2, true],
    [{ failureThreshold: 2, failureRateThreshold: 0.1, minimumCalls: 20 }, 17, 2, false],
    // 7 / 25 is 0.28, but 0.28 * 25 is 7.000000000000001: the rate must be compared as a quotient
    [{ failureThreshold: 1, failureRateThreshold: 0.28, minimumCalls: 25 }, 18, 7, true],
    [{ failureThreshold: 1, failureRateThreshold: 0.28, minimumCalls: 25 }, 19, 6, false],
    // the default count (5) binds once the rate is low (with the default rate and volume it never binds alone)
    [{ failureRateThreshold: 0.1 }, 6, 4, false],
    [{ failureRateThreshold: 0.1 }, 5, 5, true],
  ] as const)('custom thresholds %o: %i successes, %i failures → open=%s', (options, successes, failures, open) => {
    const { breaker } = breakerWith(fakeClock(), options);
    succeed(breaker, successes);
    fail(breaker, failures);
    expect(breaker.state).toBe(open ? 'open' : 'closed');
  });

  it('a success that brings the volume up can open the circuit (5 failures then 5 successes)', () => {
    const { breaker, events } = breakerWith(fakeClock());
    fail(breaker, 5);
    succeed(breaker, 4);
    expect(breaker.state).toBe('closed');
    succeed(breaker, 1);
    expect(breaker.state).toBe('open');
    expect(transitions(events)).toEqual(['closed→open:failure-rate']);
    expect(events[0]?.stats).toMatchObject({ calls: 10, failures: 5, failureRate: 0.5, opens: 1 });
  });

  it('neutral outcomes count for nothing', () => {
    const { breaker } = breakerWith(fakeClock());
    for (let i = 0; i < 50; i++) breaker.acquire().neutral();
    fail(breaker, 9);
    expect(breaker.state).toBe('closed');
    expect(breaker.stats).toMatchObject({ calls: 9, failures: 9 });
  });
});

describe('CircuitBreaker: the sliding window', () => {
  it('an outcome leaves the window exactly windowMs after its bucket began', () => {
    const clock = fakeClock();
    const { breaker } = breakerWith(clock);
    fail(breaker, 9); // bucket [0, 1000)
    clock.advance(9_999);
    expect(breaker.stats.calls).toBe(9);
    clock.advance(1);
    expect(breaker.stats.calls).toBe(0);
    fail(breaker, 1);
    expect(breaker.state).toBe('closed'); // the first nine expired: one failure in the window
  });

  it('one ms before expiry the old outcomes still count and open the circuit', () => {
    const clock = fakeClock();
    const { breaker } = breakerWith(clock);
    fail(breaker, 9);
    clock.advance(9_999);
    fail(breaker, 1);
    expect(breaker.state).toBe('open');
  });

  it('buckets: an outcome at the end of a bucket expires with it; one in the next bucket lives on', () => {
    const clock = fakeClock();
    const { breaker } = breakerWith(clock);
    clock.advance(999);
    fail(breaker, 3); // bucket 0, recorded at 999
    clock.advance(1); // 1000: bucket 1
    fail(breaker, 4);
    clock.advance(8_999); // 9_999
    expect(breaker.stats.calls).toBe(7);
    clock.advance(1); // 10_000: bucket 0 is reused (its outcomes lived 9_001 ms)
    expect(breaker.stats).toMatchObject({ calls: 4, failures: 4 });
    clock.advance(999); // 10_999
    expect(breaker.stats.calls).toBe(4);
    clock.advance(1); // 11_000
    expect(breaker.stats.calls).toBe(0);
  });

  it('rotates correctly across a partial gap (buckets between are cleared, newer ones kept)', () => {
    const clock = fakeClock();
    const { breaker } = breakerWith(clock);
    fail(breaker, 3); // epoch 0
    clock.advance(5_000);
    fail(breaker, 4); // epoch 5
    clock.advance(7_000); // epoch 12: window covers epochs 3..12
    expect(breaker.stats.calls).toBe(4);
    clock.advance(2_999); // 14_999: epoch 14
    expect(breaker.stats.calls).toBe(4);
    clock.advance(1); // epoch 15
    expect(breaker.stats.calls).toBe(0);
  });

  it('after a long idle the whole ring is cleared, even when the idle is an exact multiple of the window', () => {
    const clock = fakeClock();
    const { breaker } = breakerWith(clock);
    fail(breaker, 5);
    clock.advance(20_000); // same ring slot as the stale bucket
    expect(breaker.stats.calls).toBe(0);
    fail(breaker, 9);
    clock.advance(3_600_000); // an hour
    fail(breaker, 1);
    expect(breaker.stats).toMatchObject({ calls: 1, failures: 1 });
    expect(breaker.state).toBe('closed');
    clock.advance(25_500);
    fail(breaker, 9);
    clock.advance(4_000);
    fail(breaker, 1);
    expect(breaker.state).toBe('open');
  });

  it('one bucket: the window is a tumbling window', () => {
    const clock = fakeClock();
    const { breaker } = breakerWith(clock, { buckets: 1, windowMs: 1_000 });
    fail(breaker, 9);
    clock.advance(999);
    expect(breaker.stats.calls).toBe(9);
    clock.advance(1);
    expect(breaker.stats.calls).toBe(0);
  });
});

describe('CircuitBreaker: slow calls', () => {
  it.each([
    [5, true],
    [4, false],
  ])('%i slow successes out of 10 calls → open=%s (threshold 0.5)', (slow, open) => {
    const { breaker, events } = breakerWith(fakeClock(), { slowCallMs: 100 });
    succeed(breaker, 10 - slow, 99);
    succeed(breaker, slow, 100);
    expect(breaker.state).toBe(open ? 'open' : 'closed');
    expect(breaker.stats.slowCalls).toBe(slow);
    if (open) expect(transitions(events)).toEqual(['closed→open:slow-call-rate']);
  });

  it('measures execute() durations on the breaker clock; slow failures count as both', async () => {
    const clock = fakeClock();
    const { breaker } = breakerWith(clock, { slowCallMs: 100, slowCallRateThreshold: 0.3, minimumCalls: 5 });
    for (let i = 0; i < 2; i++) await breaker.execute(() => 'fast');
    await breaker.execute(async () => {
      clock.advance(150);
      return 'slow';
    });
    await expect(
      breaker.execute(() => {
        clock.advance(100);
        throw Object.assign(new Error('boom'), { statusCode: 500 });
      }),
    ).rejects.toThrow('boom');
    expect(breaker.stats).toMatchObject({ calls: 4, failures: 1, slowCalls: 2, state: 'closed' });
    await breaker.execute(() => 'fast');
    expect(breaker.stats.state).toBe('open'); // 2 / 5 = 0.4 ≥ 0.3
  });

  it('the minimum volume applies to the slow-call rate', () => {
    const { breaker } = breakerWith(fakeClock(), { slowCallMs: 10 });
    succeed(breaker, 9, 1_000);
    expect(breaker.state).toBe('closed');
    succeed(breaker, 1, 1_000);
    expect(breaker.state).toBe('open');
  });

  it('without slowCallMs nothing is slow', () => {
    const { breaker } = breakerWith(fakeClock());
    succeed(breaker, 20, 1_000_000);
    expect(breaker.stats).toMatchObject({ state: 'closed', slowCalls: 0 });
  });

  it('a slow probe (at least slowCallMs) reopens the circuit; one just under is a success', () => {
    const clock = fakeClock();
    const { breaker, events } = breakerWith(clock, { slowCallMs: 100 });
    openIt(breaker);
    clock.advance(10_000);
    breaker.acquire().success(99);
    expect(breaker.stats).toMatchObject({ state: 'half-open', consecutiveSuccesses: 1 });
    breaker.acquire().success(100);
    expect(breaker.state).toBe('open');
    expect(transitions(events).at(-1)).toBe('half-open→open:probe-slow');
  });
});

describe('CircuitBreaker: open and cooldown', () => {
  it('fails fast while open: fn is never invoked, the error says when to retry', async () => {
    const clock = fakeClock();
    const { breaker } = breakerWith(clock);
    openIt(breaker);
    const fn = vi.fn(() => 'called');
    clock.advance(9_000);
    const error = await breaker.execute(fn).catch((e: unknown) => e);
    expect(error).toBeInstanceOf(CircuitOpenError);
    expect(error).toMatchObject({ target: 'inventory', state: 'open', retryAfterMs: 1_000, statusCode: 503 });
    expect((error as CircuitOpenError).headers).toEqual({ 'retry-after': '1' });
    clock.advance(999);
    await expect(breaker.execute(fn)).rejects.toMatchObject({ state: 'open', retryAfterMs: 1 });
    expect(fn).not.toHaveBeenCalled();
    expect(breaker.stats).toMatchObject({ state: 'open', retryAfterMs: 1, cooldownMs: 10_000 });
  });

  it('CircuitOpenError: 503 and Retry-After in whole seconds, at least 1', () => {
    expect(new CircuitOpenError('x', 'open', 10_000).headers).toEqual({ 'retry-after': '10' });
    expect(new CircuitOpenError('x', 'open', 10_001).headers).toEqual({ 'retry-after': '11' });
    expect(new CircuitOpenError('x', 'open', 1).headers).toEqual({ 'retry-after': '1' });
    expect(new CircuitOpenError('x', 'half-open', 0).headers).toEqual({ 'retry-after': '1' });
    expect(new CircuitOpenError('x', 'open', 0).statusCode).toBe(503);
  });

  it('cooldown doubles on each failed probe: 10 s, 20 s, 40 s … capped at 300 s; back to 10 s once closed', () => {
    const clock = fakeClock();
    const { breaker, events } = breakerWith(clock);
    openIt(breaker);
    const seen: number[] = [];
    for (let i = 0; i < 8; i++) {
      const { cooldownMs } = breaker.stats;
      seen.push(cooldownMs);
      clock.advance(cooldownMs - 1);
      expect(breaker.state).toBe('open');
      clock.advance(1);
      expect(breaker.state).toBe('half-open');
      breaker.acquire().failure();
      expect(breaker.state).toBe('open');
    }
    expect(seen).toEqual([10_000, 20_000, 40_000, 80_000, 160_000, 300_000, 300_000, 300_000]);
    expect(events.filter((e) => e.to === 'open').map((e) => e.cooldownMs)).toEqual([
      10_000, 20_000, 40_000, 80_000, 160_000, 300_000, 300_000, 300_000, 300_000,
    ]);
    // Close it: the next opening starts from the base again.
    clock.advance(300_000);
    succeed(breaker, 2);
    expect(breaker.state).toBe('closed');
    expect(breaker.stats.cooldownMs).toBe(10_000);
    openIt(breaker);
    expect(breaker.stats).toMatchObject({ cooldownMs: 10_000, retryAfterMs: 10_000, opens: 10 });
  });

  it('cooldownMultiplier and maxCooldownMs are honoured', () => {
    const clock = fakeClock();
    const { breaker } = breakerWith(clock, { cooldownMs: 1_000, cooldownMultiplier: 3, maxCooldownMs: 5_000 });
    openIt(breaker);
    const seen: number[] = [];
    for (let i = 0; i < 4; i++) {
      seen.push(breaker.stats.cooldownMs);
      clock.advance(breaker.stats.cooldownMs);
      breaker.acquire().failure();
    }
    expect(seen).toEqual([1_000, 3_000, 5_000, 5_000]);
  });

  it('maxCooldownMs defaults to cooldownMs when that is larger than 300 s', () => {
    const { breaker } = breakerWith(fakeClock(), { cooldownMs: 600_000 });
    openIt(breaker);
    expect(breaker.stats.cooldownMs).toBe(600_000);
  });

  it('runs no timers: an open breaker left alone stays open until observed', () => {
    const clock = fakeClock();
    const { breaker, events } = breakerWith(clock);
    openIt(breaker);
    clock.advance(1_000_000);
    expect(events).toHaveLength(1); // nothing happened by itself
    expect(breaker.state).toBe('half-open'); // observed now
    expect(transitions(events)).toEqual(['closed→open:failure-rate', 'open→half-open:cooldown-elapsed']);
  });
});

describe('CircuitBreaker: half-open', () => {
  function halfOpen(options: Partial<CircuitBreakerOptions> = {}) {
    const clock = fakeClock();
    const made = breakerWith(clock, options);
    openIt(made.breaker);
    clock.advance(10_000);
    return { clock, ...made };
  }

  it.each([1, 3, 7])(
    '100 concurrent callers, halfOpenMaxProbes %i: exactly that many probes run, the rest are refused at once',
    async (probes) => {
      const { breaker } = halfOpen({ halfOpenMaxProbes: probes, successesToClose: probes });
      let invocations = 0;
      let release!: () => void;
      const gate = new Promise<void>((resolve) => (release = resolve));
      const calls = Array.from({ length: 100 }, () =>
        breaker.execute(async () => {
          invocations++;
          await gate;
          return 'ok';
        }),
      );
      // The refused callers settle while every probe is still blocked on the gate: nobody waits for a probe.
      const refused = await Promise.allSettled(calls.slice(probes));
      expect(invocations).toBe(probes);
      expect(refused).toHaveLength(100 - probes);
      for (const r of refused) {
        expect(r.status).toBe('rejected');
        const reason = (r as PromiseRejectedResult).reason as CircuitOpenError;
        expect(reason).toBeInstanceOf(CircuitOpenError);
        expect(reason.state).toBe('half-open');
        expect(reason.headers).toEqual({ 'retry-after': '1' });
      }
      expect(breaker.stats).toMatchObject({ state: 'half-open', probesInFlight: probes });
      release();
      expect(await Promise.all(calls.slice(0, probes))).toEqual(Array(probes).fill('ok'));
      expect(breaker.state).toBe('closed');
    },
  );

  it('successesToClose consecutive successes close it; the window starts empty', () => {
    const { breaker, events } = halfOpen();
    succeed(breaker);
    expect(breaker.stats).toMatchObject({ state: 'half-open', consecutiveSuccesses: 1, probesInFlight: 0 });
    succeed(breaker);
    expect(breaker.state).toBe('closed');
    expect(breaker.stats).toMatchObject({ calls: 0, failures: 0, cooldownMs: 10_000 });
    expect(transitions(events)).toEqual([
      'closed→open:failure-rate',
      'open→half-open:cooldown-elapsed',
      'half-open→closed:probes-succeeded',
    ]);
  });

  it.each([1, 2, 5])('successesToClose %i', (m) => {
    const { breaker } = halfOpen({ successesToClose: m });
    succeed(breaker, m - 1);
    expect(breaker.state).toBe('half-open');
    succeed(breaker);
    expect(breaker.state).toBe('closed');
  });

  it('a failed probe reopens with the next, longer cooldown and resets the streak', () => {
    const { breaker, clock, events } = halfOpen();
    succeed(breaker);
    fail(breaker);
    expect(breaker.stats).toMatchObject({ state: 'open', cooldownMs: 20_000, retryAfterMs: 20_000, opens: 2 });
    expect(transitions(events).at(-1)).toBe('half-open→open:probe-failed');
    clock.advance(20_000);
    succeed(breaker);
    expect(breaker.stats).toMatchObject({ state: 'half-open', consecutiveSuccesses: 1 });
  });

  it('a neutral probe frees its slot without counting', () => {
    const { breaker } = halfOpen();
    const probe = breaker.acquire();
    expect(probe.probe).toBe(true);
    expect(refusal(() => breaker.acquire()).state).toBe('half-open');
    probe.neutral();
    expect(breaker.stats).toMatchObject({ state: 'half-open', probesInFlight: 0, consecutiveSuccesses: 0 });
    const next = breaker.acquire();
    expect(next.probe).toBe(true);
    next.success();
    breaker.acquire().neutral(); // neutral neither counts nor breaks the streak
    succeed(breaker);
    expect(breaker.state).toBe('closed');
  });

  it('a probe of execute() that is neutral (a 404) frees the slot', async () => {
    const { breaker } = halfOpen();
    const notFound = Object.assign(new Error('not found'), { statusCode: 404 });
    await expect(
      breaker.execute(() => {
        throw notFound;
      }),
    ).rejects.toBe(notFound);
    expect(breaker.stats).toMatchObject({ state: 'half-open', probesInFlight: 0 });
  });

  it('a probe permit left unsettled past probeTimeoutMs times out (seen lazily) and reopens; its late settle is ignored', () => {
    const { breaker, clock, events } = halfOpen();
    const probe = breaker.acquire();
    clock.advance(4_999);
    expect(breaker.state).toBe('half-open');
    expect(refusal(() => breaker.acquire()).state).toBe('half-open');
    clock.advance(1);
    expect(refusal(() => breaker.acquire())).toMatchObject({ state: 'open', retryAfterMs: 20_000 });
    expect(transitions(events).at(-1)).toBe('half-open→open:probe-timed-out');
    probe.success();
    expect(breaker.stats).toMatchObject({ state: 'open', consecutiveSuccesses: 0 });
  });

  it('a probe settled after probeTimeoutMs is a failure, whatever it reports', () => {
    const { breaker, clock, events } = halfOpen();
    const probe = breaker.acquire();
    clock.advance(5_000);
    probe.success(); // nobody observed the breaker in between
    expect(breaker.stats.state).toBe('open');
    expect(transitions(events).at(-1)).toBe('half-open→open:probe-timed-out');
  });

  it('a probe exceeding a real probeTimeoutMs fails: fn gets the probe context’s signal and its deadline', async () => {
    const clock = fakeClock();
    const { breaker, events } = breakerWith(clock, { probeTimeoutMs: 50 });
    openIt(breaker);
    clock.advance(10_000);
    let sawRemaining = Number.NaN;
    let sameAsCurrent = false;
    const started = performance.now();
    const error = await breaker
      .execute(async (signal) => {
        sawRemaining = remainingMs();
        sameAsCurrent = signal === currentSignal();
        if (signal === undefined) throw new Error('no signal');
        await once(signal, 'abort');
        throw signal.reason;
      })
      .catch((e: unknown) => e);
    expect(performance.now() - started).toBeGreaterThanOrEqual(45);
    expect(error).toBeInstanceOf(DeadlineExceededError);
    expect(sawRemaining).toBeLessThanOrEqual(50);
    expect(sameAsCurrent).toBe(true);
    expect(transitions(events).at(-1)).toBe('half-open→open:probe-timed-out');
    expect(breaker.stats).toMatchObject({ state: 'open', cooldownMs: 20_000 });
  });

  it('a probe that outruns a real probeTimeoutMs but ignores its signal still fails (result returned)', async () => {
    const clock = fakeClock();
    const { breaker, events } = breakerWith(clock, { probeTimeoutMs: 20 });
    openIt(breaker);
    clock.advance(10_000);
    const result = await breaker.execute(async () => {
      await runWithDeadline(1_000, async () => {
        // wait past the probe's deadline without looking at its signal
        await once(AbortSignal.timeout(40), 'abort');
      });
      return 'late';
    });
    expect(result).toBe('late');
    expect(transitions(events).at(-1)).toBe('half-open→open:probe-timed-out');
  });

  it('a probe inside a request with less time than probeTimeoutMs: a deadline below the floor is neutral', async () => {
    const clock = fakeClock();
    const { breaker } = breakerWith(clock);
    openIt(breaker);
    clock.advance(10_000);
    await runWithDeadline(30, () =>
      breaker
        .execute(async (signal) => {
          await once(signal as AbortSignal, 'abort');
          throw (signal as AbortSignal).reason;
        })
        .catch(() => undefined),
    );
    expect(breaker.stats).toMatchObject({ state: 'half-open', probesInFlight: 0 });
  });

  it('a probe is judged with the time it was given: at most probeTimeoutMs, even outside any request', async () => {
    // An inner call's own deadline (not the probe's) fired on a probe given 50 ms, below the 100 ms floor.
    const clock = fakeClock();
    const { breaker } = breakerWith(clock, { probeTimeoutMs: 50 });
    openIt(breaker);
    clock.advance(10_000);
    await breaker
      .execute(() => {
        throw new DeadlineExceededError({ phase: 'during-call', target: 'inner' });
      })
      .catch(() => undefined);
    expect(breaker.stats).toMatchObject({ state: 'half-open', probesInFlight: 0 });
  });

  it('a probe permit is given at most probeTimeoutMs', async () => {
    const clock = fakeClock();
    const { breaker } = breakerWith(clock, { probeTimeoutMs: 200 });
    expect(breaker.acquire().givenMs).toBe(Number.POSITIVE_INFINITY);
    openIt(breaker);
    clock.advance(10_000);
    const inRequest = runWithDeadline(1_000, () => breaker.acquire());
    expect(inRequest.probe).toBe(true);
    expect(inRequest.givenMs).toBe(200);
    inRequest.neutral();
    const before = performance.now();
    const short = runWithDeadline(100, () => breaker.acquire());
    expect(short.givenMs).toBeLessThanOrEqual(100);
    // What was left of the request: 100 ms less the time it took to ask, however long a busy machine made that.
    expect(short.givenMs).toBeGreaterThanOrEqual(100 - (performance.now() - before));
  });
});

describe('CircuitBreaker: classification', () => {
  it.each([
    ['no context (Infinity)', undefined, 'failure'],
    ['given 50 ms < floor 100', 50, 'neutral'],
    ['given 500 ms ≥ floor 100', 500, 'failure'],
  ] as const)('a DeadlineExceededError, %s → %s', async (_name, budget, verdict) => {
    const { breaker } = breakerWith(fakeClock());
    const exceeded = new DeadlineExceededError({ phase: 'during-call', target: 'inventory' });
    const call = () =>
      breaker.execute(() => {
        throw exceeded;
      });
    await expect(budget === undefined ? call() : runWithDeadline(budget, call)).rejects.toBe(exceeded);
    expect(breaker.stats.failures).toBe(verdict === 'failure' ? 1 : 0);
    expect(breaker.stats.calls).toBe(verdict === 'failure' ? 1 : 0);
  });

  it("a downstream's own deadline (whose: 'downstream:<hop>') is neutral, whatever the call was given", async () => {
    const { breaker } = breakerWith(fakeClock());
    const reported = new DeadlineExceededError({ phase: 'during-call', whose: 'downstream:inventory' });
    await runWithDeadline(5_000, () =>
      breaker.execute(() => {
        throw reported;
      }),
    ).catch(() => undefined);
    expect(breaker.stats).toMatchObject({ calls: 0, failures: 0 });
  });

  it('deadlineFloorMs is configurable (0: every deadline counts)', async () => {
    const { breaker } = breakerWith(fakeClock(), { deadlineFloorMs: 0 });
    await runWithDeadline(5, () =>
      breaker.execute(() => {
        throw new DeadlineExceededError({ phase: 'during-call' });
      }),
    ).catch(() => undefined);
    expect(breaker.stats.failures).toBe(1);
  });

  it('a deadline that fired before the call (phase before-call) is neutral', async () => {
    const { breaker } = breakerWith(fakeClock());
    await breaker
      .execute(() => {
        throw new DeadlineExceededError({ phase: 'before-call' });
      })
      .catch(() => undefined);
    expect(breaker.stats.calls).toBe(0);
  });

  it.each([
    ['a 404', Object.assign(new Error('nf'), { statusCode: 404 }), 'neutral'],
    ['a 429', Object.assign(new Error('slow down'), { status: 429 }), 'neutral'],
    ['a validation error', new InvalidArgumentError('sku', 'a string', 1), 'neutral'],
    ['a cancel', new CancelledError('client left'), 'neutral'],
    ['a 500', Object.assign(new Error('ise'), { statusCode: 500 }), 'failure'],
    ['a 503 (axios shape)', Object.assign(new Error('unavail'), { response: { status: 503 } }), 'failure'],
    ['ECONNREFUSED', Object.assign(new Error('refused'), { code: 'ECONNREFUSED' }), 'failure'],
    ['an unknown error', new Error('?'), 'failure'],
  ] as const)('%s thrown → %s, rethrown as is', async (_name, error, verdict) => {
    const { breaker } = breakerWith(fakeClock());
    await expect(
      breaker.execute(() => {
        throw error;
      }),
    ).rejects.toBe(error);
    expect(breaker.stats.failures).toBe(verdict === 'failure' ? 1 : 0);
  });

  it('a Response with status 503 counts as a failure but is returned; 200 and 404 are successes', async () => {
    const { breaker } = breakerWith(fakeClock());
    const unavailable = new Response('down', { status: 503 });
    expect(await breaker.execute(() => unavailable)).toBe(unavailable);
    expect(await breaker.execute(async () => new Response('ok', { status: 200 }))).toBeInstanceOf(Response);
    await breaker.execute(async () => new Response('nf', { status: 404 }));
    await breaker.execute(async () => 'plain value');
    expect(breaker.stats).toMatchObject({ calls: 4, failures: 1 });
  });

  it('classify and isFailureResult options override the defaults', async () => {
    const classify = vi.fn(
      (_error: unknown, _info: { givenMs: number; deadlineFloorMs: number }) => 'neutral' as const,
    );
    const { breaker } = breakerWith(fakeClock(), {
      classify,
      isFailureResult: (result) => result === 'bad',
      deadlineFloorMs: 42,
    });
    await breaker.execute(() => Promise.reject(new Error('x'))).catch(() => undefined);
    expect(classify).toHaveBeenCalledWith(expect.any(Error), {
      givenMs: Number.POSITIVE_INFINITY,
      deadlineFloorMs: 42,
    });
    await breaker.execute(() => 'bad');
    await breaker.execute(() => 'good');
    expect(breaker.stats).toMatchObject({ calls: 2, failures: 1 });
  });

  it('a throwing classifier counts a failure, warns once, and the caller gets the call’s own outcome', async () => {
    const emitWarning = vi.spyOn(process, 'emitWarning').mockImplementation(() => undefined);
    const { breaker } = breakerWith(fakeClock(), {
      isFailureResult: () => {
        throw new Error('buggy');
      },
    });
    expect(await breaker.execute(() => 'value')).toBe('value');
    expect(await breaker.execute(() => 'value')).toBe('value');
    expect(breaker.stats.failures).toBe(2);
    expect(emitWarning.mock.calls.map((call) => call[0])).toEqual([
      'isFailureResult of the breaker for inventory threw: buggy',
    ]);
    expect(emitWarning.mock.calls[0]?.[1]).toMatchObject({ code: 'DEADLINE_BREAKER_CLASSIFIER_THREW' });
  });
});

describe('CircuitBreaker: execute() and acquire()', () => {
  it('fn gets the current context’s signal only when it declares a parameter', async () => {
    const { breaker } = breakerWith(fakeClock());
    expect(await breaker.execute((signal) => signal)).toBeUndefined(); // no context
    await runWithDeadline(1_000, async () => {
      expect(await breaker.execute((signal) => signal)).toBe(currentSignal());
      expect(await breaker.execute((...args: unknown[]) => args[0])).toBeUndefined();
    });
  });

  it('a synchronous throw in fn rejects the promise and is counted', async () => {
    const { breaker } = breakerWith(fakeClock());
    await expect(
      breaker.execute(() => {
        throw new Error('sync');
      }),
    ).rejects.toThrow('sync');
    expect(breaker.stats.failures).toBe(1);
  });

  it('rejects a non-function', async () => {
    const { breaker } = breakerWith(fakeClock());
    await expect(breaker.execute('nope' as never)).rejects.toThrow(/fn must be a function/);
  });

  it('a permit settles at most once', () => {
    const { breaker } = breakerWith(fakeClock());
    const permit = breaker.acquire();
    expect(permit.probe).toBe(false);
    permit.failure();
    permit.failure();
    permit.success();
    permit.settle(new Error('x'));
    expect(breaker.stats).toMatchObject({ calls: 1, failures: 1 });
  });

  it('settle() classifies like execute(): error first, then the result', () => {
    const { breaker } = breakerWith(fakeClock());
    breaker.acquire().settle(Object.assign(new Error('x'), { statusCode: 502 }));
    breaker.acquire().settle(Object.assign(new Error('x'), { statusCode: 400 }));
    breaker.acquire().settle(undefined, { statusCode: 503 });
    breaker.acquire().settle(null, 'fine'); // null is no error: the callback convention
    expect(breaker.stats).toMatchObject({ calls: 3, failures: 2 });
  });

  it('a bad durationMs throws and leaves the permit unsettled', () => {
    const { breaker } = breakerWith(fakeClock());
    const permit = breaker.acquire();
    expect(() => permit.success(-1)).toThrow(/durationMs must be/);
    permit.failure(5);
    expect(breaker.stats.failures).toBe(1);
  });

  it('admit() is the transport adapters’ CallGuard: maxMs caps a probe, done() classifies their report', () => {
    const clock = fakeClock();
    const { breaker } = breakerWith(clock, { probeTimeoutMs: 700 });
    const closed = breaker.admit();
    expect(closed).toMatchObject({ probe: false, maxMs: undefined });
    closed.done({ error: undefined, statusCode: 503, durationMs: 4, givenMs: 500 });
    closed.done({ error: undefined, statusCode: 200, durationMs: 4, givenMs: 500 }); // ignored: settled once
    breaker.admit().done({ error: undefined, statusCode: 200, durationMs: 4, givenMs: 500 });
    breaker.admit().done({ error: undefined, statusCode: undefined, durationMs: 4, givenMs: 500 }); // a query: ok
    // A deadline on a call given 30 ms is neutral; given 500 ms it is a failure.
    const exceeded = new DeadlineExceededError({ phase: 'during-call' });
    breaker.admit().done({ error: exceeded, statusCode: undefined, durationMs: 30, givenMs: 30 });
    breaker.admit().done({ error: exceeded, statusCode: undefined, durationMs: 500, givenMs: 500 });
    // Never made for lack of time (what OutgoingCall reports): neutral.
    const before = new DeadlineExceededError({ phase: 'before-call' });
    breaker.admit().done({ error: before, statusCode: undefined, durationMs: 0, givenMs: 0 });
    // A malformed report does not throw.
    expect(() =>
      breaker.admit().done({ error: undefined, statusCode: undefined, durationMs: Number.NaN, givenMs: Number.NaN }),
    ).not.toThrow();
    expect(breaker.stats).toMatchObject({ calls: 5, failures: 2 });

    breaker.reset();
    openIt(breaker);
    clock.advance(10_000);
    const probe = breaker.admit();
    expect(probe).toMatchObject({ probe: true, maxMs: 700 });
    probe.done({ error: undefined, statusCode: 500, durationMs: 3, givenMs: 700 });
    expect(breaker.stats).toMatchObject({ state: 'open', cooldownMs: 20_000 });
  });

  it('outcomes of calls admitted before a state change are ignored', () => {
    const clock = fakeClock();
    const { breaker } = breakerWith(clock);
    const early = breaker.acquire(); // admitted while closed
    openIt(breaker);
    clock.advance(10_000);
    expect(breaker.state).toBe('half-open');
    early.success(); // says nothing about the half-open circuit
    expect(breaker.stats).toMatchObject({ state: 'half-open', consecutiveSuccesses: 0 });
    succeed(breaker, 2);
    const stale = breaker.acquire();
    breaker.reset(); // closed → closed: still forgets in-flight calls
    stale.failure();
    expect(breaker.stats.calls).toBe(0);
  });

  it('reset() closes an open circuit (announced) and forgets the cooldown growth; opens keeps counting', () => {
    const clock = fakeClock();
    const { breaker, events } = breakerWith(clock);
    openIt(breaker);
    clock.advance(10_000);
    fail(breaker); // 20 s now
    breaker.reset();
    expect(breaker.stats).toMatchObject({ state: 'closed', cooldownMs: 10_000, calls: 0, opens: 2 });
    expect(transitions(events).at(-1)).toBe('open→closed:reset');
    const count = events.length;
    breaker.reset(); // already closed: no transition
    expect(events).toHaveLength(count);
  });
});

describe('CircuitBreaker: events, diagnostics, logs', () => {
  it('one event, one diagnostics message and one log line per transition, the same object', () => {
    const clock = fakeClock();
    const published = record<BreakerStateEvent>(BREAKER_STATE_CHANNEL);
    const lines: { level: 'info' | 'warn'; fields: Record<string, unknown>; msg: string }[] = [];
    const logger = {
      info: (fields: Record<string, unknown>, msg: string) => lines.push({ level: 'info', fields, msg }),
      warn: (fields: Record<string, unknown>, msg: string) => lines.push({ level: 'warn', fields, msg }),
    };
    const { breaker, events } = breakerWith(clock, { logger });
    openIt(breaker);
    clock.advance(10_000);
    expect(events).toHaveLength(1); // the lazy transition is announced when observed
    expect(breaker.state).toBe('half-open');
    fail(breaker);
    clock.advance(20_000);
    succeed(breaker, 2);
    openIt(breaker);
    breaker.reset();

    const expected = [
      'closed→open:failure-rate',
      'open→half-open:cooldown-elapsed',
      'half-open→open:probe-failed',
      'open→half-open:cooldown-elapsed',
      'half-open→closed:probes-succeeded',
      'closed→open:failure-rate',
      'open→closed:reset',
    ];
    expect(transitions(events)).toEqual(expected);
    expect(published).toHaveLength(expected.length);
    for (const [i, message] of published.entries()) expect(message).toBe(events[i]);
    expect(lines.map((l) => l.level)).toEqual(['warn', 'info', 'warn', 'info', 'info', 'warn', 'info']);
    expect(lines[0]).toMatchObject({
      fields: { target: 'inventory', from: 'closed', to: 'open', reason: 'failure-rate', cooldownMs: 10_000 },
      msg: 'circuit for inventory opened (failure-rate): calls fail fast for 10000 ms',
    });
    expect(events[0]).toMatchObject({
      target: 'inventory',
      cooldownMs: 10_000,
      stats: { state: 'open', calls: 10, failures: 10, failureRate: 1, retryAfterMs: 10_000, opens: 1 },
    });
    expect(events[2]).toMatchObject({ cooldownMs: 20_000, stats: { cooldownMs: 20_000, opens: 2 } });
    expect(Object.isFrozen(events[0])).toBe(true);
  });

  it('a throwing logger or listener never reaches the caller (reported as process warnings)', async () => {
    const emitWarning = vi.spyOn(process, 'emitWarning').mockImplementation(() => undefined);
    const throwing = () => {
      throw new Error('logger down');
    };
    const breaker = new CircuitBreaker({
      target: 'inventory',
      now: fakeClock().now,
      minimumCalls: 1,
      failureThreshold: 1,
      logger: { info: throwing, warn: throwing },
    });
    breaker.on('state', () => {
      throw new Error('listener bug');
    });
    const boom = new Error('downstream');
    await expect(breaker.execute(() => Promise.reject(boom))).rejects.toBe(boom);
    expect(breaker.state).toBe('open');
    expect(emitWarning.mock.calls.map((call) => call[0])).toEqual([
      "a 'state' listener of the breaker for inventory threw: listener bug",
      'the logger of the breaker for inventory threw: logger down',
    ]);
  });

  it('publishes nothing and builds no event while closed', () => {
    const published = record<BreakerStateEvent>(BREAKER_STATE_CHANNEL);
    const { breaker } = breakerWith(fakeClock());
    succeed(breaker, 100);
    fail(breaker, 4);
    expect(published).toEqual([]);
  });
});

describe('CircuitBreaker options', () => {
  const base = { target: 'inventory' };
  it.each([
    ['target', {}],
    ['target', { target: '' }],
    ['target', { target: 42 }],
    ['failureThreshold', { failureThreshold: 0 }],
    ['failureThreshold', { failureThreshold: 1.5 }],
    ['failureThreshold', { failureThreshold: '5' }],
    ['failureRateThreshold', { failureRateThreshold: 0 }],
    ['failureRateThreshold', { failureRateThreshold: 1.01 }],
    ['failureRateThreshold', { failureRateThreshold: Number.NaN }],
    ['minimumCalls', { minimumCalls: 0 }],
    ['windowMs', { windowMs: 0 }],
    ['windowMs', { windowMs: Number.POSITIVE_INFINITY }],
    ['buckets', { buckets: 0 }],
    ['buckets', { buckets: 1_001 }],
    ['buckets', { buckets: 2.5 }],
    ['slowCallMs', { slowCallMs: 0 }],
    ['slowCallRateThreshold', { slowCallRateThreshold: 0.5 }],
    ['slowCallRateThreshold', { slowCallMs: 100, slowCallRateThreshold: 0 }],
    ['cooldownMs', { cooldownMs: 0 }],
    ['cooldownMultiplier', { cooldownMultiplier: 0.5 }],
    ['maxCooldownMs', { cooldownMs: 10_000, maxCooldownMs: 5_000 }],
    ['halfOpenMaxProbes', { halfOpenMaxProbes: 0 }],
    ['halfOpenMaxProbes', { halfOpenMaxProbes: 1.5 }],
    ['successesToClose', { successesToClose: 0 }],
    ['probeTimeoutMs', { probeTimeoutMs: 0 }],
    ['deadlineFloorMs', { deadlineFloorMs: -1 }],
    ['classify', { classify: 'default' }],
    ['isFailureResult', { isFailureResult: 500 }],
    ['logger', { logger: 'pino' }],
    ['logger.info', { logger: {} }],
    ['logger.warn', { logger: { info() {} } }],
    ['now', { now: 5 }],
  ])('rejects a bad %s, naming it', (option, bad) => {
    const options = { ...base, ...bad } as unknown as CircuitBreakerOptions;
    if (!('target' in bad) && option === 'target') delete (options as { target?: string }).target;
    let error: unknown;
    try {
      new CircuitBreaker(options);
    } catch (e) {
      error = e;
    }
    expect(error).toBeInstanceOf(InvalidArgumentError);
    expect((error as InvalidArgumentError).option).toBe(option);
    expect((error as Error).message).toMatch(new RegExp(`^${option.replace('.', '\\.')} must be`));
  });

  it('rejects a missing options object', () => {
    expect(() => new CircuitBreaker(undefined as never)).toThrow(/options must be an object/);
  });

  it('accepts boundary values', () => {
    expect(
      () =>
        new CircuitBreaker({
          target: 'x',
          failureThreshold: 1,
          failureRateThreshold: 1,
          minimumCalls: 1,
          buckets: 1_000,
          cooldownMultiplier: 1,
          cooldownMs: 5,
          maxCooldownMs: 5,
          deadlineFloorMs: 0,
          halfOpenMaxProbes: 1_000,
        }),
    ).not.toThrow();
  });
});

describe('createBreakers', () => {
  it('memoizes one breaker per target, with the shared options', () => {
    const clock = fakeClock();
    const breakerFor = createBreakers({ now: clock.now, minimumCalls: 1, failureThreshold: 1 });
    const a = breakerFor('http://a:80');
    expect(breakerFor('http://a:80')).toBe(a);
    const b = breakerFor('http://b:80');
    expect(b).not.toBe(a);
    expect(a.target).toBe('http://a:80');
    fail(a);
    expect(a.state).toBe('open');
    expect(b.state).toBe('closed');
    expect(breakerFor.size).toBe(2);
    expect([...breakerFor.entries()].map(([target]) => target)).toEqual(['http://a:80', 'http://b:80']);
  });

  it('checks the shared options at once, naming the option', () => {
    expect(() => createBreakers({ cooldownMs: -1 })).toThrow(/^cooldownMs must be/);
    expect(() => createBreakers({ maxTargets: 0 })).toThrow(/^maxTargets must be/);
    expect(() => createBreakers({ maxTargets: 2.5 })).toThrow(/^maxTargets must be an integer/);
    expect(() => createBreakers()('')).toThrow(/^target must be/);
  });

  it('refuses a target past maxTargets with a clear error; known targets keep working', () => {
    const breakerFor = createBreakers({ maxTargets: 2 });
    breakerFor('a');
    breakerFor('b');
    expect(() => breakerFor('http://api/users/123')).toThrow(InvalidArgumentError);
    expect(() => breakerFor('http://api/users/123')).toThrow(
      /target must be one of the 2 targets this registry already holds \(maxTargets\): name breakers by origin or service, not by URL; received/,
    );
    expect(breakerFor('a')).toBeInstanceOf(CircuitBreaker);
    expect(breakerFor.size).toBe(2);
  });
});
