/**
 * Raw headers from undici 6 (name, value, name, value…, as Buffers or strings) read as the newer handler API hands
 * them (either-api-handler.ts): every name in lower case, each value kept in order, a repeated name as an array.
 */
import fc from 'fast-check';
import { expect, it } from 'vitest';
import { headersOf } from '../src/either-api-handler.ts';

const name = fc.oneof(
  fc.stringMatching(/^[A-Za-z][A-Za-z0-9-]{0,12}$/),
  fc.constantFrom('Set-Cookie', 'set-cookie', 'X-Deadline-Exceeded-By', '__proto__', 'constructor'),
);
const pairs = fc.array(fc.tuple(name, fc.stringMatching(/^[ -~]{0,20}$/)), { maxLength: 10 });

it('every value under its lower-case name, in order; one value bare, repeats as an array', () => {
  fc.assert(
    fc.property(pairs, fc.boolean(), (input, asBuffers) => {
      const raw = input.flat().map((text) => (asBuffers ? Buffer.from(text) : text));
      const expected = new Map<string, string[]>();
      for (const [n, v] of input) expected.set(n.toLowerCase(), [...(expected.get(n.toLowerCase()) ?? []), v]);
      const headers = headersOf(raw);
      expect(Object.keys(headers).sort()).toEqual([...expected.keys()].sort());
      for (const [n, values] of expected) expect(headers[n]).toEqual(values.length === 1 ? values[0] : values);
    }),
  );
});

it('nothing (undici 6 passes null trailers) reads as no headers', () => {
  expect(Object.keys(headersOf(null))).toEqual([]);
  expect(Object.keys(headersOf([]))).toEqual([]);
});
