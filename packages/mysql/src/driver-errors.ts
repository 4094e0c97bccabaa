/**
 * What the driver's errors mean to us. The server reports a statement stopped by KILL QUERY as errno 1317, and one
 * stopped by its own limit (our belt) as 1969 (MariaDB) or 3024 (MySQL).
 */
import { DeadlineExceededError } from '@deadline/core';
import { markCausedBy, type OutgoingCall, storage } from '@deadline/core/internal';

/** ER_QUERY_INTERRUPTED: a KILL QUERY (ours, or an operator's) stopped the statement. */
export const ER_QUERY_INTERRUPTED = 1317;
/** ER_NO_SUCH_THREAD: the KILL named a connection that no longer exists. */
export const ER_NO_SUCH_THREAD = 1094;
/** MariaDB ER_STATEMENT_TIMEOUT and MySQL ER_QUERY_TIMEOUT: the server's own limit, our belt. */
const SERVER_TIMEOUT_ERRNOS: ReadonlySet<number> = new Set([1969, 3024]);

/**
 * @internal What stopped a statement that ended with the server's own limit, named as `deadline.confirmed_by`
 * says it: MariaDB's variable or MySQL's hint. Undefined for any other error.
 */
export function serverLimitOf(error: unknown): string | undefined {
  const errno = errnoOf(error);
  return errno === 1969 ? 'max_statement_time' : errno === 3024 ? 'MAX_EXECUTION_TIME' : undefined;
}

/** @internal */
export function errnoOf(error: unknown): number | undefined {
  const errno = (error as { errno?: unknown } | null | undefined)?.errno;
  return typeof errno === 'number' ? errno : undefined;
}

/** @internal A fatal driver error: the connection is dead, whatever it was doing. */
export function isFatal(error: unknown): boolean {
  return (error as { fatal?: unknown } | null | undefined)?.fatal === true;
}

/** @internal */
export function isServerTimeout(error: unknown): boolean {
  const errno = errnoOf(error);
  return errno !== undefined && SERVER_TIMEOUT_ERRNOS.has(errno);
}

/**
 * @internal The server's limit fired before our own stop did (our event loop was late, or the server counted
 * differently): the call is cut off all the same, with the driver's error as the cause.
 */
export function serverTimeoutError(call: OutgoingCall, error: unknown): DeadlineExceededError {
  const elapsedMs = call.elapsedMs();
  const typed = new DeadlineExceededError({
    budgetMs: call.timeoutMs,
    elapsedMs,
    phase: 'during-call',
    target: call.target,
    hop: storage.getStore()?.hop,
    cause: error,
    message: `call to ${call.target} stopped by the server's statement time limit after ${Math.round(elapsedMs)} ms (its timeout: ${call.timeoutMs} ms)`,
  });
  markCausedBy(error, typed);
  return typed;
}
