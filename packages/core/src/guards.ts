/**
 * "Does this error mean the deadline was exceeded (or the work cancelled)?" — answered for our own errors and
 * for the errors drivers and transports throw when our cancellation reached them.
 */
import { CancelledError, DeadlineExceededError } from './errors.js';
import type { StopReason } from './scope.js';

// An adapter that cancels work on the server (a Postgres CancelRequest, a MariaDB KILL QUERY) puts the reason
// on the driver error it gets back, so the error is recognised — as a deadline or as a cancellation — even
// after an ORM re-throws it unwrapped.
const kCausedBy = Symbol.for('@deadline/core/caused-by@1');

/** How deep to follow `cause` chains; they are short in practice and a cycle must not hang us. */
const MAX_CAUSE_DEPTH = 8;

/** PostgreSQL SQLSTATE `query_canceled`: a statement_timeout, a CancelRequest, pg_cancel_backend(). */
const PG_QUERY_CANCELED = '57014';
/** MariaDB ER_STATEMENT_TIMEOUT and MySQL ER_QUERY_TIMEOUT: the server's own statement time limit. */
const MYSQL_STATEMENT_TIMEOUT_ERRNOS: ReadonlySet<number> = new Set([1969, 3024]);

/**
 * Records on a driver error that it was caused by `reason` — a deadline or a cancellation this project enforced
 * (for adapters; see `@deadline/core/internal`).
 * @internal
 */
export function markCausedBy(error: unknown, reason: StopReason): void {
  if (typeof error === 'object' && error !== null && Object.isExtensible(error)) {
    Object.defineProperty(error, kCausedBy, { value: reason, configurable: true });
  }
}

function fields(value: unknown): Record<PropertyKey, unknown> | undefined {
  return typeof value === 'object' && value !== null ? (value as Record<PropertyKey, unknown>) : undefined;
}

/** A server-side timeout is a deadline by definition, whoever configured it. */
function isServerTimeout(err: Record<PropertyKey, unknown>): boolean {
  if (err.code === PG_QUERY_CANCELED)
    return typeof err.message === 'string' && err.message.includes('statement timeout');
  return typeof err.errno === 'number' && MYSQL_STATEMENT_TIMEOUT_ERRNOS.has(err.errno);
}

/**
 * True for a {@link DeadlineExceededError} from any copy of this package, and for errors that mean the same:
 * an error (an `AbortError` from `fetch`, a driver error) whose `cause` chain holds one or that an adapter
 * marked as caused by one; a server-side statement timeout (PostgreSQL `57014` "statement timeout", MariaDB
 * errno 1969, MySQL 3024). A query cancelled by someone else (`57014` "user request", errno 1317 from an
 * operator's `KILL QUERY`) is not a deadline.
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
    if (err[kCausedBy] instanceof DeadlineExceededError || isServerTimeout(err)) return true;
    current = err.cause;
  }
  return false;
}

/**
 * True for a {@link CancelledError} from any copy of this package, or an error whose `cause` chain holds one or
 * that an adapter marked as caused by one (an `AbortError` from `fetch` aborted because the client left).
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
    if (err[kCausedBy] instanceof CancelledError) return true;
    current = err.cause;
  }
  return false;
}
