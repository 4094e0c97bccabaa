/**
 * The deadline-aware circuit breaker: `closed → open → half-open → closed`.
 *
 * No timers, ever: the window rotates, the cooldown ends and a stuck probe times out when the breaker is next
 * touched (a call, a `state` or `stats` read), measured on the monotonic clock. So an open circuit becomes
 * half-open when somebody looks, and that transition is announced then.
 *
 * Deadline-aware: a call is judged with the time it was given. A deadline that fires on a call given less than
 * `deadlineFloorMs` is our own budget's fault, not the downstream's, and is not counted; a probe runs under its
 * own budget (`probeTimeoutMs`) so that a half-open circuit learns quickly.
 *
 * Every state change bumps a generation number. A call admitted under an earlier generation (before the circuit
 * opened, before a reset, a probe of a half-open period that already ended) is ignored when it settles: it was
 * made against a circuit that no longer exists.
 */
import { EventEmitter } from 'node:events';
import { createContext, currentContext, DeadlineExceededError, InvalidArgumentError } from '@deadline/core';
import { type CircuitBreakerOptions, type ResolvedBreakerOptions, resolveBreakerOptions } from './breaker-options.js';
import {
  type BreakerPermit,
  FAILURE,
  NEUTRAL,
  type Outcome,
  Permit,
  type PermitSink,
  SUCCESS,
} from './breaker-permit.js';
import { type BreakerStateEvent, publishBreakerState } from './breaker-state.js';
import { SlidingWindow } from './breaker-window.js';
import { CircuitOpenError } from './circuit-open-error.js';

/**
 * A circuit's state. `open`: calls fail fast; `half-open`: a few probes decide whether it closes again.
 *
 * @example
 * ```ts
 * const state: CircuitState = breaker.state;
 * gauge.set({ target: breaker.target }, state === 'closed' ? 0 : state === 'half-open' ? 1 : 2);
 * ```
 */
export type CircuitState = BreakerStateEvent['to'];

/**
 * Why a circuit changed state (see {@link BreakerStateEvent}).
 *
 * @example
 * ```ts
 * breaker.on('state', ({ reason }: { reason: BreakerTransitionReason }) => metrics.increment(`breaker.${reason}`));
 * ```
 */
export type BreakerTransitionReason = BreakerStateEvent['reason'];

/**
 * A breaker's counters: its state, the sliding window's calls, failures and slow calls, the cooldown, the
 * probes. Read with `breaker.stats`; also carried by every `'state'` event.
 *
 * @example
 * ```ts
 * const { state, failureRate, retryAfterMs } = breaker.stats;
 * log.info({ target: breaker.target, state, failureRate, retryAfterMs }, 'breaker');
 * ```
 */
export type CircuitBreakerStats = BreakerStateEvent['stats'];

/** A probe whose own deadline fired: a failure whatever the error says (internal to this file). */
const TIMED_OUT = 3;
type ProbeOutcome = Outcome | typeof TIMED_OUT;

const CLOSED_CALL = -1;

/**
 * A circuit breaker for one downstream. While the downstream fails (by count AND rate over a sliding window,
 * past a minimum volume — or too many slow calls), calls fail fast with {@link CircuitOpenError} instead of
 * piling onto it; after a cooldown (doubling on each failed probe, capped) a few probes decide whether it closes.
 * Emits `'state'` ({@link BreakerStateEvent}) on every transition, publishes it on the diagnostics channel
 * `deadline:breaker:state`, and logs one line per transition when given a logger.
 *
 * @example
 * ```ts
 * import { CircuitBreaker, CircuitOpenError } from '@deadline/resilience';
 * const inventory = new CircuitBreaker({ target: 'inventory', logger: app.log });
 *
 * app.get('/stock/:sku', async (req) => {
 *   // A 503 answer is returned and counted as a failure; an open circuit throws CircuitOpenError (503 + Retry-After).
 *   const res = await inventory.execute((signal) => fetch(`http://inventory/stock/${req.params.sku}`, { signal }));
 *   return res.json();
 * });
 * ```
 */
export class CircuitBreaker extends EventEmitter<{ state: [BreakerStateEvent] }> {
  /** The downstream this breaker protects. */
  readonly target: string;
  readonly #options: ResolvedBreakerOptions;
  readonly #now: () => number;
  readonly #window: SlidingWindow;
  readonly #sink: PermitSink;
  /** Admission time of each probe slot; NaN when free. Preallocated: a half-open circuit allocates no slots. */
  readonly #probeStarts: Float64Array;
  #state: CircuitState = 'closed';
  #generation = 0;
  #openedAt = 0;
  /** The cooldown of the current opening (open, half-open), or of the next one (closed). */
  #cooldownMs: number;
  #probesInFlight = 0;
  #consecutiveSuccesses = 0;
  #opens = 0;
  #classifierWarned = false;

  /** Checks every option (throwing `InvalidArgumentError` naming the first bad one). */
  constructor(options: CircuitBreakerOptions) {
    super();
    const resolved = resolveBreakerOptions(options);
    this.#options = resolved;
    this.target = resolved.target;
    this.#now = resolved.now;
    this.#window = new SlidingWindow(resolved.windowMs, resolved.buckets, resolved.now());
    this.#probeStarts = new Float64Array(resolved.halfOpenMaxProbes).fill(Number.NaN);
    this.#cooldownMs = resolved.cooldownMs;
    this.#sink = {
      verdictOf: (error, givenMs) => this.#verdictOf(error, givenMs),
      resultOutcome: (result) => this.#resultOutcome(result),
      settle: (permit, outcome, durationMs) =>
        this.#settle(permit.generation, permit.slot, permit.startedAt, outcome, durationMs),
    };
  }

  /**
   * The circuit's state. Reading it observes the clock: an open circuit whose cooldown has passed becomes (and
   * reports) `half-open`, and a probe stuck past `probeTimeoutMs` reopens it — each announced as it is seen.
   */
  get state(): CircuitState {
    if (this.#state !== 'closed') this.#observe(this.#now());
    return this.#state;
  }

  /** A snapshot of the counters (after observing the clock, like {@link CircuitBreaker.state}). */
  get stats(): CircuitBreakerStats {
    const now = this.#now();
    if (this.#state !== 'closed') this.#observe(now);
    return this.#snapshot(now);
  }

  /**
   * Runs `fn` through the breaker and returns (or throws) what it does. Rejects with {@link CircuitOpenError},
   * without calling `fn`, while the circuit is open — or half-open with every probe slot taken (nothing waits
   * for a probe). A half-open call is a probe: it runs in a context of its own bounded by `probeTimeoutMs`.
   *
   * `fn` receives the current context's signal (inside a probe, the probe's) — but only if it declares a
   * parameter: `fn.length` is read so that a call that does not want a signal does not create one (the core
   * creates signals on first use, and they cost microseconds). A rest-parameter or default-parameter function
   * has `length` 0 and gets `undefined`; read `currentSignal()` inside it instead.
   *
   * A returned value for which `isFailureResult` holds (a 5xx response) counts as a failure but is returned.
   */
  async execute<T>(fn: (signal: AbortSignal | undefined) => T | Promise<T>): Promise<T> {
    if (typeof fn !== 'function') throw new InvalidArgumentError('fn', 'a function', fn);
    const slot = this.#admit();
    const generation = this.#generation;
    if (slot !== CLOSED_CALL) return this.#probe(fn, slot, generation);
    const context = currentContext();
    const givenMs = context === undefined ? Number.POSITIVE_INFINITY : context.remainingMs();
    // The clock is read at the start only when a duration matters (slow-call tracking).
    const startedAt = this.#options.slowCallMs === undefined ? 0 : this.#now();
    let result: T;
    try {
      result = await fn(fn.length === 0 || context === undefined ? undefined : context.signal);
    } catch (error) {
      this.#settle(generation, CLOSED_CALL, startedAt, this.#verdictOf(error, givenMs), undefined);
      throw error;
    }
    this.#settle(generation, CLOSED_CALL, startedAt, this.#resultOutcome(result), undefined);
    return result;
  }

  /**
   * The lower-level form of {@link CircuitBreaker.execute}, for calls that report through a callback: takes a
   * permit (throwing {@link CircuitOpenError} as `execute` would reject) that the caller settles when the call
   * ends. A probe permit must be settled within `probeTimeoutMs` (pass `permit.givenMs` as the call's timeout),
   * or it counts as a timed-out probe.
   */
  acquire(): BreakerPermit {
    const slot = this.#admit();
    const context = currentContext();
    const remaining = context === undefined ? Number.POSITIVE_INFINITY : context.remainingMs();
    if (slot !== CLOSED_CALL) {
      const { probeTimeoutMs } = this.#options;
      const givenMs = Math.min(remaining, probeTimeoutMs);
      return new Permit(this.#sink, givenMs, probeTimeoutMs, this.#generation, slot, this.#probeStarts[slot] as number);
    }
    const startedAt = this.#options.slowCallMs === undefined ? 0 : this.#now();
    return new Permit(this.#sink, remaining, undefined, this.#generation, CLOSED_CALL, startedAt);
  }

  /**
   * {@link CircuitBreaker.acquire} under the name the transport adapters call: a `CircuitBreaker` is the
   * `CallGuard` their `circuitBreaker` option takes (`@deadline/http`, `pg`, `mysql`, `redis`). They cap the
   * call with `permit.maxMs` and report with `permit.done(outcome)`.
   */
  admit(): BreakerPermit {
    return this.acquire();
  }

  /**
   * Closes the circuit and forgets the window, the cooldown growth and the probes; calls still running were
   * admitted by the old circuit and are ignored when they end. Announced as a transition (`reason: 'reset'`)
   * unless the circuit was already closed. `stats.opens` keeps counting.
   */
  reset(): void {
    const now = this.#now();
    if (this.#state !== 'closed') {
      this.#transition('closed', 'reset', now);
      return;
    }
    this.#generation++;
    this.#window.clear();
    this.#cooldownMs = this.#options.cooldownMs;
  }

  /** Admits a call: CLOSED_CALL, or the probe slot taken. Throws CircuitOpenError when refused. */
  #admit(): number {
    if (this.#state === 'closed') return CLOSED_CALL;
    const now = this.#now();
    this.#observe(now);
    // (A 'state' listener may have reset the circuit while the transition was announced.)
    if ((this.#state as CircuitState) === 'closed') return CLOSED_CALL;
    if (this.#state === 'open') {
      throw new CircuitOpenError(this.target, 'open', this.#openedAt + this.#cooldownMs - now);
    }
    if (this.#probesInFlight >= this.#probeStarts.length) throw new CircuitOpenError(this.target, 'half-open', 0);
    const slots = this.#probeStarts;
    let slot = 0;
    while (!Number.isNaN(slots[slot])) slot++;
    slots[slot] = now;
    this.#probesInFlight++;
    return slot;
  }

  /** Runs a probe under its own budget; a probe whose own deadline fired failed, whatever it threw or returned. */
  async #probe<T>(fn: (signal: AbortSignal | undefined) => T | Promise<T>, slot: number, generation: number) {
    const { probeTimeoutMs } = this.#options;
    const outer = currentContext();
    const outerMs = outer === undefined ? Number.POSITIVE_INFINITY : outer.remainingMs();
    const givenMs = Math.min(outerMs, probeTimeoutMs);
    // When the request has less time than a probe's budget, a deadline is the request's, judged by the floor.
    const ownDeadline = probeTimeoutMs <= outerMs;
    const startedAt = this.#probeStarts[slot] as number;
    // Not ended when fn returns: a response it returns may still have a body to read, and ending the probe's
    // context would cut it. The probe's deadline bounds that read too; a failed probe is ended at once.
    const probe = createContext({ deadline: probeTimeoutMs });
    return probe.run(async (): Promise<T> => {
      let outcome: ProbeOutcome;
      let result: T;
      try {
        result = await fn(fn.length === 0 ? undefined : probe.signal);
      } catch (error) {
        outcome =
          ownDeadline && probe.stopReason instanceof DeadlineExceededError
            ? TIMED_OUT
            : this.#verdictOf(error, givenMs);
        this.#settle(generation, slot, startedAt, outcome, undefined);
        probe.end();
        throw error;
      }
      outcome =
        ownDeadline && probe.stopReason instanceof DeadlineExceededError ? TIMED_OUT : this.#resultOutcome(result);
      this.#settle(generation, slot, startedAt, outcome, undefined);
      return result;
    });
  }

  #settle(generation: number, slot: number, startedAt: number, outcome: ProbeOutcome, durationMs: number | undefined) {
    if (generation !== this.#generation) return;
    const options = this.#options;
    if (slot === CLOSED_CALL) {
      if (outcome === NEUTRAL) return;
      const now = this.#now();
      const slow = options.slowCallMs !== undefined && (durationMs ?? now - startedAt) >= options.slowCallMs;
      this.#window.record(now, outcome !== SUCCESS, slow);
      this.#evaluate(now);
      return;
    }
    const now = this.#now();
    this.#probeStarts[slot] = Number.NaN;
    this.#probesInFlight--;
    const elapsed = now - startedAt;
    // Judged on the slot's age, as the lazy check in #observe does: the same probe gets the same verdict.
    if (outcome === TIMED_OUT || elapsed >= options.probeTimeoutMs) return this.#reopen('probe-timed-out', now);
    if (outcome === NEUTRAL) return;
    if (outcome === FAILURE) return this.#reopen('probe-failed', now);
    if (options.slowCallMs !== undefined && (durationMs ?? elapsed) >= options.slowCallMs) {
      return this.#reopen('probe-slow', now);
    }
    if (++this.#consecutiveSuccesses >= options.successesToClose) this.#transition('closed', 'probes-succeeded', now);
  }

  /** Closed circuit: opens when the window says so. Both count and rate, and only past the minimum volume. */
  #evaluate(now: number): void {
    const window = this.#window;
    const options = this.#options;
    const calls = window.calls;
    if (calls < options.minimumCalls) return;
    const failures = window.failures;
    if (failures >= options.failureThreshold && failures / calls >= options.failureRateThreshold) {
      this.#transition('open', 'failure-rate', now);
    } else if (options.slowCallMs !== undefined && window.slowCalls / calls >= options.slowCallRateThreshold) {
      this.#transition('open', 'slow-call-rate', now);
    }
  }

  /** The lazy part of the state machine: cooldown over → half-open; a probe unsettled too long → reopen. */
  #observe(now: number): void {
    if (this.#state === 'open') {
      if (now - this.#openedAt >= this.#cooldownMs) this.#transition('half-open', 'cooldown-elapsed', now);
      return;
    }
    if (this.#state === 'half-open' && this.#probesInFlight > 0) {
      const admittedBefore = now - this.#options.probeTimeoutMs;
      // NaN (a free slot) compares false.
      for (const startedAt of this.#probeStarts) {
        if (startedAt <= admittedBefore) {
          // The cooldown counts from now, when the timeout is seen: until then no probe slot was free anyway.
          this.#reopen('probe-timed-out', now);
          return;
        }
      }
    }
  }

  #reopen(reason: BreakerTransitionReason, now: number): void {
    const { cooldownMultiplier, maxCooldownMs } = this.#options;
    this.#cooldownMs = Math.min(this.#cooldownMs * cooldownMultiplier, maxCooldownMs);
    this.#transition('open', reason, now);
  }

  #transition(to: CircuitState, reason: BreakerTransitionReason, now: number): void {
    const from = this.#state;
    this.#state = to;
    this.#generation++;
    this.#probeStarts.fill(Number.NaN);
    this.#probesInFlight = 0;
    this.#consecutiveSuccesses = 0;
    if (to === 'open') {
      this.#openedAt = now;
      this.#opens++;
    } else if (to === 'closed') {
      this.#window.clear();
      this.#cooldownMs = this.#options.cooldownMs;
    }
    this.#announce(from, to, reason, now);
  }

  /** Event, diagnostics message and log line: one object, built once per transition (transitions are rare). */
  #announce(from: CircuitState, to: CircuitState, reason: BreakerTransitionReason, now: number): void {
    const event: BreakerStateEvent = Object.freeze({
      target: this.target,
      from,
      to,
      reason,
      cooldownMs: this.#cooldownMs,
      stats: this.#snapshot(now),
    });
    publishBreakerState(event);
    if (this.listenerCount('state') > 0) {
      try {
        this.emit('state', event);
      } catch (error) {
        // A listener's bug must not surface as the caller's error (nor leave the transition half-announced).
        warn('DEADLINE_BREAKER_LISTENER_THREW', `a 'state' listener of the breaker for ${this.target} threw`, error);
      }
    }
    const logger = this.#options.logger;
    if (logger === undefined) return;
    try {
      const fields = { target: this.target, from, to, reason, cooldownMs: event.cooldownMs, stats: event.stats };
      if (to === 'open') {
        logger.warn(
          fields,
          `circuit for ${this.target} opened (${reason}): calls fail fast for ${event.cooldownMs} ms`,
        );
      } else if (to === 'half-open') {
        logger.info(fields, `circuit for ${this.target} is half-open (${reason}): probing`);
      } else {
        logger.info(fields, `circuit for ${this.target} closed (${reason})`);
      }
    } catch (error) {
      warn('DEADLINE_BREAKER_LOGGER_THREW', `the logger of the breaker for ${this.target} threw`, error);
    }
  }

  #snapshot(now: number): CircuitBreakerStats {
    const window = this.#window;
    window.advance(now);
    const calls = window.calls;
    return Object.freeze({
      state: this.#state,
      calls,
      failures: window.failures,
      slowCalls: window.slowCalls,
      failureRate: calls === 0 ? 0 : window.failures / calls,
      slowCallRate: calls === 0 ? 0 : window.slowCalls / calls,
      cooldownMs: this.#cooldownMs,
      // Positive: an open circuit whose cooldown has passed has become half-open before any snapshot.
      retryAfterMs: this.#state === 'open' ? this.#openedAt + this.#cooldownMs - now : 0,
      probesInFlight: this.#probesInFlight,
      consecutiveSuccesses: this.#consecutiveSuccesses,
      opens: this.#opens,
    });
  }

  #verdictOf(error: unknown, givenMs: number): Outcome {
    const options = this.#options;
    try {
      return options.classify(error, { givenMs, deadlineFloorMs: options.deadlineFloorMs }) === 'neutral'
        ? NEUTRAL
        : FAILURE;
    } catch (thrown) {
      this.#classifierThrew('classify', thrown);
      return FAILURE;
    }
  }

  #resultOutcome(result: unknown): Outcome {
    try {
      return this.#options.isFailureResult(result) ? FAILURE : SUCCESS;
    } catch (thrown) {
      this.#classifierThrew('isFailureResult', thrown);
      return FAILURE;
    }
  }

  /** A throwing classifier counts the call as a failure; the caller still gets the call's own outcome. */
  #classifierThrew(option: string, error: unknown): void {
    if (this.#classifierWarned) return; // once per breaker: it would otherwise warn on every call
    this.#classifierWarned = true;
    warn('DEADLINE_BREAKER_CLASSIFIER_THREW', `${option} of the breaker for ${this.target} threw`, error);
  }
}

function warn(code: string, message: string, error: unknown): void {
  process.emitWarning(`${message}: ${error instanceof Error ? error.message : String(error)}`, {
    type: 'DeadlineWarning',
    code,
    detail: error instanceof Error ? error.stack : undefined,
  });
}
