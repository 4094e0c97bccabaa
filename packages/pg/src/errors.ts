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
  const driver = error as { code?: string; message?: string } | null;
  if (driver?.code === QUERY_CANCELED && driver.message?.includes('statement timeout') === true) {
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
