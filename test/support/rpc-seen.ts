/**
 * What the RPC tests' handlers report (packages/grpc, packages/connect; test/fixtures/inventory.proto): the deadline
 * context the handler ran in, read with `currentContext()`, and an emitter for what they do as it happens.
 */
import { EventEmitter, once } from 'node:events';
import { currentContext, withoutCancel } from '@deadline/core';

/** The `Seen` message of the test service. */
export interface Seen {
  budgetMs: number;
  remainingMs: number;
  hop: string;
  traceId: string;
  stop: string;
  count: number;
  detachedTraceId: string;
  detachedHasDeadline: boolean;
}

/**
 * The current context, as a `Seen` message, with `extra` fields. `budgetMs` is the deadline's, its expiry less its
 * start (two instants on the monotonic clock, so 1500.0000000000002 for 1500): sent rounded to the nanosecond, so
 * that a test's bound (≤ 400) holds for a budget of exactly 400.
 */
export function seen(extra: Partial<Seen> = {}): Seen {
  const context = currentContext();
  return {
    budgetMs: context === undefined ? -1 : Math.round(context.deadline.budgetMs * 1e6) / 1e6,
    remainingMs: context?.deadline.remainingMs() ?? -1,
    hop: context?.hop ?? '',
    traceId: context?.trace?.traceId ?? '',
    stop: '',
    count: 0,
    detachedTraceId: '',
    detachedHasDeadline: false,
    ...extra,
  };
}

/** What a context detached from the current one (`withoutCancel`) keeps: the trace, and no deadline. */
export function detachedSeen(): Partial<Seen> {
  let detached: Partial<Seen> = {};
  withoutCancel(() => {
    const inner = currentContext();
    detached = { detachedTraceId: inner?.trace?.traceId ?? '', detachedHasDeadline: inner?.deadline.isNone === false };
  });
  return detached;
}

/** What the test service's handlers tell the test, as it happens (one emitter per test file's process). */
export const events = new EventEmitter();

/** Waits for the next `name` event from the test service's handlers. */
export async function next<T>(name: string): Promise<T> {
  const [value] = await once(events, name);
  return value as T;
}
