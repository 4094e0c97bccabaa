/**
 * Whole-millisecond budgets: `X-Request-Deadline`, `Connect-Timeout-Ms`, Envoy's timeout headers. They differ in one
 * value only: `0`. Connect reads a `Connect-Timeout-Ms` of 0 as a timeout that has already expired (connect-go and
 * Connect-ES fail the call `deadline_exceeded` at once), so it is read as 0 ms; ours and Envoy's refuse it, since
 * several systems read 0 as "no timeout".
 */
import { InvalidArgumentError } from '../errors.js';
import { digitsValue, isDigits, type Refusal, singleValue } from './header-value.js';

/** Connect's limit, and ours: 10 digits is 115 days, far beyond any sane request budget. */
export const MAX_MS_DIGITS = 10;
const MAX_MS_VALUE = 9_999_999_999;

/**
 * Parses a whole, positive number of milliseconds of at most 10 digits. `0` is refused: several systems read
 * it as "no timeout", so it is never taken to mean "expired" either.
 * @internal
 */
export function parseMilliseconds(raw: unknown): number | Refusal {
  const ms = parseTimeoutMilliseconds(raw);
  return ms === 0 ? { refusal: 'zero is not a budget (several systems read 0 as "no timeout")' } : ms;
}

/**
 * Parses a whole number of milliseconds of at most 10 digits, `0` included: `Connect-Timeout-Ms`, whose 0 is a
 * timeout that has already expired.
 * @internal
 */
export function parseTimeoutMilliseconds(raw: unknown): number | Refusal {
  // What arrives nearly always: one value, bare digits. Read at once; anything else (whitespace to trim, a list)
  // takes the full checks below.
  if (typeof raw === 'string') {
    const ms = digitsValue(raw, MAX_MS_DIGITS);
    if (ms >= 0) return ms;
  }
  const text = singleValue(raw);
  if (typeof text !== 'string') return text;
  const ms = digitsValue(text, MAX_MS_DIGITS);
  if (ms === -1) {
    return { refusal: isDigits(text, 64) ? 'more than 10 digits' : 'not a whole number of milliseconds' };
  }
  return ms;
}

/**
 * Parses an `X-Request-Deadline` value: a positive whole number of milliseconds, at most 10 digits, optionally
 * surrounded by spaces. Returns `undefined` for anything else, `0` included (a `Connect-Timeout-Ms` of 0, which
 * means "already expired", is read by the budget parser).
 *
 * @example
 * ```ts
 * parseRequestDeadline('2500'); // 2500
 * parseRequestDeadline('12ms'); // undefined
 * ```
 */
export function parseRequestDeadline(value: unknown): number | undefined {
  const ms = parseMilliseconds(value);
  return typeof ms === 'number' ? ms : undefined;
}

/**
 * Formats a budget as whole milliseconds for the wire: rounded down (a hop never grants more than it has),
 * but at least 1 — `0` means "no timeout" to several systems. Throws `InvalidArgumentError` for a budget that
 * is not positive and finite: with nothing left, the call must not be made at all.
 *
 * @example
 * ```ts
 * formatRequestDeadline(2499.7); // '2499'
 * formatRequestDeadline(0.4);    // '1'
 * ```
 */
export function formatRequestDeadline(ms: number): string {
  if (typeof ms !== 'number' || !(ms > 0) || ms === Number.POSITIVE_INFINITY) {
    throw new InvalidArgumentError('ms', 'a positive, finite budget in milliseconds', ms);
  }
  return String(ms < 1 ? 1 : ms > MAX_MS_VALUE ? MAX_MS_VALUE : Math.floor(ms));
}
