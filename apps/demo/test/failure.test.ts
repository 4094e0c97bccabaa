/** A failure in one line: the error, its causes, an AggregateError's errors; the stacks apart. */
import { describe, expect, it } from 'vitest';
import { describeFailure, failureDetails } from '../src/failure.ts';

describe('describeFailure', () => {
  it('names the error, collapses its message to one line, adds a code the message lacks', () => {
    const error = Object.assign(new Error('connect failed\n  to 127.0.0.1:6379'), { code: 'ECONNREFUSED' });
    expect(describeFailure(error)).toBe('Error: connect failed to 127.0.0.1:6379 [ECONNREFUSED]');
    const already = Object.assign(new Error('connect ECONNREFUSED 127.0.0.1:6379'), { code: 'ECONNREFUSED' });
    expect(describeFailure(already)).toBe('Error: connect ECONNREFUSED 127.0.0.1:6379');
  });

  it('follows causes and an AggregateError, a few levels deep at most', () => {
    const root = new TypeError('fetch failed', { cause: new Error('socket hang up') });
    expect(describeFailure(root)).toBe('TypeError: fetch failed ← caused by Error: socket hang up');
    const both = new AggregateError([new Error('a'), new RangeError('b')], 'two failed');
    expect(describeFailure(both)).toBe('AggregateError: two failed (Error: a; RangeError: b)');
    let deep: Error = new Error('level 0');
    for (let i = 1; i < 10; i++) deep = new Error(`level ${i}`, { cause: deep });
    expect(describeFailure(deep).split('←')).toHaveLength(4);
  });

  it('never empty: no message, a thrown string, undefined', () => {
    expect(describeFailure(new Error(''))).toBe('Error: (no message)');
    expect(describeFailure('just a string\nthrown')).toBe('just a string thrown');
    expect(describeFailure(undefined)).toBe('undefined');
    expect(describeFailure('')).toBe('a value that is not an Error was thrown');
  });

  it('keeps every stack for the details file', () => {
    const details = failureDetails(new Error('outer', { cause: new Error('inner') }));
    expect(details).toMatch(/^Error: outer\n\s+at /);
    expect(details).toMatch(/caused by:\nError: inner\n\s+at /);
  });
});
