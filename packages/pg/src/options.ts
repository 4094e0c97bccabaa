/**
 * Options of `withDeadline()`, validated once when the pool is wrapped: a bad value fails at startup, naming
 * the option.
 */
import { InvalidArgumentError } from '@deadline/core';
import { type CallGuard, checkGuard, checkName, checkNumber, checkObject } from '@deadline/core/internal';

/**
 * Options of {@link withDeadline}.
 *
 * @example
 * ```ts
 * const options: PgDeadlineOptions = { name: 'orders-db', marginMs: 10 };
 * const db = withDeadline(new pg.Pool(), options);
 * ```
 */
export interface PgDeadlineOptions {
  /** The database's name in errors, events and logs. Default `postgres:<database>`. */
  name?: string | undefined;
  /** Kept back from every query for this hop's own work after it returns (ms). Default 0. */
  marginMs?: number | undefined;
  /** Below this many ms left, the query is not sent (`DeadlineExceededError`, phase `before-call`). Default 1. */
  minMs?: number | undefined;
  /**
   * Also bound each statement on the server with `statement_timeout` (set for that statement and reset before
   * the connection goes back to the pool; `SET LOCAL` in `transaction()`): the belt that holds if this
   * process dies before it can cancel. Costs a round trip each way. Default true.
   */
  statementTimeout?: boolean | undefined;
  /**
   * A circuit breaker for this database (`new CircuitBreaker({ target: 'orders-db' })` of `@deadline/resilience`):
   * an open circuit refuses a query before it is sent (`CircuitOpenError`). It guards what this wrapper bounds,
   * the queries made inside a deadline context.
   */
  circuitBreaker?: CallGuard | undefined;
  /**
   * Who gets a connection when the pool has none free, among the queries waiting inside a deadline context.
   * `'adaptive'`: in arrival order while the queue keeps up with its waiters' deadlines, newest first once the
   * oldest waiter has waited as long as it has left — under overload the oldest waiters are the ones with the
   * least time left, and a connection given to them is spent on statements their deadline then cuts. A waiter
   * leaves the queue, without touching the database, once its time left no longer covers what a statement on
   * this pool typically takes. `'fifo'`: pg-pool's own queue, in arrival order, each waiter until its
   * deadline. Default `'adaptive'` (a pool without pg-pool's counts, or a single client, is always `'fifo'`).
   */
  checkoutOrder?: 'adaptive' | 'fifo' | undefined;
}

/** @internal */
export interface ResolvedPgOptions {
  target: string;
  /** A database call sends no budget headers to anyone. */
  propagates: false;
  marginMs: number | undefined;
  minMs: number | undefined;
  statementTimeout: boolean;
  guard: CallGuard | undefined;
  checkoutOrder: 'adaptive' | 'fifo';
}

/** @internal */
export function resolvePgOptions(
  options: PgDeadlineOptions | undefined,
  database: string | undefined,
): ResolvedPgOptions {
  checkObject('options', options);
  const statementTimeout = options?.statementTimeout ?? true;
  if (typeof statementTimeout !== 'boolean') {
    throw new InvalidArgumentError('statementTimeout', 'a boolean', statementTimeout);
  }
  const checkoutOrder = options?.checkoutOrder ?? 'adaptive';
  if (checkoutOrder !== 'adaptive' && checkoutOrder !== 'fifo') {
    throw new InvalidArgumentError('checkoutOrder', "'adaptive' or 'fifo'", checkoutOrder);
  }
  return {
    target: checkName('name', options?.name) ?? `postgres:${database ?? 'postgres'}`,
    propagates: false,
    marginMs: checkNumber('marginMs', options?.marginMs),
    minMs: checkNumber('minMs', options?.minMs),
    statementTimeout,
    guard: checkGuard('circuitBreaker', options?.circuitBreaker),
    checkoutOrder,
  };
}
