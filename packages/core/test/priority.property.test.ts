/**
 * RFC 9218's urgency, as admission reads a trusted caller's `Priority` header: any input gives an urgency 0–7 and
 * never throws; a dictionary with a valid `u` gives it (the last one when repeated); anything else gives 3.
 */
import fc from 'fast-check';
import { describe, expect, it } from 'vitest';
import { DEFAULT_URGENCY, parseUrgency } from '../src/wire.ts';

const member = fc.oneof(
  fc.integer({ min: 0, max: 7 }).map((u) => ({ text: `u=${u}`, u })),
  fc.constant({ text: 'i', u: undefined }),
  fc.constant({ text: 'i=?0', u: undefined }),
  fc.string({ maxLength: 8 }).map((key) => ({ text: `x${key.replace(/[,=;]/g, '')}=1`, u: undefined })),
);

describe('parseUrgency', () => {
  it('gives the last valid u of any dictionary, else 3', () => {
    fc.assert(
      fc.property(fc.array(member, { maxLength: 6 }), fc.constantFrom(',', ', ', ' ,  '), (members, separator) => {
        const text = members.map((m) => m.text).join(separator);
        const last = members.filter((m) => m.u !== undefined).at(-1)?.u;
        return parseUrgency(text) === (last ?? DEFAULT_URGENCY);
      }),
      { numRuns: 5_000 },
    );
  });

  it('never throws and always gives 0–7, whatever it is given', () => {
    fc.assert(
      fc.property(
        fc.oneof(fc.string({ maxLength: 2_000 }), fc.array(fc.string({ maxLength: 50 }), { maxLength: 5 })),
        (value) => {
          const urgency = parseUrgency(value);
          return Number.isInteger(urgency) && urgency >= 0 && urgency <= 7;
        },
      ),
      { numRuns: 5_000 },
    );
  });

  it('reads the forms the RFC shows, ignores what is not an integer 0–7', () => {
    expect(parseUrgency('u=5, i')).toBe(5);
    expect(parseUrgency(['u=1', 'i'])).toBe(1);
    expect(parseUrgency('u=2;x=1')).toBe(2);
    expect(parseUrgency(undefined)).toBe(3);
    for (const bad of ['u=8', 'u=-1', 'u=1.5', 'u', 'u=?1', 'u="1"', 'u=01', '']) expect(parseUrgency(bad)).toBe(3);
    expect(parseUrgency(`u=1,${'x'.repeat(2_000)}`)).toBe(3);
  });
});
