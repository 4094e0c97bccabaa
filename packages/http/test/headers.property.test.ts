/**
 * Whatever shape the caller's headers come in, the request leaves with exactly one of each header we set, with
 * our value, and every other header the caller set, unchanged and in order.
 */
import fc from 'fast-check';
import { describe, expect, it } from 'vitest';
import { replaceHeaders } from '../src/headers.ts';

const OURS = { 'x-request-deadline': '1234', traceparent: '00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01' };
const name = fc.oneof(
  fc.stringMatching(/^[A-Za-z][A-Za-z0-9-]{0,15}$/),
  fc.constantFrom('X-Request-Deadline', 'x-request-deadline', 'TRACEPARENT', 'grpc-timeout'),
);
const pairs = fc.array(fc.tuple(name, fc.stringMatching(/^[ -~]{0,20}$/)), { maxLength: 8 });

/** Flattens any shape back into [name, value] pairs, as undici would send them. */
function sent(headers: ReturnType<typeof replaceHeaders>): [string, string][] {
  if (Array.isArray(headers)) {
    const out: [string, string][] = [];
    for (let i = 0; i < headers.length; i += 2) out.push([headers[i] as string, headers[i + 1] as string]);
    return out;
  }
  return Object.entries(headers).map(([n, v]) => [n, String(v)]);
}

function check(input: [string, string][], output: [string, string][], unique: boolean) {
  for (const [ourName, ourValue] of Object.entries(OURS)) {
    const matching = output.filter(([n]) => n.toLowerCase() === ourName);
    expect(matching).toEqual([[ourName, ourValue]]);
  }
  const kept = output.filter(([n]) => !(n.toLowerCase() in OURS));
  let expected = input.filter(([n]) => !(n.toLowerCase() in OURS));
  if (unique) expected = Object.entries(Object.fromEntries(expected)) as [string, string][];
  expect(kept).toEqual(expected);
}

describe('replaceHeaders', () => {
  it('flat arrays', () => {
    fc.assert(
      fc.property(pairs, (input) => check(input, sent(replaceHeaders(input.flat(), OURS)), false)),
      { numRuns: 20_000 },
    );
  });
  it('arrays of pairs and iterables (Map)', () => {
    fc.assert(
      fc.property(pairs, (input) => {
        check(input, sent(replaceHeaders(input, OURS)), false);
        const map = new Map(input);
        check([...map], sent(replaceHeaders(map, OURS)), true);
      }),
      { numRuns: 20_000 },
    );
  });
  it('plain objects', () => {
    fc.assert(
      fc.property(pairs, (input) => {
        const object = Object.fromEntries(input);
        check(Object.entries(object), sent(replaceHeaders(object, OURS)), true);
      }),
      { numRuns: 20_000 },
    );
  });
  it('nothing to add: the caller headers are passed as they are', () => {
    const headers = { a: '1' };
    expect(replaceHeaders(headers, {})).toBe(headers);
    expect(replaceHeaders(undefined, {})).toEqual({});
  });
});
