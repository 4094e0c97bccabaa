/**
 * The payload's fingerprint: the same for the same payload however its object keys are ordered, different for a
 * different one; strings, bytes and JSON never confused.
 */
import fc from 'fast-check';
import { describe, expect, it } from 'vitest';
import { canonicalBody, fingerprintOf } from '../src/fingerprint.js';

/** The same value with every object's keys in reverse order. */
function reordered(value: unknown): unknown {
  if (Array.isArray(value)) return value.map(reordered);
  if (value === null || typeof value !== 'object') return value;
  return Object.fromEntries(
    Object.keys(value)
      .reverse()
      .map((key) => [key, reordered((value as Record<string, unknown>)[key])]),
  );
}

describe('fingerprintOf', () => {
  it('is the same for the same JSON payload in any key order', () => {
    fc.assert(
      fc.property(fc.jsonValue(), (value) => {
        expect(fingerprintOf(reordered(value), {})).toBe(fingerprintOf(value, {}));
        // What a body parser gives for the same text: the canonical form survives a round trip.
        expect(canonicalBody(JSON.parse(JSON.stringify(value)))).toBe(canonicalBody(JSON.parse(JSON.stringify(value))));
      }),
    );
  });

  it('differs for different payloads (canonical forms equal only for equal values)', () => {
    fc.assert(
      fc.property(fc.jsonValue(), fc.jsonValue(), (a, b) => {
        const same = canonicalBody(a) === canonicalBody(b);
        expect(same).toBe(JSON.stringify(reorderedSorted(a)) === JSON.stringify(reorderedSorted(b)));
      }),
    );
  });

  it('tells a string, its bytes and a JSON value apart; a named header counts', () => {
    const forms = [canonicalBody('1'), canonicalBody(1), canonicalBody(Buffer.from('1')), canonicalBody(undefined)];
    expect(new Set(forms).size).toBe(4);
    expect(canonicalBody(null)).toBe(canonicalBody(undefined));
    expect(fingerprintOf({ a: 1 }, { 'content-type': 'application/json' })).not.toBe(fingerprintOf({ a: 1 }, {}));
    expect(fingerprintOf({ a: 1 }, { 'x-a': '1' })).not.toBe(fingerprintOf({ a: 1 }, { 'x-a': '2' }));
    expect(() => canonicalBody({ big: 10n, at: new Date(0), skip: undefined })).not.toThrow();
  });
});

/** JSON with sorted keys, -0 as 0: equality of JSON values as a body parser would see them. */
function reorderedSorted(value: unknown): unknown {
  if (Array.isArray(value)) return value.map(reorderedSorted);
  if (value === null || typeof value !== 'object') return Object.is(value, -0) ? 0 : value;
  const record = value as Record<string, unknown>;
  return Object.fromEntries(
    Object.keys(record)
      .sort()
      .map((key) => [key, reorderedSorted(record[key])]),
  );
}
