/**
 * The span attributes and events this project writes, under one `deadline.` namespace: no semantic convention
 * for deadlines exists, so the names are ours, documented in docs/reference/span-attributes.md.
 */

/**
 * Names of the attributes put on spans: the server span of each request, the spans of detached work and
 * jobs, and (with `DeadlineSpanProcessor` from `@deadline/opentelemetry`) each outgoing call's span.
 *
 * @example
 * ```ts
 * import { DeadlineAttributes } from '@deadline/core/internal';
 * const expired = spans.filter((span) => span.attributes[DeadlineAttributes.Outcome] === 'deadline_exceeded');
 * ```
 */
export const DeadlineAttributes = {
  /** This hop's name (the service). */
  Hop: 'deadline.hop',
  /** The budget the work ran with, in ms (after the clamp). */
  BudgetMs: 'deadline.budget_ms',
  /** Where a request's budget came from: the header's name, `default`, or `none`. */
  Source: 'deadline.source',
  /** What the caller asked for, in ms, when the route's maximum clamped it. */
  RequestedMs: 'deadline.requested_ms',
  /** Whether the caller's deadline headers were honoured (`trust`). */
  Trusted: 'deadline.trusted',
  /** How it ended: `ok`, `deadline_exceeded`, `cancelled` or `error`. */
  Outcome: 'deadline.outcome',
  /** The hop whose deadline fired (this one, or the downstream named by `X-Deadline-Exceeded-By`). */
  ExceededBy: 'deadline.exceeded_by',
  /** Why work was cancelled: `client-disconnected`, `parent-cancelled`, … */
  CancelReason: 'deadline.cancel_reason',
  /** A detached task's name (`runInBackground(name, …)`). */
  Task: 'deadline.task',
  /** An outgoing call's span: time left on the request when the call started, in ms. */
  RemainingMs: 'deadline.remaining_ms',
  /** An outgoing call's span: the timeout the call was given (remaining − margin, or a cap), in ms. */
  TimeoutMs: 'deadline.timeout_ms',
  /**
   * An outgoing call cut off: `requested` (the stop was sent: the request aborted, a CancelRequest, a KILL QUERY,
   * a CLIENT UNBLOCK) or `confirmed` (the server said the work stopped: PostgreSQL's 57014, the KILL's OK, the
   * UNBLOCK's 1).
   */
  Cancel: 'deadline.cancel',
  /** What confirmed the stop: `postgres 57014`, `KILL QUERY`, `CLIENT UNBLOCK`. */
  ConfirmedBy: 'deadline.confirmed_by',
  /** Milliseconds from the start to the moment an event happened. */
  ElapsedMs: 'deadline.elapsed_ms',
} as const;

/**
 * Names of the span events this project adds.
 *
 * @example
 * ```ts
 * const fired = span.events.find((event) => event.name === DeadlineEvents.Exceeded);
 * ```
 */
export const DeadlineEvents = {
  /** The moment the deadline fired (the request's, or a detached task's). */
  Exceeded: 'deadline.exceeded',
  /** The moment the work was cancelled (its client left, its parent was cancelled). */
  Cancelled: 'deadline.cancelled',
  /** An outgoing call cut off: the moment its stop was sent to the server. */
  CancelRequested: 'deadline.cancel_requested',
  /** An outgoing call cut off: the moment the server confirmed the work stopped. */
  CancelConfirmed: 'deadline.cancel_confirmed',
} as const;
