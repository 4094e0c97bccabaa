/**
 * The time a message waited in a broker before it reached its consumer. The relative budget a message carries
 * (`X-Request-Deadline`) was true when it was published; a queue may hold it for seconds after. A publisher therefore
 * also writes `X-Request-Deadline-At`: the same deadline on its wall clock (epoch ms). The consumer reads it only to
 * learn how long the message surely waited — the difference between the two forms, less `skewMs` for the clocks'
 * disagreement — and takes that off the relative budget. The allowance goes the caller's way: with clocks that
 * disagree by less than `skewMs` no message is ever shortened more than it really waited, and one whose consumer's
 * clock runs behind is only given the benefit of the doubt. Alone (no relative form), the absolute one is ignored:
 * a budget is never made from a wall clock.
 */
import { isDigits, singleValue } from './header-value.js';

const MAX_EPOCH_DIGITS = 16;

/**
 * Formats the wall-clock form of a budget of `ms` from now for a message: epoch ms, whole (rounded down).
 *
 * @example
 * ```ts
 * import { formatDeadlineAt, REQUEST_DEADLINE_AT_HEADER } from '@deadline/core/wire';
 * headers[REQUEST_DEADLINE_AT_HEADER] = formatDeadlineAt(2_500); // '1796651234567'
 * ```
 */
export function formatDeadlineAt(ms: number, now: () => number = Date.now): string {
  return String(Math.floor(now() + ms));
}

/**
 * How long a message carrying a relative budget of `budgetMs` and the header value `deadlineAt`
 * (`X-Request-Deadline-At`) surely waited before now, in ms: `budgetMs − (deadlineAt − now) − skewMs`, never below 0.
 * 0 when `deadlineAt` is missing or not an epoch time in whole ms (a hostile value costs the message nothing).
 *
 * @example
 * ```ts
 * import { waitedMs } from '@deadline/core/wire';
 * // published with 1,000 ms left, its wall-clock deadline 700 ms from now: it waited 300 ms (250 for sure).
 * waitedMs(1_000, String(Date.now() + 700), 50); // 250
 * ```
 */
export function waitedMs(budgetMs: number, deadlineAt: unknown, skewMs: number, now: () => number = Date.now): number {
  const text = singleValue(deadlineAt);
  if (typeof text !== 'string' || !isDigits(text, MAX_EPOCH_DIGITS)) return 0;
  const waited = budgetMs - (Number(text) - now()) - skewMs;
  return waited > 0 ? Math.min(waited, budgetMs) : 0;
}
