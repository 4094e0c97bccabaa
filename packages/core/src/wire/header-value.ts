/**
 * The first checks every budget header goes through, whatever its dialect: one value, trimmed of the
 * optional whitespace HTTP allows around it, of sane length. Returns the value or the reason it was refused.
 */

import { describeValue } from '../describe-value.js';

/** Longer than any valid budget header in any dialect: refuse before looking further. */
export const MAX_HEADER_VALUE_LENGTH = 32;

/** Why a header value was refused: a sentence fragment for logs. Parsers return a number or one of these. */
export interface Refusal {
  refusal: string;
}

const SPACE = 0x20;
const TAB = 0x09;

/** `value` as one trimmed string, or a {@link Refusal}. Accepts what a Node header record or `Headers.get()` holds. */
export function singleValue(value: unknown): string | Refusal {
  if (Array.isArray(value)) {
    if (value.length === 1) return singleValue(value[0]);
    return { refusal: value.length === 0 ? 'empty' : 'more than one value' };
  }
  if (typeof value === 'number') return singleValue(String(value));
  if (typeof value !== 'string') return { refusal: 'not a string' };
  let start = 0;
  let end = value.length;
  // Only SP and HTAB: RFC 9110's optional whitespace. Anything else (NBSP, newlines) is a reason to refuse.
  while (start < end && (value.charCodeAt(start) === SPACE || value.charCodeAt(start) === TAB)) start++;
  while (end > start && (value.charCodeAt(end - 1) === SPACE || value.charCodeAt(end - 1) === TAB)) end--;
  if (start === end) return { refusal: 'empty' };
  if (end - start > MAX_HEADER_VALUE_LENGTH) return { refusal: 'too long' };
  const trimmed = start === 0 && end === value.length ? value : value.slice(start, end);
  if (trimmed.includes(',')) return { refusal: 'more than one value' };
  return trimmed;
}

/**
 * A header value as text for logs, cut to 64 characters. Never throws, whatever the host put there (a
 * null-prototype object has no `toString`).
 */
export function printable(value: unknown): string {
  let text: string;
  if (typeof value === 'string') text = value;
  else if (Array.isArray(value))
    text = value.map((item) => (typeof item === 'string' ? item : describeValue(item))).join(', ');
  else text = describeValue(value);
  return text.length > 64 ? `${text.slice(0, 64)}…` : text;
}

/** Whether `text` is 1 to `maxDigits` ASCII digits and nothing else. */
export function isDigits(text: string, maxDigits: number): boolean {
  if (text.length === 0 || text.length > maxDigits) return false;
  for (let i = 0; i < text.length; i++) {
    const c = text.charCodeAt(i);
    if (c < 0x30 || c > 0x39) return false;
  }
  return true;
}

/**
 * The value of `text` when it is 1 to `maxDigits` (at most 15) ASCII digits, else -1. Read while checking:
 * `Number()` on a string fresh off the wire is a runtime call, a visible part of parsing a budget per request.
 */
export function digitsValue(text: string, maxDigits: number): number {
  if (text.length === 0 || text.length > maxDigits) return -1;
  let value = 0;
  for (let i = 0; i < text.length; i++) {
    const c = text.charCodeAt(i);
    if (c < 0x30 || c > 0x39) return -1;
    // Exact: 15 digits stay below 2^53.
    value = value * 10 + (c - 0x30);
  }
  return value;
}
