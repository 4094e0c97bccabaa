/** Options of `withDeadline()`, checked when the client is wrapped: a bad value fails at startup, naming it. */
import { type CallGuard, checkGuard, checkName, checkNumber, checkObject } from '@deadline/core/internal';

/**
 * Options of {@link withDeadline}.
 *
 * @example
 * ```ts
 * const options: RedisDeadlineOptions = { name: 'sessions', marginMs: 5 };
 * const redis = withDeadline(new Redis(), options);
 * ```
 */
export interface RedisDeadlineOptions {
  /** The server's name in errors, events and logs (`<name> GET`: `redis GET`). Default `redis`. */
  name?: string | undefined;
  /** Kept back from every command for this hop's own work after it returns (ms). Default 0. */
  marginMs?: number | undefined;
  /** Below this many ms left, the command is not sent (`DeadlineExceededError`, phase `before-call`). Default 1. */
  minMs?: number | undefined;
  /**
   * A circuit breaker for this Redis (`new CircuitBreaker({ target: 'sessions' })` of `@deadline/resilience`): an
   * open circuit refuses a command or pipeline before it is sent (`CircuitOpenError`). It guards what this wrapper
   * bounds, the commands made inside a deadline context.
   */
  circuitBreaker?: CallGuard | undefined;
}

/** @internal */
export interface ResolvedRedisOptions {
  name: string;
  marginMs: number | undefined;
  minMs: number | undefined;
  propagates: false;
  guard: CallGuard | undefined;
}

/** @internal */
export function resolveRedisOptions(options: RedisDeadlineOptions | undefined): ResolvedRedisOptions {
  checkObject('options', options);
  return {
    name: checkName('name', options?.name) ?? 'redis',
    marginMs: checkNumber('marginMs', options?.marginMs),
    minMs: checkNumber('minMs', options?.minMs),
    propagates: false,
    guard: checkGuard('circuitBreaker', options?.circuitBreaker),
  };
}
