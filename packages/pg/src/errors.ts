/**
 * What the caller gets when a statement failed: the typed error when the deadline (ours, or the server's
 * statement_timeout belt) or a cancellation stopped it, the driver's error otherwise.
 */
import { DeadlineExceededError, isDeadlineError, type StopReason } from '@deadline/core';
import { markCausedBy, type OutgoingCall } from '@deadline/core/internal';
import { QUERY_CANCELED } from './session.js';

/** @internal */
export function typedError(error: unknown, call: OutgoingCall, stopped: StopReason | undefined): unknown {
  if (stopped !== undefined) {
    // The session's rejection: the stop itself, with the driver's error as its cause when the server confirmed.
    if (isDeadlineError(error)) return error;
    if (error !== undefined) markCausedBy(error, stopped);
    return stopped;
  }
  // The server's belt fired before our own stop (a late timer on a busy machine): the same deadline. Another
  // 57014 — an operator's pg_cancel_backend() — is not a deadline and stays the driver's error.
  if (isStatementTimeout(error)) {
    return new DeadlineExceededError({
      budgetMs: call.timeoutMs,
      elapsedMs: call.elapsedMs(),
      phase: 'during-call',
      target: call.target,
      hop: call.hop,
      cause: error,
    });
  }
  return error;
}

/**
 * Whether the server stopped the statement at its `statement_timeout` (SQLSTATE 57014, "canceling statement due to
 * statement timeout"): a deadline, whoever set the limit. Another 57014 — a CancelRequest, an operator's
 * pg_cancel_backend() ("due to user request") — is not.
 * @internal
 */
export function isStatementTimeout(error: unknown): boolean {
  const driver = error as { code?: unknown; message?: unknown } | null | undefined;
  return (
    driver?.code === QUERY_CANCELED &&
    typeof driver.message === 'string' &&
    driver.message.includes('statement timeout')
  );
}
