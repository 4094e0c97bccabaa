/**
 * "Does this error mean the deadline was exceeded (or the work cancelled)?" — answered for our own errors
 * and for the errors that drivers and transports throw when our cancellation reached them.
 */
import { CancelledError, DeadlineExceededError } from './errors.js';

// Set by adapters on a driver error they caused (a CancelRequest, a KILL QUERY) so the error is
// recognised even after an ORM re-throws it unwrapped.
const kCausedByDeadline = Symbol.for('@deadline/core/caused-by-deadline@1');

/** How deep to follow `cause` chains; they are short in practice and a cycle must not hang us. */
const MAX_CAUSE_DEPTH = 8;

/** PostgreSQL SQLSTATE `query_canceled`: statement_timeout, a CancelRequest, pg_cancel_backend. */
const PG_QUERY_CANCELED = '57014';
/** MySQL/MariaDB ER_QUERY_INTERRUPTED (KILL QUERY), MariaDB ER_STATEMENT_TIMEOUT, MySQL ER_QUERY_TIMEOUT. */
const MYSQL_TIMEOUT_ERRNOS: ReadonlySet<number> = new Set([1317, 1969, 3024]);

/**
 * Marks a driver error as caused by a deadline this project enforced (for adapters; see `@deadline/core/internal`).
 * @internal
 */
export function markCausedByDeadline(error: unknown): void {
  if (typeof error === 'object' && error !== null && Object.isExtensible(error)) {
    Object.defineProperty(error, kCausedByDeadline, { value: true });
  }
}

function fields(value: unknown): Record<PropertyKey, unknown> | undefined {
  return typeof value === 'object' && value !== null ? (value as Record<PropertyKey, unknown>) : undefined;
}

function isDriverTimeout(err: Record<PropertyKey, unknown>): boolean {
  if (err.code === PG_QUERY_CANCELED) {
    // 57014 also means "an operator cancelled it": count it only when we caused it, or when it was a
    // statement_timeout (the server-side belt, which is a deadline by definition).
    return (
      err[kCausedByDeadline] === true || (typeof err.message === 'string' && err.message.includes('statement timeout'))
    );
  }
  return typeof err.errno === 'number' && MYSQL_TIMEOUT_ERRNOS.has(err.errno);
}

/**
 * True for a {@link DeadlineExceededError} from any copy of this package, and for errors that mean the same:
 * an `AbortError` (or any error) whose `cause` chain holds one, PostgreSQL `57014` caused by our cancel or a
 * statement timeout, MySQL/MariaDB errno 1317 / 1969 / 3024.
 *
 * @example
 * ```ts
 * import { isDeadlineExceededError } from '@deadline/core';
 * try { await pool.query('select pg_sleep(5)'); }
 * catch (err) { if (isDeadlineExceededError(err)) reply.code(504); else throw err; }
 * ```
 */
export function isDeadlineExceededError(error: unknown): boolean {
  let current = error;
  for (let depth = 0; depth < MAX_CAUSE_DEPTH; depth++) {
    if (current instanceof DeadlineExceededError) return true;
    const err = fields(current);
    if (err === undefined) return false;
    if (isDriverTimeout(err)) return true;
    current = err.cause;
  }
  return false;
}

/**
 * True for a {@link CancelledError} from any copy of this package, or an error whose `cause` chain holds one
 * (an `AbortError` from `fetch` or `http.request` aborted by a cancelled context).
 *
 * @example
 * ```ts
 * import { isCancelledError } from '@deadline/core';
 * try { await fetch(url, { signal }); }
 * catch (err) { if (isCancelledError(err)) return; else throw err; } // cancelled: nobody is waiting
 * ```
 */
export function isCancelledError(error: unknown): boolean {
  let current = error;
  for (let depth = 0; depth < MAX_CAUSE_DEPTH; depth++) {
    if (current instanceof CancelledError) return true;
    const err = fields(current);
    if (err === undefined) return false;
    current = err.cause;
  }
  return false;
}
