/**
 * What a queued job carries from the request that enqueued it: the trace (as `traceparent`/`tracestate`), the
 * baggage, the enqueuing hop and span, and the job's own budget — never the request's deadline, which means
 * nothing by the time a worker picks the job up. It travels inside `job.data` under one reserved key, because
 * `job.opts.telemetry.metadata` is overwritten by BullMQ's own telemetry when that is configured.
 */
import { type TraceContext, traceFrom } from '@deadline/core';
import { activeSpan, checkHop, storage, traceOfSpan } from '@deadline/core/internal';
import { formatTraceparent, parseTraceparent } from '@deadline/core/wire';

/**
 * The key in `job.data` that holds the carrier. The worker side ({@link withJobContext}) removes it from
 * `job.data` before the processor sees the data.
 *
 * @example
 * ```ts
 * const { [JOB_CONTEXT_KEY]: carried, ...data } = job.data;
 * ```
 */
export const JOB_CONTEXT_KEY = '__deadline';

/** The carrier as stored (JSON). @internal */
export interface JobCarrier {
  v: 1;
  traceparent?: string;
  tracestate?: string;
  baggage?: Record<string, string>;
  /** The job's own budget per attempt (ms). */
  budgetMs?: number;
  /** The hop that enqueued the job. */
  hop?: string;
}

/** What a worker rebuilds from a carrier. @internal */
export interface CarriedContext {
  trace: TraceContext | undefined;
  baggage: Record<string, string> | undefined;
  budgetMs: number | undefined;
  hop: string | undefined;
}

const MAX_BAGGAGE_ENTRIES = 64;
const MAX_BUDGET_MS = 2 ** 31 - 1;

/** The carrier for a job enqueued now, from the current context. @internal */
export function carrierFromContext(budgetMs: number | undefined): JobCarrier {
  const context = storage.getStore();
  const carrier: JobCarrier = { v: 1 };
  // With OpenTelemetry, the job is the child of the span active where it is enqueued (the request's, or one
  // the application opened inside it); else of this hop's own trace.
  const span = activeSpan();
  const trace = span === undefined ? context?.trace : traceOfSpan(span);
  if (trace !== undefined) {
    carrier.traceparent = formatTraceparent(trace);
    if (trace.tracestate !== undefined) carrier.tracestate = trace.tracestate;
  }
  if (context !== undefined && Object.keys(context.baggage).length > 0) carrier.baggage = { ...context.baggage };
  if (context?.hop !== undefined) carrier.hop = context.hop;
  if (budgetMs !== undefined) carrier.budgetMs = budgetMs;
  return carrier;
}

/**
 * Reads a carrier found in `job.data` (written by any version, or by hand, or corrupted): never throws; what is
 * malformed is dropped, one field at a time. The trace continues as a child span of the enqueuer's.
 * @internal
 */
export function readCarrier(value: unknown): CarriedContext {
  const found: CarriedContext = { trace: undefined, baggage: undefined, budgetMs: undefined, hop: undefined };
  if (typeof value !== 'object' || value === null || Array.isArray(value)) return found;
  const carrier = value as Record<string, unknown>;
  if (parseTraceparent(carrier.traceparent) !== undefined) {
    found.trace = traceFrom(carrier.traceparent, carrier.tracestate);
  }
  const baggage = carrier.baggage;
  if (typeof baggage === 'object' && baggage !== null && !Array.isArray(baggage)) {
    const entries = Object.entries(baggage).filter(([, v]) => typeof v === 'string');
    if (entries.length > 0 && entries.length <= MAX_BAGGAGE_ENTRIES) found.baggage = Object.fromEntries(entries);
  }
  const budget = carrier.budgetMs;
  if (typeof budget === 'number' && Number.isFinite(budget) && budget >= 1 && budget <= MAX_BUDGET_MS) {
    found.budgetMs = budget;
  }
  found.hop = hopOrUndefined(carrier.hop);
  return found;
}

/** `value` if it is a valid hop name (core's rule: it travels in headers), else `undefined`. @internal */
export function hopOrUndefined(value: unknown): string | undefined {
  try {
    return checkHop(value);
  } catch {
    return undefined;
  }
}
