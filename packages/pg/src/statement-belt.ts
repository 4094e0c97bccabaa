/**
 * What every bounded statement shares, wrapped pool or instrumented driver: the server-side belt, and the
 * statements that must run even when no time is left.
 */
import type { OutgoingCall } from '@deadline/core/internal';

/**
 * Statements that put a connection back in order. They run even when no time is left: refusing a ROLLBACK
 * after the deadline would hand a connection back to the pool inside an open transaction.
 * @internal
 */
export const CLEANUP = /^\s*(rollback|abort|reset)\b/i;

/**
 * The server-side belt: the time left plus a little grace. The CancelRequest sent at the deadline is what
 * stops the statement; the belt is for when this process cannot send it (it died, it is stalled), so it must
 * not beat the cancel to it — its error could not say which hop's deadline it was.
 */
const BELT_GRACE_MS = 50;

/** @internal `statement_timeout` for a statement of `call` sent now (ms). */
export function beltMs(call: OutgoingCall): number {
  return Math.max(1, Math.ceil((call.timeoutMs as number) - call.elapsedMs())) + BELT_GRACE_MS;
}
