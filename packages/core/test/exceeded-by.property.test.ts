/**
 * `X-Deadline-Exceeded-By` comes from a downstream's answer: untrusted. Whatever it holds, the parser returns a
 * name that is safe to send on in our own header, or nothing — and never throws.
 */
import fc from 'fast-check';
import { describe, expect, it } from 'vitest';
import { parseExceededBy } from '../src/wire.ts';

const RUNS = 50_000;
const VISIBLE = /^[\x21-\x7e]{1,128}$/;

const value = fc.oneof(
  fc.string({ unit: 'binary', maxLength: 140 }),
  fc.stringMatching(/^[ \t]?[a-z0-9._-]{0,130}[ \t]?$/),
  fc.array(fc.stringMatching(/^[a-z]{1,8}$/), { maxLength: 3 }),
  fc.anything({ maxDepth: 1 }),
);

describe('parseExceededBy', () => {
  it('never throws; returns a sendable hop name or undefined', () => {
    let named = 0;
    fc.assert(
      fc.property(value, (v) => {
        const hop = parseExceededBy(v as never);
        if (hop !== undefined) {
          named++;
          expect(hop).toMatch(VISIBLE);
        }
      }),
      { numRuns: RUNS },
    );
    // The generator reaches the valid grammar often enough for the property to mean something.
    expect(named).toBeGreaterThan(RUNS / 10);
  });

  it('a valid name comes back as sent (surrounding blanks dropped)', () => {
    fc.assert(
      fc.property(fc.stringMatching(/^[\x21-\x7e]{1,128}$/), (hop) => {
        expect(parseExceededBy(` ${hop}\t`)).toBe(hop);
        expect(parseExceededBy([hop, hop])).toBe(hop);
      }),
      { numRuns: 10_000 },
    );
  });

  it('refuses what could not be sent on, and disagreeing repeats', () => {
    for (const bad of ['', ' ', 'a b', 'é', 'a\r\nx-evil: 1', 'x'.repeat(129), ['a', 'b'], [], 42, null]) {
      expect(parseExceededBy(bad as never)).toBeUndefined();
    }
  });
});
