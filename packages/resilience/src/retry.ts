/**
 * Retries inside the one budget. Each attempt gets what is left of the request's deadline (capped per attempt,
 * like Envoy's per-try timeout), the wait between attempts is full-jitter backoff cut short by a cancel, and an
 * attempt that cannot get `minAttemptMs` is not started: a 2 s budget stays 2 s, never 2 s plus a fresh
 * timeout per retry.
 */
import {
  createContext,
  currentContext,
  type DeadlineContext,
  DeadlineExceededError,
  InvalidArgumentError,
  isDeadlineExceededError,
} from '@deadline/core';
import { checkFunction, checkName, checkNumber, checkObject } from '@deadline/core/internal';
import { IDEMPOTENCY_KEYS, IdempotencyKeys } from '@deadline/idempotency/keys';
import { fullJitter } from './backoff.js';
import { isRetryableError, neverSent, statusOf } from './classify.js';
import { retryAfterOf } from './retry-after.js';
import type { RetryBudget } from './retry-budget.js';
import { cancellableSleep } from './sleep.js';

/**
 * What {@link RetryOptions.onRetry} is told before each wait.
 *
 * @example
 * ```ts
 * const onRetry = ({ attempt, delayMs, error }: RetryEvent) => log.warn({ attempt, delayMs, err: error }, 'retrying');
 * ```
 */
export interface RetryEvent {
  /** The attempt that just failed (1-based). */
  attempt: number;
  /** The error it failed with, or the retryable result (a 503 response). */
  error: unknown;
  /** The wait before the next attempt (ms). */
  delayMs: number;
  /** What is left of the request's budget (ms; `Infinity` without one). */
  remainingMs: number;
}

/**
 * Options of {@link retry}.
 *
 * @example
 * ```ts
 * const options: RetryOptions = { attempts: 3, perAttemptTimeoutMs: 400, baseDelayMs: 50, maxDelayMs: 500 };
 * ```
 */
export interface RetryOptions {
  /** Attempts in all, the first included (3: at most 3 calls). Default 3. */
  attempts?: number | undefined;
  /** Each attempt's own cap (ms), within what is left of the budget. Default: none (the budget is the cap). */
  perAttemptTimeoutMs?: number | undefined;
  /** An attempt that cannot get at least this much (ms) is not started. Default 10. */
  minAttemptMs?: number | undefined;
  /** Backoff: the first wait is uniform in [0, baseDelayMs], doubling per retry. Default 50. */
  baseDelayMs?: number | undefined;
  /** Backoff cap (ms). Default 1 000. */
  maxDelayMs?: number | undefined;
  /**
   * The longest `Retry-After` honoured (ms): a server asking for more ends the retrying with what it answered.
   * Inside a deadline, a wait that does not fit in the budget ends it too. Default 10 000.
   */
  maxRetryAfterMs?: number | undefined;
  /** Cancels the retrying (and the attempt in flight) when it aborts, besides the request's context. */
  signal?: AbortSignal | undefined;
  /**
   * Whether the call may safely run twice. When false, only failures where the request certainly never
   * reached the server (connection refused, not sent for lack of time) are retried. Default true.
   */
  idempotent?: boolean | undefined;
  /**
   * Makes a non-idempotent call safe to resend with an `Idempotency-Key` the downstream deduplicates on. Every
   * attempt runs from the same position of the keys (`IdempotencyKeys` of `@deadline/idempotency`), so the http adapter gives each
   * attempt's POST and PATCH calls the same keys, and a failed attempt is retried as if `idempotent` were true.
   * A string: the key of the first such call (later ones are derived from it), for work outside an idempotent
   * request. `true`: the keys of the idempotent request this runs in (`@deadline/idempotency`); outside one,
   * nothing is keyed and `idempotent` decides alone. Default: attempts inside an idempotent request still send
   * the same keys, but only `idempotent` decides what is resent.
   */
  idempotencyKey?: string | boolean | undefined;
  /** Shared per downstream: when it has no retry left, the original error is thrown instead of retrying. */
  retryBudget?: RetryBudget | undefined;
  /** Decides which errors are retried. Default: refused/reset/socket errors, 502/503/504, an attempt's timeout. */
  isRetryable?: ((error: unknown) => boolean) | undefined;
  /** Decides which results are retried (and discarded). Default: a response with status 502, 503 or 504. */
  isRetryableResult?: ((result: unknown) => boolean) | undefined;
  /** Called before each wait: for logs and metrics. */
  onRetry?: ((event: RetryEvent) => void) | undefined;
  /** The downstream's name, in the error when the budget runs out. */
  target?: string | undefined;
  /** Random numbers in [0, 1) for the jitter; for tests. */
  random?: (() => number) | undefined;
}

const RETRYABLE_STATUSES = new Set([502, 503, 504]);
const defaultRetryableResult = (result: unknown) => RETRYABLE_STATUSES.has(statusOf(result) ?? 0);

/**
 * Calls `fn` until it succeeds, at most `attempts` times, inside the current deadline: each attempt runs in a
 * child context bounded by what is left (and by `perAttemptTimeoutMs`), so every call inside it derives its
 * timeout from the attempt. `fn` gets the attempt number (1-based) and the attempt's signal. Never retried:
 * 4xx, a cancel, the request's own deadline, a non-idempotent call that may have reached the server, a retry
 * the {@link RetryBudget} has no room for. A retryable result (a 503 response) is retried and discarded; the
 * last one is returned as it is. `Retry-After` is honoured when it fits in the budget.
 *
 * @example
 * ```ts
 * import { retry } from '@deadline/resilience';
 *
 * // Inside a request with 1 s left: at most 3 attempts, each at most 400 ms, all within the 1 s.
 * const response = await retry((attempt, signal) => fetch('http://inventory/stock/42', { signal }), {
 *   attempts: 3,
 *   perAttemptTimeoutMs: 400,
 * });
 * ```
 */
export async function retry<T>(
  fn: (attempt: number, signal: AbortSignal | undefined) => T | Promise<T>,
  options: RetryOptions = {},
): Promise<T> {
  checkFunction('fn', fn, false);
  const o = resolve(options);
  const parent = currentContext();
  // One position in the keys for all the attempts: each restarts from it, and so sends the same keys.
  const keys = o.explicitKeys ?? (parent === undefined ? undefined : IDEMPOTENCY_KEYS.get(parent)?.branch());
  const resendable = o.idempotent || (o.keyed && keys !== undefined);
  o.retryBudget?.recordRequest();
  let lastError: unknown;
  for (let attempt = 1; ; attempt++) {
    const stoppedBefore = parent?.stopReason;
    if (stoppedBefore !== undefined) throw stoppedBefore;
    if (o.signal?.aborted) throw o.signal.reason;
    const left = parent?.remainingMs() ?? Number.POSITIVE_INFINITY;
    if (attempt > 1 && left < o.minAttemptMs) throw budgetRanOut(attempt - 1, lastError, left, o.target);
    let result: T;
    try {
      result = await runAttempt(fn, attempt, left, o, keys?.restart());
    } catch (error) {
      lastError = error;
      // The request's own deadline (or its cancel) ends the retrying: nobody waits for another attempt.
      const stopped = parent?.stopReason;
      if (stopped !== undefined) throw isDeadlineExceededError(error) || error === stopped ? error : stopped;
      if (o.signal?.aborted) throw error;
      if (attempt >= o.attempts || !o.isRetryable(error)) throw error;
      if (!resendable && !neverSent(error)) throw error;
      if (o.retryBudget !== undefined && !o.retryBudget.tryRetry()) throw error;
      await wait(attempt, error, parent, o);
      continue;
    }
    // A 503 answer to a call that is not idempotent may have done its work: never sent again.
    if (attempt < o.attempts && resendable && o.isRetryableResult(result)) {
      if (o.retryBudget !== undefined && !o.retryBudget.tryRetry()) return result;
      lastError = result;
      const delay = delayFor(attempt, result, o);
      // No time for another attempt after the wait: the response we have is the answer.
      if (delay === undefined || delay + o.minAttemptMs > (parent?.remainingMs() ?? Number.POSITIVE_INFINITY)) {
        return result;
      }
      discard(result);
      await sleepBefore(attempt, result, delay, parent, o);
      continue;
    }
    return result;
  }
}

interface Resolved {
  attempts: number;
  perAttemptTimeoutMs: number | undefined;
  minAttemptMs: number;
  baseDelayMs: number;
  maxDelayMs: number;
  maxRetryAfterMs: number;
  signal: AbortSignal | undefined;
  idempotent: boolean;
  /** `idempotencyKey` was given (true or a key): keyed attempts may be resent. */
  keyed: boolean;
  /** The keys of an explicit `idempotencyKey`. */
  explicitKeys: IdempotencyKeys | undefined;
  retryBudget: RetryBudget | undefined;
  isRetryable: (error: unknown) => boolean;
  isRetryableResult: (result: unknown) => boolean;
  onRetry: ((event: RetryEvent) => void) | undefined;
  target: string | undefined;
  random: () => number;
}

function resolve(options: RetryOptions): Resolved {
  checkObject('options', options);
  const signal = options.signal;
  if (signal !== undefined && !(signal instanceof AbortSignal)) {
    throw new InvalidArgumentError('signal', 'an AbortSignal', signal);
  }
  return {
    attempts: checkAttempts(options.attempts),
    perAttemptTimeoutMs: checkNumber('perAttemptTimeoutMs', options.perAttemptTimeoutMs, { min: 1 }),
    minAttemptMs: checkNumber('minAttemptMs', options.minAttemptMs) ?? 10,
    baseDelayMs: checkNumber('baseDelayMs', options.baseDelayMs) ?? 50,
    maxDelayMs: checkNumber('maxDelayMs', options.maxDelayMs) ?? 1_000,
    maxRetryAfterMs: checkNumber('maxRetryAfterMs', options.maxRetryAfterMs) ?? 10_000,
    signal,
    idempotent: options.idempotent ?? true,
    ...keyOptions(options.idempotencyKey),
    retryBudget: options.retryBudget,
    isRetryable: checkFunction('isRetryable', options.isRetryable) ?? isRetryableError,
    isRetryableResult: checkFunction('isRetryableResult', options.isRetryableResult) ?? defaultRetryableResult,
    onRetry: checkFunction('onRetry', options.onRetry),
    target: checkName('target', options.target),
    random: checkFunction('random', options.random) ?? Math.random,
  };
}

function keyOptions(value: unknown): { keyed: boolean; explicitKeys: IdempotencyKeys | undefined } {
  if (value === undefined || value === false) return { keyed: false, explicitKeys: undefined };
  if (value === true) return { keyed: true, explicitKeys: undefined };
  if (typeof value === 'string') return { keyed: true, explicitKeys: IdempotencyKeys.fromKey(value) };
  throw new InvalidArgumentError('idempotencyKey', 'a key (string) or a boolean', value);
}

/**
 * One attempt, in a child context bounded by what is left and the per-attempt cap; abandoned at its end. Not
 * ended when `fn` succeeds: a response it returns may still have a body to read, and ending the attempt's context
 * would cut it (the attempt's deadline bounds that read, as Envoy's per-try timeout does). A failed attempt's
 * context is ended at once, cancelling whatever it left running.
 */
function runAttempt<T>(
  fn: (attempt: number, signal: AbortSignal | undefined) => T | Promise<T>,
  attempt: number,
  left: number,
  o: Resolved,
  idempotencyKeys: IdempotencyKeys | undefined,
): Promise<T> {
  const cap = Math.min(left, o.perAttemptTimeoutMs ?? Number.POSITIVE_INFINITY);
  const ctx = createContext({
    deadline: Number.isFinite(cap) ? cap : undefined,
    values: idempotencyKeys === undefined ? undefined : [IDEMPOTENCY_KEYS.with(idempotencyKeys)],
  });
  return new Promise<T>((resolve, reject) => {
    let off = () => {};
    const fail = (error: unknown) => {
      off();
      o.signal?.removeEventListener('abort', onAbort);
      ctx.end();
      reject(error);
    };
    // The caller's signal, linked by hand and unlinked after (not AbortSignal.any: it leaks on Node 20).
    const onAbort = () => ctx.cancel(o.signal?.reason instanceof Error ? o.signal.reason : 'retry aborted');
    o.signal?.addEventListener('abort', onAbort, { once: true });
    // An attempt that ignores its signal is abandoned at its deadline, not waited for.
    off = ctx.onStop(fail);
    ctx
      .run(() => Promise.resolve().then(() => fn(attempt, ctx.signal)))
      .then((value) => {
        off();
        o.signal?.removeEventListener('abort', onAbort);
        resolve(value);
      }, fail);
  });
}

/**
 * The wait before the next attempt: the backoff, or longer if the server asked (`Retry-After`). `undefined` when
 * the server asked for longer than `maxRetryAfterMs`: not worth waiting for, in a budget or not.
 */
function delayFor(attempt: number, failure: unknown, o: Resolved): number | undefined {
  const backoff = fullJitter(attempt, o.baseDelayMs, o.maxDelayMs, o.random);
  const asked = retryAfterOf(failure);
  if (asked === undefined) return backoff;
  return asked > o.maxRetryAfterMs ? undefined : Math.max(backoff, asked);
}

async function wait(attempt: number, error: unknown, parent: DeadlineContext | undefined, o: Resolved) {
  const delay = delayFor(attempt, error, o);
  const remaining = parent?.remainingMs() ?? Number.POSITIVE_INFINITY;
  // The server asked us to stay away longer than we would wait: its error is the answer.
  if (delay === undefined) throw error;
  // The next attempt could not get its minimum after the wait (a Retry-After past the deadline): stop now.
  if (delay + o.minAttemptMs > remaining) throw budgetRanOut(attempt, error, remaining, o.target);
  await sleepBefore(attempt, error, delay, parent, o);
}

function sleepBefore(
  attempt: number,
  error: unknown,
  delayMs: number,
  parent: DeadlineContext | undefined,
  o: Resolved,
) {
  try {
    o.onRetry?.({ attempt, error, delayMs, remainingMs: parent?.remainingMs() ?? Number.POSITIVE_INFINITY });
  } catch {
    // A broken logger must not change what the retry does.
  }
  return cancellableSleep(delayMs, parent, o.signal);
}

/** The body of a response that will not be read: released, so its connection can be reused. */
function discard(result: unknown): void {
  const body = (result as { body?: { cancel?: () => Promise<void>; dump?: () => Promise<void> } } | null)?.body;
  const release = body?.dump ?? body?.cancel;
  if (typeof release === 'function') release.call(body).catch(() => {});
}

function checkAttempts(value: unknown): number {
  const attempts = checkNumber('attempts', value, { min: 1, max: 100 }) ?? 3;
  if (!Number.isInteger(attempts)) throw new InvalidArgumentError('attempts', 'a whole number from 1 to 100', value);
  return attempts;
}

function budgetRanOut(attempts: number, lastError: unknown, remainingMs: number, target: string | undefined) {
  return new DeadlineExceededError({
    phase: 'before-call',
    target,
    // This hop's deadline: the edge names it in X-Deadline-Exceeded-By.
    hop: currentContext()?.hop,
    cause: lastError,
    message: `deadline budget ran out after ${attempts} attempt${attempts === 1 ? '' : 's'}${target === undefined ? '' : ` to ${target}`}: ${Math.max(0, Math.floor(remainingMs))} ms left, not enough for another (last error: ${describe(lastError)})`,
  });
}

function describe(error: unknown): string {
  if (error instanceof Error) return `${error.name}: ${error.message}`;
  const status = statusOf(error);
  return status === undefined ? String(error) : `status ${status}`;
}
