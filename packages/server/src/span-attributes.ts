/**
 * The request's deadline on its OpenTelemetry server span: the budget and where it came from when the request
 * arrives, an event the moment the deadline fires or the client leaves, and the outcome before the span ends
 * (the http instrumentation ends it on the response's `close`, after the adapter's own close handling).
 * Nothing here runs without a span: the request's trace then has none.
 */
import { type CancelledError, DeadlineExceededError } from '@deadline/core';
import type { OtelAttributes, OtelSpan } from '@deadline/core/internal';
import { DeadlineAttributes, DeadlineEvents } from '@deadline/core/internal';
import type { RequestBudget } from './budget.js';

/** @internal */
export function annotateArrival(span: OtelSpan, hop: string, budget: RequestBudget): void {
  if (!span.isRecording()) return;
  const attributes: OtelAttributes = {
    [DeadlineAttributes.Hop]: hop,
    [DeadlineAttributes.Source]: budget.header ?? budget.source,
    [DeadlineAttributes.Trusted]: budget.trusted,
  };
  if (Number.isFinite(budget.budgetMs)) attributes[DeadlineAttributes.BudgetMs] = Math.round(budget.budgetMs);
  if (budget.requestedMs !== undefined) attributes[DeadlineAttributes.RequestedMs] = Math.round(budget.requestedMs);
  span.setAttributes(attributes);
}

/** @internal */
export function annotateStop(span: OtelSpan, error: DeadlineExceededError | CancelledError, elapsedMs: number): void {
  if (!span.isRecording()) return;
  if (error instanceof DeadlineExceededError) {
    span.addEvent(DeadlineEvents.Exceeded, {
      [DeadlineAttributes.ElapsedMs]: Math.round(elapsedMs),
      [DeadlineAttributes.ExceededBy]: error.hop,
    });
  } else {
    span.addEvent(DeadlineEvents.Cancelled, {
      [DeadlineAttributes.ElapsedMs]: Math.round(elapsedMs),
      [DeadlineAttributes.CancelReason]: (error as CancelledError).reason,
    });
  }
}

/** @internal */
export function annotateEnd(
  span: OtelSpan,
  outcome: string,
  exceededBy: string | undefined,
  budget: RequestBudget,
): void {
  if (!span.isRecording()) return;
  const attributes: OtelAttributes = { [DeadlineAttributes.Outcome]: outcome };
  if (exceededBy !== undefined) attributes[DeadlineAttributes.ExceededBy] = exceededBy;
  // A narrowed (express router) or long-lived request ends with another budget than it arrived with.
  if (Number.isFinite(budget.budgetMs)) attributes[DeadlineAttributes.BudgetMs] = Math.round(budget.budgetMs);
  attributes[DeadlineAttributes.Source] = budget.header ?? budget.source;
  span.setAttributes(attributes);
}
