/**
 * gRPC's `grpc-timeout`: "TimeoutValue TimeoutUnit", 1–8 ASCII digits and one of `H M S m u n`.
 * https://github.com/grpc/grpc/blob/master/doc/PROTOCOL-HTTP2.md
 *
 * Zero is a timeout that has already expired, as every gRPC implementation reads it (grpc-go, grpc core, grpc-js:
 * the call fails `DEADLINE_EXCEEDED` at once), never "no timeout": the header is simply left out for that.
 */
import { InvalidArgumentError } from '../errors.js';
import { digitsValue, type Refusal, singleValue } from './header-value.js';

const MAX_DIGITS = 8;
const MAX_VALUE = 99_999_999;

/** Nanoseconds per unit. Integer arithmetic in ns avoids the float error of multiplying by 0.001. */
const UNIT_NS: Readonly<Record<string, number>> = {
  H: 3_600_000_000_000,
  M: 60_000_000_000,
  S: 1_000_000_000,
  m: 1_000_000,
  u: 1_000,
  n: 1,
};
const NS_PER_MS = 1_000_000;

/** Units from finest to coarsest, for formatting: the finest unit whose value fits in 8 digits wins. */
const FORMAT_UNITS: readonly (readonly [string, number])[] = [
  ['u', 1_000],
  ['m', 1_000_000],
  ['S', 1_000_000_000],
  ['M', 60_000_000_000],
  ['H', 3_600_000_000_000],
];

/** @internal Parses a `grpc-timeout` value to milliseconds (fractional), or a refusal. */
export function parseGrpcTimeoutValue(raw: unknown): number | Refusal {
  const text = singleValue(raw);
  if (typeof text !== 'string') return text;
  const unit = UNIT_NS[text.charAt(text.length - 1)];
  const value = digitsValue(text.slice(0, -1), MAX_DIGITS);
  if (unit === undefined || value === -1) {
    return { refusal: 'not a gRPC timeout (1 to 8 digits and a unit: H, M, S, m, u or n)' };
  }
  // ≤ 99,999,999 H is 3.6e20 ns: above 2^53 the product loses digits, but only far beyond any clamp.
  return (value * unit) / NS_PER_MS;
}

/**
 * Parses a `grpc-timeout` header value to milliseconds (may be fractional). `0` for a zero timeout (of any unit):
 * already expired. `undefined` if invalid.
 *
 * @example
 * ```ts
 * parseGrpcTimeout('2S');      // 2000
 * parseGrpcTimeout('1500u');   // 1.5
 * parseGrpcTimeout('0m');      // 0: already expired
 * parseGrpcTimeout('123456789m'); // undefined: 9 digits
 * ```
 */
export function parseGrpcTimeout(value: unknown): number | undefined {
  const ms = parseGrpcTimeoutValue(value);
  return typeof ms === 'number' ? ms : undefined;
}

/**
 * Formats milliseconds as a `grpc-timeout` value in the finest unit that fits 8 digits (microseconds up to
 * ~100 s), rounded down so a hop never grants more than it has, and never `0` of any unit. Throws
 * `InvalidArgumentError` for a budget that is not positive and finite.
 *
 * @example
 * ```ts
 * formatGrpcTimeout(2500);      // '2500000u'
 * formatGrpcTimeout(3_600_000); // '3600000m'
 * ```
 */
export function formatGrpcTimeout(ms: number): string {
  if (typeof ms !== 'number' || !(ms > 0) || ms === Number.POSITIVE_INFINITY) {
    throw new InvalidArgumentError('ms', 'a positive, finite budget in milliseconds', ms);
  }
  const ns = ms * NS_PER_MS;
  for (const [unit, size] of FORMAT_UNITS) {
    const value = Math.floor(ns / size);
    if (value <= MAX_VALUE) return `${value > 0 ? value : 1}${unit}`;
  }
  return `${MAX_VALUE}H`;
}
