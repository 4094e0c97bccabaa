/**
 * The instruments `recordDeadlineMetrics` makes on its meter: their names, units and attributes, each documented once,
 * in docs/reference/metrics.md. No semantic convention covers deadlines: the names are ours, under `deadline.`, with
 * the attribute names the spans already use (core's `DeadlineAttributes`).
 */
import type { Counter, Histogram, Meter } from '@opentelemetry/api';
import { ValueType } from '@opentelemetry/api';

/** Attribute names, shared with the spans where a span has the same thing. */
export const Attr = {
  Hop: 'deadline.hop',
  Source: 'deadline.source',
  Target: 'deadline.target',
  ExceededBy: 'deadline.exceeded_by',
  Phase: 'deadline.phase',
  Outcome: 'deadline.outcome',
  ConfirmedBy: 'deadline.confirmed_by',
  Route: 'deadline.route',
  RefusalReason: 'deadline.refusal_reason',
} as const;

/**
 * Bucket boundaries for budgets in ms: fine below 100 ms, where a call runs short of time; up to a minute, the
 * servers' default `maxMs`. A value equal to a boundary falls in the bucket it closes: 0 (no time left) alone in the first.
 */
export const BUDGET_BUCKETS_MS = [
  0, 5, 10, 25, 50, 100, 250, 500, 750, 1_000, 2_000, 3_000, 5_000, 10_000, 15_000, 30_000, 60_000,
];

/** The instruments, made once per `recordDeadlineMetrics()`. */
export interface Instruments {
  requestBudget: Histogram;
  callBudget: Histogram;
  expirations: Counter;
  cancelRequests: Counter;
  cancelConfirmations: Counter;
  refusals: Counter;
}

function budgetHistogram(meter: Meter, name: string, description: string): Histogram {
  return meter.createHistogram(name, {
    description,
    unit: 'ms',
    advice: { explicitBucketBoundaries: BUDGET_BUCKETS_MS },
  });
}

function counter(meter: Meter, name: string, unit: string, description: string): Counter {
  return meter.createCounter(name, { description, unit, valueType: ValueType.INT });
}

/** Makes the instruments on `meter`. */
export function createInstruments(meter: Meter): Instruments {
  return {
    requestBudget: budgetHistogram(
      meter,
      'deadline.request.budget',
      'The budget a request, RPC call or message arrived with, after the clamps: what its handler runs with.',
    ),
    callBudget: budgetHistogram(
      meter,
      'deadline.call.remaining_budget',
      "Time left on the request's deadline as an outgoing call starts.",
    ),
    expirations: counter(
      meter,
      'deadline.expirations',
      '{expiration}',
      'Deadlines found exceeded: a context that ran out, a call refused for lack of time, a call cut off.',
    ),
    cancelRequests: counter(
      meter,
      'deadline.call.cancel_requests',
      '{request}',
      'Outgoing calls cut off at their deadline or cancelled, their stop sent to the server.',
    ),
    cancelConfirmations: counter(
      meter,
      'deadline.call.cancel_confirmations',
      '{confirmation}',
      'Outgoing calls cut off whose server confirmed that the work stopped.',
    ),
    refusals: counter(
      meter,
      'deadline.admission.refusals',
      '{refusal}',
      'Requests refused at arrival, before any of their work: too little time left for the route, or too much queued.',
    ),
  };
}
