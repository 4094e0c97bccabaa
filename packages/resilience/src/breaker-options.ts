/**
 * The circuit breaker's options, their defaults and their checks. Everything is checked once, when the breaker
 * (or the registry) is made, so a bad option fails at startup with an error naming it — never on a request.
 */
import { InvalidArgumentError } from '@deadline/core';
import {
  checkFunction,
  checkName,
  checkNumber,
  checkObject,
  MAX_TIMER_DELAY_MS,
  monotonicNow,
} from '@deadline/core/internal';
import { classifyError, statusOf, type Verdict } from './classify.js';

/**
 * The logger methods a breaker uses: pino's `(fields, message)` signature (pino, Fastify's `app.log`, a pino
 * child). One line per state change: `warn` when the circuit opens, `info` otherwise.
 *
 * @example
 * ```ts
 * import pino from 'pino';
 * const logger: BreakerLogger = pino();
 * const breaker = new CircuitBreaker({ target: 'inventory', logger });
 * ```
 */
export interface BreakerLogger {
  info(fields: Record<string, unknown>, message: string): void;
  warn(fields: Record<string, unknown>, message: string): void;
}

/**
 * Options of {@link CircuitBreaker}. Every one but `target` has a default.
 *
 * @example
 * ```ts
 * const options: CircuitBreakerOptions = {
 *   target: 'inventory',
 *   failureThreshold: 5,
 *   failureRateThreshold: 0.5,
 *   minimumCalls: 10,
 *   slowCallMs: 2_000,
 *   logger: app.log,
 * };
 * const breaker = new CircuitBreaker(options);
 * ```
 */
export interface CircuitBreakerOptions {
  /** The downstream this breaker protects (`inventory`, `GET http://inventory:8080`): in errors, events, logs. */
  target: string;
  /**
   * Failures in the window needed to open (an integer ≥ 1). Default 5. Opening needs this count AND
   * `failureRateThreshold` AND `minimumCalls`: a count alone would open a busy circuit on a tiny error rate,
   * a rate alone would open a quiet one on two unlucky calls. (With the default rate and volume the count never
   * binds on its own — 50% of at least 10 calls is at least 5 — it matters once the rate is set lower.)
   */
  failureThreshold?: number | undefined;
  /** Failure rate (failures / counted calls, in (0, 1]) that opens, when reached. Default 0.5. */
  failureRateThreshold?: number | undefined;
  /** Counted calls (successes + failures; neutral outcomes do not count) the window needs before it may open. Default 10. */
  minimumCalls?: number | undefined;
  /** Length of the sliding window, in ms. Default 10 000. */
  windowMs?: number | undefined;
  /** Buckets the window is split into (an integer 1–1000): the window slides by `windowMs / buckets`. Default 10. */
  buckets?: number | undefined;
  /** A counted call that takes at least this long (ms) is slow. Default: slow calls are not tracked. */
  slowCallMs?: number | undefined;
  /**
   * Rate of slow calls (in (0, 1]) that opens, once `minimumCalls` is reached. Only with `slowCallMs`;
   * default 0.5 then. A half-open probe that is slow reopens the circuit.
   */
  slowCallRateThreshold?: number | undefined;
  /** How long the circuit stays open the first time (ms), before it admits a probe. Default 10 000. */
  cooldownMs?: number | undefined;
  /** Each failed probe multiplies the cooldown by this (≥ 1; 1 keeps it constant). Default 2. */
  cooldownMultiplier?: number | undefined;
  /** The cooldown never grows past this (ms; ≥ `cooldownMs`). Default 300 000, or `cooldownMs` if that is larger. */
  maxCooldownMs?: number | undefined;
  /**
   * Probes a half-open circuit runs at once (an integer 1–1000). Other calls are refused at once with a
   * `CircuitOpenError` (state `half-open`): nothing queues behind a probe. Default 1.
   */
  halfOpenMaxProbes?: number | undefined;
  /**
   * Probe successes in a row that close the circuit (an integer ≥ 1). Default 2: one lucky answer from a
   * downstream that is still flapping should not bring the full load back on it, and with one probe at a time
   * the second probe costs one more call.
   */
  successesToClose?: number | undefined;
  /**
   * A probe's own budget (ms): `execute` runs it under `runWithDeadline(probeTimeoutMs)`, so every call inside
   * derives its timeout from it. A probe that exceeds it (its deadline fires, or it is still unsettled that long
   * after it was admitted) is a failure. Default 5 000.
   */
  probeTimeoutMs?: number | undefined;
  /**
   * A `DeadlineExceededError` counts against the downstream only if the call was given at least this long
   * (ms): running out of our own too-small budget is not the downstream's fault. Default 100.
   */
  deadlineFloorMs?: number | undefined;
  /**
   * Whether an error counts against the downstream (`failure`) or not at all (`neutral`). Default
   * `classifyError`: 5xx, socket errors and deadlines on calls given at least `deadlineFloorMs` are failures;
   * 4xx, cancels and validation errors are neutral. `givenMs` is what the call was given (`Infinity` without a
   * deadline).
   */
  classify?: ((error: unknown, info: { givenMs: number; deadlineFloorMs: number }) => Verdict) | undefined;
  /**
   * Whether a value the call returned is a failure (it is still returned to the caller). Default: an HTTP
   * status of 500 or more (`status`, `statusCode`, or `response.status`), so a fetch `Response` with 503 counts.
   */
  isFailureResult?: ((result: unknown) => boolean) | undefined;
  /** Writes one line per state change. Default: none. A logger that throws is reported as a process warning. */
  logger?: BreakerLogger | undefined;
  /** The clock (ms, monotonic). Default: the core's `monotonicNow`. Tests pass a fake one. */
  now?: (() => number) | undefined;
}

/** @internal Options after defaults and checks. */
export interface ResolvedBreakerOptions {
  readonly target: string;
  readonly failureThreshold: number;
  readonly failureRateThreshold: number;
  readonly minimumCalls: number;
  readonly windowMs: number;
  readonly buckets: number;
  readonly slowCallMs: number | undefined;
  readonly slowCallRateThreshold: number;
  readonly cooldownMs: number;
  readonly cooldownMultiplier: number;
  readonly maxCooldownMs: number;
  readonly halfOpenMaxProbes: number;
  readonly successesToClose: number;
  readonly probeTimeoutMs: number;
  readonly deadlineFloorMs: number;
  readonly classify: (error: unknown, info: { givenMs: number; deadlineFloorMs: number }) => Verdict;
  readonly isFailureResult: (result: unknown) => boolean;
  readonly logger: BreakerLogger | undefined;
  readonly now: () => number;
}

/** The default {@link CircuitBreakerOptions.isFailureResult}: a 5xx status. */
function hasServerErrorStatus(result: unknown): boolean {
  const status = statusOf(result);
  return status !== undefined && status >= 500;
}

function checkInteger(option: string, value: unknown, fallback: number, min: number, max: number): number {
  if (value === undefined) return fallback;
  if (typeof value !== 'number' || !Number.isInteger(value) || value < min || value > max) {
    throw new InvalidArgumentError(option, `an integer between ${min} and ${max}`, value);
  }
  return value;
}

function checkRate(option: string, value: unknown, fallback: number): number {
  if (value === undefined) return fallback;
  if (typeof value !== 'number' || !(value > 0 && value <= 1)) {
    throw new InvalidArgumentError(option, 'a number greater than 0 and at most 1', value);
  }
  return value;
}

function checkLogger(value: unknown): BreakerLogger | undefined {
  const logger = checkObject('logger', value);
  if (logger === undefined) return undefined;
  checkFunction('logger.info', logger.info, false);
  checkFunction('logger.warn', logger.warn, false);
  return logger as unknown as BreakerLogger;
}

const MAX_COUNT = 1_000_000;

/** @internal Applies defaults and checks every option, naming the first bad one. */
export function resolveBreakerOptions(input: unknown): ResolvedBreakerOptions {
  const options = checkObject('options', input, false) as unknown as CircuitBreakerOptions;
  const target = checkName('target', options.target, false) as string;
  const ms = (option: string, value: unknown, fallback: number, min = 1): number =>
    checkNumber(option, value, { min, max: MAX_TIMER_DELAY_MS }) ?? fallback;

  const slowCallMs = checkNumber('slowCallMs', options.slowCallMs, { min: 1, max: MAX_TIMER_DELAY_MS });
  if (slowCallMs === undefined && options.slowCallRateThreshold !== undefined) {
    throw new InvalidArgumentError(
      'slowCallRateThreshold',
      'set together with slowCallMs (what a slow call is)',
      options.slowCallRateThreshold,
    );
  }
  const cooldownMs = ms('cooldownMs', options.cooldownMs, 10_000);
  const maxCooldownMs = ms('maxCooldownMs', options.maxCooldownMs, Math.max(300_000, cooldownMs));
  if (maxCooldownMs < cooldownMs) {
    throw new InvalidArgumentError('maxCooldownMs', `at least cooldownMs (${cooldownMs})`, maxCooldownMs);
  }
  return {
    target,
    failureThreshold: checkInteger('failureThreshold', options.failureThreshold, 5, 1, MAX_COUNT),
    failureRateThreshold: checkRate('failureRateThreshold', options.failureRateThreshold, 0.5),
    minimumCalls: checkInteger('minimumCalls', options.minimumCalls, 10, 1, MAX_COUNT),
    windowMs: ms('windowMs', options.windowMs, 10_000),
    buckets: checkInteger('buckets', options.buckets, 10, 1, 1_000),
    slowCallMs,
    slowCallRateThreshold: checkRate('slowCallRateThreshold', options.slowCallRateThreshold, 0.5),
    cooldownMs,
    cooldownMultiplier: checkNumber('cooldownMultiplier', options.cooldownMultiplier, { min: 1, max: 1_000 }) ?? 2,
    maxCooldownMs,
    halfOpenMaxProbes: checkInteger('halfOpenMaxProbes', options.halfOpenMaxProbes, 1, 1, 1_000),
    successesToClose: checkInteger('successesToClose', options.successesToClose, 2, 1, MAX_COUNT),
    probeTimeoutMs: ms('probeTimeoutMs', options.probeTimeoutMs, 5_000),
    deadlineFloorMs: ms('deadlineFloorMs', options.deadlineFloorMs, 100, 0),
    classify: checkFunction<ResolvedBreakerOptions['classify']>('classify', options.classify) ?? classifyError,
    isFailureResult:
      checkFunction<ResolvedBreakerOptions['isFailureResult']>('isFailureResult', options.isFailureResult) ??
      hasServerErrorStatus,
    logger: checkLogger(options.logger),
    now: checkFunction<() => number>('now', options.now) ?? monotonicNow,
  };
}
