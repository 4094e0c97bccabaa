import fc from 'fast-check';
import { describe, expect, it } from 'vitest';
import { createContext, Deadline, traceFrom } from '../src/index.ts';
import { NEW_TRACE, Scope } from '../src/internal.ts';
import { formatTraceparent, newSpanId, newTraceId, parseTraceparent } from '../src/wire.ts';

const VALID = '00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01';

describe('traceparent', () => {
  it('parses a valid header', () => {
    expect(parseTraceparent(VALID)).toEqual({
      traceId: '4bf92f3577b34da6a3ce929d0e0e4736',
      parentId: '00f067aa0ba902b7',
      flags: 1,
    });
    // A future version may append fields.
    expect(
      parseTraceparent('cc-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01-what-the-future-holds'),
    ).toMatchObject({ flags: 1 });
  });

  it.each([
    '',
    'garbage',
    VALID.toUpperCase(),
    `${VALID}-extra`, // version 00 has exactly four fields
    'ff-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01',
    '00-00000000000000000000000000000000-00f067aa0ba902b7-01',
    '00-4bf92f3577b34da6a3ce929d0e0e4736-0000000000000000-01',
    '00-4bf92f3577b34da6a3ce929d0e0e473-00f067aa0ba902b7-01',
    '00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-1',
    'x'.repeat(600),
  ])('refuses %j', (value) => {
    expect(parseTraceparent(value)).toBeUndefined();
  });

  it('never throws on random input (property)', () => {
    fc.assert(
      fc.property(fc.oneof(fc.string({ unit: 'binary' }), fc.stringMatching(/^[0-9a-f-]{50,60}$/)), (value) => {
        const parsed = parseTraceparent(value);
        return parsed === undefined || (parsed.traceId.length === 32 && parsed.parentId.length === 16);
      }),
      { numRuns: 20_000 },
    );
  });

  it('continues an incoming trace with a new span for this hop', () => {
    const trace = traceFrom(VALID, 'vendor=abc');
    expect(trace.traceId).toBe('4bf92f3577b34da6a3ce929d0e0e4736');
    expect(trace.parentId).toBe('00f067aa0ba902b7');
    expect(trace.spanId).toMatch(/^[0-9a-f]{16}$/);
    expect(trace.spanId).not.toBe(trace.parentId);
    expect(trace.tracestate).toBe('vendor=abc');
    expect(formatTraceparent(trace)).toBe(`00-${trace.traceId}-${trace.spanId}-01`);
  });

  it('starts a new, sampled trace when there is none or it is invalid', () => {
    for (const incoming of [undefined, 'nonsense', 42]) {
      const trace = traceFrom(incoming, 'vendor=abc');
      expect(trace.traceId).toMatch(/^[0-9a-f]{32}$/);
      expect(trace.parentId).toBeUndefined();
      expect(trace.flags).toBe(1);
      expect(trace.tracestate).toBeUndefined();
    }
  });

  it('drops a malformed or oversized tracestate, joins repeated ones', () => {
    expect(traceFrom(VALID, 'a=1\nb=2').tracestate).toBeUndefined();
    expect(traceFrom(VALID, 'a'.repeat(600)).tracestate).toBeUndefined();
    expect(traceFrom(VALID, ['a=1', 'b=2']).tracestate).toBe('a=1,b=2');
  });

  it('generates distinct ids', () => {
    const ids = new Set(Array.from({ length: 5_000 }, () => newTraceId()));
    expect(ids.size).toBe(5_000);
    expect(newSpanId()).toMatch(/^[0-9a-f]{16}$/);
  });
});

describe('a root that starts a new trace', () => {
  it('makes it when first read, once: the same ids on every read and in the contexts made inside', () => {
    const root = Scope.root(Deadline.fromNow(1_000), NEW_TRACE, 'hop');
    expect(root._trace).toBe(NEW_TRACE);
    const trace = root.trace;
    expect(trace?.traceId).toMatch(/^[0-9a-f]{32}$/);
    expect(trace?.parentId).toBeUndefined();
    expect(root.trace).toBe(trace);
    const child = root.run(() => createContext({ deadline: 500 }));
    expect(child.trace).toBe(trace);
    child.end();
    root.end();
  });

  it('two roots get two traces', () => {
    const a = Scope.root(Deadline.fromNow(1_000), NEW_TRACE, 'hop');
    const b = Scope.root(Deadline.fromNow(1_000), NEW_TRACE, 'hop');
    expect(a.trace?.traceId).not.toBe(b.trace?.traceId);
    a.end();
    b.end();
  });
});
