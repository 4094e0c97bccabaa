/**
 * What a circuit breaker tells whoever watches it: its `'state'` event and the same message on a
 * `node:diagnostics_channel` channel, for watchers that hold no reference to the breaker (metrics, logs).
 */
import diagnostics from 'node:diagnostics_channel';
import type { CircuitBreaker } from './breaker.js';

/**
 * The `node:diagnostics_channel` channel on which every breaker publishes its transitions. An open circuit becomes
 * half-open lazily, so that transition is published when the breaker next observes it (a call, a `state` read).
 * Message: {@link BreakerStateEvent}.
 *
 * @example
 * ```ts
 * import diagnostics from 'node:diagnostics_channel';
 * diagnostics.subscribe(BREAKER_STATE_CHANNEL, (event) => log.warn(event, 'breaker'));
 * ```
 */
export const BREAKER_STATE_CHANNEL = 'deadline:breaker:state';

/**
 * The `'state'` event of a {@link CircuitBreaker}, one per transition, and the message published on
 * {@link BREAKER_STATE_CHANNEL}: the same frozen object.
 *
 * @example
 * ```ts
 * diagnostics.subscribe(BREAKER_STATE_CHANNEL, (message) => {
 *   const { target, from, to, reason } = message as BreakerStateEvent;
 *   metrics.increment('breaker.transition', { target, from, to, reason });
 * });
 * ```
 */
export interface BreakerStateEvent {
  /** The breaker's downstream (`inventory`, `GET http://inventory:8080`). */
  target: string;
  from: 'closed' | 'open' | 'half-open';
  to: 'closed' | 'open' | 'half-open';
  /**
   * Why: `failure-rate` (failures reached both the count and the rate, over the minimum volume),
   * `slow-call-rate`, `cooldown-elapsed`, `probes-succeeded`, `probe-failed`, `probe-slow`, `probe-timed-out`,
   * `reset`.
   */
  reason:
    | 'failure-rate'
    | 'slow-call-rate'
    | 'cooldown-elapsed'
    | 'probes-succeeded'
    | 'probe-failed'
    | 'probe-slow'
    | 'probe-timed-out'
    | 'reset';
  /** When opening, the cooldown that starts now; otherwise the cooldown the next opening will use (ms). */
  cooldownMs: number;
  /** The breaker's counters just after the transition. */
  stats: {
    readonly state: 'closed' | 'open' | 'half-open';
    /** Calls counted in the sliding window (successes and failures; neutral outcomes are not counted). */
    readonly calls: number;
    /** Failures in the window. */
    readonly failures: number;
    /** Counted calls in the window that took at least `slowCallMs` (0 when slow calls are not tracked). */
    readonly slowCalls: number;
    /** `failures / calls`, 0 without calls. */
    readonly failureRate: number;
    /** `slowCalls / calls`, 0 without calls. */
    readonly slowCallRate: number;
    /** The cooldown in force (open, half-open) or the one the next opening will use (closed), in ms. */
    readonly cooldownMs: number;
    /** ms until an open circuit admits a probe; 0 unless open. */
    readonly retryAfterMs: number;
    /** Probes admitted and not settled (half-open only). */
    readonly probesInFlight: number;
    /** Probe successes in a row in this half-open period. */
    readonly consecutiveSuccesses: number;
    /** How many times the circuit opened since the breaker was made (a counter: `reset()` keeps it). */
    readonly opens: number;
  };
}

const breakerState = diagnostics.channel(BREAKER_STATE_CHANNEL);

/** Publishes a transition, if anyone listens. @internal */
export function publishBreakerState(event: BreakerStateEvent): void {
  if (breakerState.hasSubscribers) breakerState.publish(event);
}
