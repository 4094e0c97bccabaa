/**
 * The options every HTTP adapter of this package takes, validated once where they enter (an interceptor built,
 * a dispatcher installed): a bad value fails at startup with the option and the value named.
 */
import { InvalidArgumentError } from '@deadline/core';
import {
  type CallGuard,
  checkFunction,
  checkGuard,
  checkNumber,
  checkObject,
  type OutgoingCallOptions,
} from '@deadline/core/internal';
import { ALL_DIALECTS, type DeadlineDialect } from '@deadline/core/wire';
import { describeTarget, type TargetRequest } from './target.js';

/**
 * Options of the HTTP adapters ({@link deadlineInterceptor}, {@link installGlobalDispatcher},
 * {@link createFetch}, {@link prepareHttpRequest}).
 *
 * @example
 * ```ts
 * const options: HttpDeadlineOptions = { marginMs: 20, maxMs: 5_000, dialects: ['grpc'] };
 * const agent = new Agent().compose(deadlineInterceptor(options));
 * ```
 */
export interface HttpDeadlineOptions {
  /** Kept back from every call for this hop's own work after it returns (ms). Default 0. */
  marginMs?: number | undefined;
  /** Below this many ms left, the call is not made (`DeadlineExceededError`, phase `before-call`). Default 1. */
  minMs?: number | undefined;
  /** Upper bound of any call's timeout (ms), with or without a deadline. Default: none. */
  maxMs?: number | undefined;
  /**
   * Budget of a call made outside any request deadline (ms): its timeout, and the budget sent. Default: none —
   * outside a deadline nothing changes.
   */
  defaultMs?: number | undefined;
  /** Dialects to send besides `X-Request-Deadline`: `'grpc'`, `'connect'`, `'envoy'`. Default none. */
  dialects?: readonly DeadlineDialect[] | undefined;
  /**
   * Whether a downstream's 504 that names the hop whose deadline fired (`X-Deadline-Exceeded-By`) fails the
   * call with `DeadlineExceededError` (`whose: 'downstream:<hop>'`), so this hop's own 504 names it too.
   * Default true.
   */
  downstreamErrors?: boolean | undefined;
  /** How a call is named in errors, events and logs. Default `METHOD origin/path` (no query string). */
  target?: ((request: TargetRequest) => string) | undefined;
  /**
   * A circuit breaker per downstream origin (`http://inventory:8080`): a function from the origin to its breaker
   * (`createBreakers()` of `@deadline/resilience` is one), or one breaker for every call. An open circuit
   * refuses the call before anything is sent (`CircuitOpenError`). Applies inside and outside a context.
   */
  circuitBreaker?: CallGuard | ((origin: string) => CallGuard | undefined) | undefined;
}

/** @internal */
export interface ResolvedHttpOptions extends OutgoingCallOptions {
  downstreamErrors: boolean;
  target: (request: TargetRequest) => string;
  /** Nothing to do outside a context: no default budget, no cap, no breaker. */
  passThroughOutside: boolean;
  /** The breaker of a call to `origin`, if any. */
  guardFor: (origin: string) => CallGuard | undefined;
}

/** @internal */
export function resolveHttpOptions(options: HttpDeadlineOptions | undefined): ResolvedHttpOptions {
  checkObject('options', options);
  const marginMs = checkNumber('marginMs', options?.marginMs);
  const minMs = checkNumber('minMs', options?.minMs);
  const maxMs = checkNumber('maxMs', options?.maxMs, { min: 1 });
  const defaultMs = checkNumber('defaultMs', options?.defaultMs, { min: 1 });
  // Checked here, not at the first call: a cap below the minimum would refuse every call.
  if (maxMs !== undefined) checkNumber('maxMs', maxMs, { min: Math.max(1, minMs ?? 1) });
  const dialects = options?.dialects;
  if (dialects !== undefined) {
    if (!Array.isArray(dialects) || dialects.some((d) => !ALL_DIALECTS.includes(d))) {
      throw new InvalidArgumentError(
        'dialects',
        `an array of ${ALL_DIALECTS.map((d) => `'${d}'`).join(', ')}`,
        dialects,
      );
    }
  }
  const downstreamErrors = options?.downstreamErrors ?? true;
  if (typeof downstreamErrors !== 'boolean') {
    throw new InvalidArgumentError('downstreamErrors', 'a boolean', downstreamErrors);
  }
  const target = checkFunction<(request: TargetRequest) => string>('target', options?.target) ?? describeTarget;
  const breaker = options?.circuitBreaker;
  let guardFor: (origin: string) => CallGuard | undefined;
  if (typeof breaker === 'function') {
    // One breaker per origin, looked up per call (a registry memoizes them).
    guardFor = (origin) => checkGuard('circuitBreaker(origin)', breaker(origin));
  } else {
    const guard = checkGuard('circuitBreaker', breaker);
    guardFor = () => guard;
  }
  return {
    marginMs,
    minMs,
    maxMs,
    defaultMs,
    dialects: dialects?.filter((d) => d !== 'deadline'),
    downstreamErrors,
    target,
    passThroughOutside: defaultMs === undefined && maxMs === undefined && breaker === undefined,
    guardFor,
  };
}
