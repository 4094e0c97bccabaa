/**
 * A breaker's permit: the right to make one call, and the duty to say how it went. `execute()` does this for
 * promise-returning calls; adapters whose call reports through a callback take a permit with `acquire()`.
 */
import { checkNumber } from '@deadline/core/internal';

/** @internal How a call went, as the breaker counts it. */
export type Outcome = 0 | 1 | 2;
/** @internal */
export const SUCCESS = 0;
/** @internal */
export const FAILURE = 1;
/** @internal Neither: the call says nothing about the downstream (4xx, a cancel, our own tiny budget). */
export const NEUTRAL = 2;

/**
 * The right to make one call through a {@link CircuitBreaker}, from `breaker.acquire()`. Settle it exactly once
 * when the call ends — later settles are ignored. A probe (`probe: true`, taken while the circuit is half-open)
 * holds one of the few probe slots until settled: bound the call by `givenMs`, or the breaker counts the probe
 * as timed out once `probeTimeoutMs` has passed.
 *
 * @example
 * ```ts
 * const permit = breaker.acquire(); // throws CircuitOpenError when the circuit is open
 * legacyClient.get(key, { timeout: permit.givenMs }, (error, value) => {
 *   permit.settle(error, value); // classifies like execute(): failure, neutral or success
 *   done(error, value);
 * });
 * ```
 */
export interface BreakerPermit {
  /** True when the circuit is half-open and this call is one of its probes. */
  readonly probe: boolean;
  /** The time the call was given (ms): the context's remaining time (`Infinity` without one), at most `probeTimeoutMs` for a probe. */
  readonly givenMs: number;
  /** The call succeeded. `durationMs` defaults to the time since `acquire()` (for slow-call counting). */
  success(durationMs?: number): void;
  /** The call failed in a way that counts against the downstream. */
  failure(durationMs?: number): void;
  /** The call says nothing about the downstream (a 4xx, a cancel): frees a probe slot, counts nothing. */
  neutral(): void;
  /**
   * Settles the way `execute()` would: an `error` (anything but `null`/`undefined`, the callback convention) is
   * classified with the breaker's `classify`; otherwise `result` is checked with `isFailureResult`.
   */
  settle(error: unknown, result?: unknown, durationMs?: number): void;
  /**
   * For the transport adapters' `circuitBreaker` option (`CallGuard`/`CallPermit` in `@deadline/core`): the
   * longest the call may take — `probeTimeoutMs` for a probe, `undefined` in a closed circuit.
   */
  readonly maxMs: number | undefined;
  /**
   * Settles from a transport adapter's report: an `error` is classified with the time the call was given
   * (`givenMs`), otherwise `isFailureResult` is asked about `{ statusCode }` (a 5xx counts). Never throws.
   */
  done(outcome: { error: unknown; statusCode: number | undefined; durationMs: number; givenMs: number }): void;
}

/** @internal What a permit reports to (the breaker, through a private object: permits need no public hooks). */
export interface PermitSink {
  verdictOf(error: unknown, givenMs: number): Outcome;
  resultOutcome(result: unknown): Outcome;
  settle(permit: Permit, outcome: Outcome, durationMs: number | undefined): void;
}

/** @internal */
export class Permit implements BreakerPermit {
  #sink: PermitSink | undefined;
  readonly probe: boolean;
  readonly givenMs: number;
  readonly maxMs: number | undefined;
  /** The breaker's generation when admitted: an outcome reported after a state change is ignored. */
  readonly generation: number;
  /** The probe slot (−1 for a call in a closed circuit). */
  readonly slot: number;
  /** Clock reading at admission (0 when nobody needs it: a closed circuit without slow-call tracking). */
  readonly startedAt: number;

  constructor(
    sink: PermitSink,
    givenMs: number,
    maxMs: number | undefined,
    generation: number,
    slot: number,
    startedAt: number,
  ) {
    this.#sink = sink;
    this.probe = slot >= 0;
    this.givenMs = givenMs;
    this.maxMs = maxMs;
    this.generation = generation;
    this.slot = slot;
    this.startedAt = startedAt;
  }

  success(durationMs?: number): void {
    this.#report(SUCCESS, durationMs);
  }

  failure(durationMs?: number): void {
    this.#report(FAILURE, durationMs);
  }

  neutral(): void {
    this.#report(NEUTRAL, undefined);
  }

  settle(error: unknown, result?: unknown, durationMs?: number): void {
    const sink = this.#sink;
    if (sink === undefined) return;
    this.#report(error == null ? sink.resultOutcome(result) : sink.verdictOf(error, this.givenMs), durationMs);
  }

  done(outcome: { error: unknown; statusCode: number | undefined; durationMs: number; givenMs: number }): void {
    const sink = this.#sink;
    if (sink === undefined) return;
    // Called from a call's cleanup path: a malformed report is read as well as it can be, never thrown back.
    const { error, statusCode, durationMs, givenMs } = outcome ?? {};
    const verdict =
      error !== undefined
        ? sink.verdictOf(error, typeof givenMs === 'number' && !Number.isNaN(givenMs) ? givenMs : this.givenMs)
        : sink.resultOutcome(statusCode === undefined ? undefined : { statusCode });
    this.#sink = undefined;
    const duration =
      typeof durationMs === 'number' && durationMs >= 0 && durationMs < Infinity ? durationMs : undefined;
    sink.settle(this, verdict, duration);
  }

  #report(outcome: Outcome, durationMs: number | undefined): void {
    const sink = this.#sink;
    if (sink === undefined) return;
    // An adapter's bug (a negative or NaN duration) fails loudly, and the permit stays unsettled for a correct retry.
    checkNumber('durationMs', durationMs);
    this.#sink = undefined;
    sink.settle(this, outcome, durationMs);
  }
}
