/**
 * The options of `withDeadline()`, checked once where they enter: a bad value fails at startup, naming the
 * option and the value received, never on the first query.
 */
import {
  type CallGuard,
  checkGuard,
  checkName,
  checkNumber,
  checkObject,
  type OutgoingCallOptions,
} from '@deadline/core/internal';

/**
 * Options of {@link withDeadline}.
 *
 * @example
 * ```ts
 * const options: MysqlDeadlineOptions = { name: 'orders-db', marginMs: 20, minMs: 5 };
 * const db = withDeadline(pool, options);
 * ```
 */
export interface MysqlDeadlineOptions {
  /** How the database is named in errors, diagnostics events and logs. Default: the database name, else `'mysql'`. */
  name?: string | undefined;
  /** Kept back from every statement for this hop's own work after it returns (ms). Default 0. */
  marginMs?: number | undefined;
  /** Below this many ms left (after the margin) the statement is not sent: `DeadlineExceededError`, `before-call`. Default 1. */
  minMs?: number | undefined;
  /**
   * A circuit breaker for this database (`new CircuitBreaker({ target: 'orders-db' })` of `@deadline/resilience`):
   * an open circuit refuses a statement before it is sent (`CircuitOpenError`). It guards what this wrapper bounds,
   * the statements made inside a deadline context.
   */
  circuitBreaker?: CallGuard | undefined;
}

/** @internal */
export interface ResolvedOptions {
  /** The target of every call: the `name` option or its default. */
  target: string;
  call: OutgoingCallOptions;
  guard: CallGuard | undefined;
}

/** @internal */
export function resolveOptions(options: MysqlDeadlineOptions | undefined, database: unknown): ResolvedOptions {
  checkObject('options', options);
  const name = checkName('name', options?.name);
  const marginMs = checkNumber('marginMs', options?.marginMs);
  const minMs = checkNumber('minMs', options?.minMs);
  const fallback = typeof database === 'string' && database.length > 0 ? database : 'mysql';
  // A database call sends no budget headers to anyone: none computed, no `deadline:propagate` published.
  const call = { marginMs, minMs, propagates: false };
  return { target: name ?? fallback, call, guard: checkGuard('circuitBreaker', options?.circuitBreaker) };
}
