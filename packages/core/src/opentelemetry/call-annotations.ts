/**
 * What an outgoing call writes on its span (see call-span.ts for how it gets one): its budget when it starts,
 * the moment it is cut off and its stop sent, the moment the server confirms the stop, and the outcome. A span
 * the instrumentation has already ended takes nothing (`isRecording()` is false).
 */
import { CancelledError, DeadlineExceededError } from '../errors.js';
import type { OtelAttributes, OtelSpan } from './api.js';
import { DeadlineAttributes, DeadlineEvents } from './attributes.js';

/** @internal */
export function annotateCallStart(span: OtelSpan, remainingMs: number, timeoutMs: number | undefined): void {
  if (!span.isRecording()) return;
  const attributes: OtelAttributes = {};
  if (Number.isFinite(remainingMs)) attributes[DeadlineAttributes.RemainingMs] = Math.max(0, Math.floor(remainingMs));
  if (timeoutMs !== undefined) attributes[DeadlineAttributes.TimeoutMs] = timeoutMs;
  span.setAttributes(attributes);
}

/** @internal The call was cut off: the deadline fired (or the request was cancelled), and its stop went out. */
export function annotateCallStop(span: OtelSpan, reason: DeadlineExceededError | CancelledError, elapsedMs: number) {
  if (!span.isRecording()) return;
  const elapsed = { [DeadlineAttributes.ElapsedMs]: Math.round(elapsedMs) };
  if (reason instanceof DeadlineExceededError) {
    span.addEvent(DeadlineEvents.Exceeded, { ...elapsed, [DeadlineAttributes.ExceededBy]: reason.hop });
  } else {
    span.addEvent(DeadlineEvents.Cancelled, { ...elapsed, [DeadlineAttributes.CancelReason]: reason.reason });
  }
  span.addEvent(DeadlineEvents.CancelRequested, elapsed);
  span.setAttributes({
    [DeadlineAttributes.Cancel]: 'requested',
    [DeadlineAttributes.Outcome]: reason instanceof CancelledError ? 'cancelled' : 'deadline_exceeded',
  });
}

/** @internal The server confirmed that the work stopped. */
export function annotateCallConfirmed(span: OtelSpan, by: string, elapsedMs: number): void {
  if (!span.isRecording()) return;
  span.addEvent(DeadlineEvents.CancelConfirmed, {
    [DeadlineAttributes.ElapsedMs]: Math.round(elapsedMs),
    [DeadlineAttributes.ConfirmedBy]: by,
  });
  span.setAttributes({ [DeadlineAttributes.Cancel]: 'confirmed', [DeadlineAttributes.ConfirmedBy]: by });
}
