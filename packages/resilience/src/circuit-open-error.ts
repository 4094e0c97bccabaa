/**
 * The one error this package adds: a call refused because its downstream's circuit is open. It carries what a
 * server edge needs to answer: Fastify's and Express's default error handlers read `statusCode` and `headers`,
 * so a request that fails on an open circuit answers 503 with `Retry-After`, with no adapter in between.
 */
import { DeadlineError, ErrorCode } from '@deadline/core';
import { defineErrorClass, findErrorWithCode } from '@deadline/core/internal';

/**
 * A call was not made: the circuit of its downstream is open (or half-open with every probe slot taken).
 * Maps to HTTP 503 with `Retry-After` (whole seconds until the circuit lets a probe through).
 *
 * @example
 * ```ts
 * try {
 *   await breaker.execute(() => fetch('http://inventory/stock'));
 * } catch (error) {
 *   if (error instanceof CircuitOpenError) return cachedStock(); // fail fast, serve what we have
 *   throw error;
 * }
 * ```
 */
export class CircuitOpenError extends DeadlineError {
  declare readonly code: typeof ErrorCode.CircuitOpen;
  /** The breaker's target (`inventory`, `GET http://inventory:8080`). */
  readonly target: string;
  /** ms until the circuit admits a probe (0 when half-open and the probe slots are taken). */
  readonly retryAfterMs: number;
  /** The circuit's state when the call was refused. */
  readonly state: 'open' | 'half-open';

  constructor(target: string, state: 'open' | 'half-open', retryAfterMs: number) {
    super(
      ErrorCode.CircuitOpen,
      state === 'open'
        ? `circuit for ${target} is open: call not made (retry in ${Math.ceil(retryAfterMs)} ms)`
        : `circuit for ${target} is half-open and its probe slots are taken: call not made`,
    );
    this.target = target;
    this.state = state;
    this.retryAfterMs = Math.max(0, retryAfterMs);
  }

  /** 503 Service Unavailable: read by Fastify's and Express's default error handlers. */
  get statusCode(): 503 {
    return 503;
  }

  /** `Retry-After` in whole seconds, at least 1: read by Fastify's and Express's default error handlers. */
  override get headers(): Record<string, string> {
    return { 'retry-after': String(Math.max(1, Math.ceil(this.retryAfterMs / 1000))) };
  }
}
defineErrorClass(CircuitOpenError, 'CircuitOpenError', ErrorCode.CircuitOpen);

/**
 * True for a {@link CircuitOpenError} from any copy of this package, in `error` or the errors it wraps (global
 * fetch throws `TypeError: fetch failed` with the refusal as its cause).
 *
 * @example
 * ```ts
 * try { await fetch('http://inventory/stock'); }
 * catch (error) { if (isCircuitOpenError(error)) return cachedStock(); throw error; }
 * ```
 */
export function isCircuitOpenError(error: unknown): boolean {
  return findErrorWithCode(error, ErrorCode.CircuitOpen) !== undefined;
}
