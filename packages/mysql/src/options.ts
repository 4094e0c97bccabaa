/**
 * The options of `withDeadline()`, checked once where they enter: a bad value fails at startup, naming the
 * option and the value received, never on the first query.
 */
import { InvalidArgumentError } from '@deadline/core';
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
  /**
   * Who gets a connection when a wrapped pool has none free, among the statements waiting inside a deadline
   * context. `'adaptive'`: in arrival order while the queue keeps up with their deadlines, newest first once the
   * oldest has waited as long as it has left; a waiter leaves once its time left no longer covers a typical
   * statement. `'fifo'`: mysql2's own queue, in arrival order, each waiter until its deadline. Default
   * `'adaptive'`; a pool with no connection limit or with `waitForConnections: false`, and a single connection,
   * are always served as mysql2 serves them.
   */
  checkoutOrder?: 'adaptive' | 'fifo' | undefined;
}

/**
 * Options of `instrumentMysql()` and `instrumentMariadb()`: those of {@link withDeadline} but `checkoutOrder` (an
 * instrumented pool keeps its driver's own queue).
 *
 * @example
 * ```ts
 * const options: MysqlInstrumentOptions = { name: 'orders-db', marginMs: 20 };
 * instrumentMysql(mysql, options);
 * ```
 */
export type MysqlInstrumentOptions = Omit<MysqlDeadlineOptions, 'checkoutOrder'>;

/** @internal */
export interface ResolvedOptions {
  /** The target of every call: the `name` option or its default. */
  target: string;
  call: OutgoingCallOptions;
  guard: CallGuard | undefined;
  checkoutOrder: 'adaptive' | 'fifo';
}

/** @internal */
export function resolveOptions(options: MysqlDeadlineOptions | undefined, database: unknown): ResolvedOptions {
  checkObject('options', options);
  const name = checkName('name', options?.name);
  const marginMs = checkNumber('marginMs', options?.marginMs);
  const minMs = checkNumber('minMs', options?.minMs);
  const checkoutOrder = options?.checkoutOrder ?? 'adaptive';
  if (checkoutOrder !== 'adaptive' && checkoutOrder !== 'fifo') {
    throw new InvalidArgumentError('checkoutOrder', "'adaptive' or 'fifo'", checkoutOrder);
  }
  const fallback = typeof database === 'string' && database.length > 0 ? database : 'mysql';
  // A database call sends no budget headers to anyone: none computed, no `deadline:propagate` published.
  const call = { marginMs, minMs, propagates: false };
  return {
    target: name ?? fallback,
    call,
    guard: checkGuard('circuitBreaker', options?.circuitBreaker),
    checkoutOrder,
  };
}
