/**
 * Option checks shared by the core and every adapter: each failure names the option and the value received.
 * Run them where options enter (registration, construction), not per request.
 */
import type { CallGuard } from './call-guard.js';
import { InvalidArgumentError } from './errors.js';

/** Asserts `value` is a finite number ≥ `min` (and ≤ `max`), or `undefined` when optional. */
export function checkNumber(
  option: string,
  value: unknown,
  { min = 0, max = Number.MAX_SAFE_INTEGER, optional = true }: { min?: number; max?: number; optional?: boolean } = {},
): number | undefined {
  if (value === undefined && optional) return undefined;
  if (typeof value !== 'number' || !Number.isFinite(value) || value < min || value > max) {
    const range = max === Number.MAX_SAFE_INTEGER ? `≥ ${min}` : `between ${min} and ${max}`;
    throw new InvalidArgumentError(option, `a finite number ${range}`, value);
  }
  return value;
}

/** Asserts `value` is a non-empty string without control characters, or `undefined` when optional. */
export function checkName(option: string, value: unknown, optional = true): string | undefined {
  if (value === undefined && optional) return undefined;
  // biome-ignore lint/suspicious/noControlCharactersInRegex: rejecting control characters is the point
  if (typeof value !== 'string' || value.length === 0 || value.length > 256 || /[\x00-\x1f\x7f]/.test(value)) {
    throw new InvalidArgumentError(option, 'a non-empty string (≤ 256 characters, no control characters)', value);
  }
  return value;
}

/**
 * Asserts `value` is a hop (service) name: 1–128 visible ASCII characters. It travels in response headers
 * (`X-Deadline-Exceeded-By`), where Node refuses anything else.
 */
export function checkHop(value: unknown, option = 'hop'): string | undefined {
  if (value === undefined) return undefined;
  if (typeof value !== 'string' || !/^[\x21-\x7e]{1,128}$/.test(value)) {
    throw new InvalidArgumentError(option, '1 to 128 visible ASCII characters (it is sent in headers)', value);
  }
  return value;
}

/** Asserts `value` is `true` or `false`, or `undefined`. */
export function checkBoolean(option: string, value: unknown): boolean | undefined {
  if (value === undefined || typeof value === 'boolean') return value;
  throw new InvalidArgumentError(option, 'true or false', value);
}

/** Asserts `value` is a function, or `undefined` when optional. */
export function checkFunction<F extends (...args: never[]) => unknown>(
  option: string,
  value: unknown,
  optional = true,
): F | undefined {
  if (value === undefined && optional) return undefined;
  if (typeof value !== 'function') throw new InvalidArgumentError(option, 'a function', value);
  return value as F;
}

/**
 * Asserts `value` is a circuit breaker as an outgoing call uses it (an object with `admit()`), or `undefined`.
 */
export function checkGuard(option: string, value: unknown): CallGuard | undefined {
  if (value === undefined) return undefined;
  if (typeof value !== 'object' || value === null || typeof (value as CallGuard).admit !== 'function') {
    throw new InvalidArgumentError(option, 'a circuit breaker (an object with admit(), e.g. a CircuitBreaker)', value);
  }
  return value as CallGuard;
}

/** Asserts `value` is a plain object (not null, not an array), or `undefined` when optional. */
export function checkObject(option: string, value: unknown, optional = true): Record<string, unknown> | undefined {
  if (value === undefined && optional) return undefined;
  if (typeof value !== 'object' || value === null || Array.isArray(value)) {
    throw new InvalidArgumentError(option, 'an object', value);
  }
  return value as Record<string, unknown>;
}
