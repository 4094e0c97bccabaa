/**
 * What an outgoing call asks of a circuit breaker, structurally: may I go, and here is how it went. Every
 * transport adapter takes one through its options and hands it to the core's `OutgoingCall`, which asks before
 * anything is sent and reports once at the end — so a breaker guards HTTP, Postgres, MySQL and Redis calls the
 * same way, and no adapter depends on the package that implements it (`@deadline/resilience`).
 */

/**
 * How a guarded call ended, as {@link CallPermit.done} is told.
 *
 * @example
 * ```ts
 * const outcome: CallOutcome = { error: undefined, statusCode: 503, durationMs: 12.5, givenMs: 480 };
 * ```
 */
export interface CallOutcome {
  /** What the call failed with (its deadline error when it was cut off); `undefined` when it answered. */
  error: unknown;
  /** The HTTP status it answered with, for HTTP calls. */
  statusCode: number | undefined;
  /** How long it took (ms). */
  durationMs: number;
  /** How long it was allowed (ms; `Infinity` when unbounded): a deadline that fired on a call given too little
   * is the caller's shortfall, not the downstream's fault. */
  givenMs: number;
}

/**
 * Admission for one call: a cap on its duration (a breaker's half-open probe is bounded), and the report.
 *
 * @example
 * ```ts
 * const permit: CallPermit = breaker.admit();
 * permit.done({ error: undefined, statusCode: 200, durationMs: 3, givenMs: 500 });
 * ```
 */
export interface CallPermit {
  /** The longest the call may take (ms), on top of its deadline; `undefined` for no extra cap. */
  readonly maxMs?: number | undefined;
  /** Called exactly once, when the call ends (also when it was never sent for lack of time). */
  done(outcome: CallOutcome): void;
}

/**
 * A circuit breaker as an outgoing call sees it. `admit()` throws (a `CircuitOpenError`) when the call must not
 * be made: nothing is sent. `@deadline/resilience`'s `CircuitBreaker` is one.
 *
 * @example
 * ```ts
 * import { CircuitBreaker } from '@deadline/resilience';
 * import { withDeadline } from '@deadline/pg';
 * const guard: CallGuard = new CircuitBreaker({ target: 'orders-db' });
 * const db = withDeadline(pool, { circuitBreaker: guard });
 * ```
 */
export interface CallGuard {
  admit(): CallPermit;
}
