/**
 * The blocking-command table: every timeout argument clamped into the budget in its own unit, and what a
 * released pop took put back where it came from. Pure functions: a property test and examples.
 */
import fc from 'fast-check';
import { describe, expect, it } from 'vitest';
import { clampTimeout, nullAtTimeout, ownTimeoutMs, pushBackCommands, withTimeoutMs } from '../src/blocking.ts';

const timeoutOf = (command: string, args: (string | number)[]) => {
  switch (command) {
    case 'blmpop':
    case 'bzmpop':
      return Math.round(Number(args[0]) * 1000);
    case 'xread':
      return Number(args[args.findIndex((a) => String(a).toUpperCase() === 'BLOCK') + 1]);
    case 'wait':
      return Number(args[1]);
    default:
      return Math.round(Number(args[args.length - 1]) * 1000);
  }
};

describe('clampTimeout', () => {
  it('never above the budget, never 0 ("forever"), in each command\'s unit', () => {
    const seconds = fc.oneof(
      fc.constant(0),
      fc.double({ min: 0, max: 1e6, noNaN: true }),
      fc.integer({ min: 0, max: 1e6 }),
    );
    fc.assert(
      fc.property(seconds, fc.double({ min: 1, max: 1e7, noNaN: true }), (given, budget) => {
        const cases: [string, (string | number)[]][] = [
          ['blpop', ['a', 'b', given]],
          ['bzpopmax', ['z', given]],
          ['blmove', ['a', 'b', 'LEFT', 'RIGHT', given]],
          ['blmpop', [given, 1, 'a', 'LEFT']],
          ['bzmpop', [given, 1, 'z', 'MIN']],
          ['xread', ['COUNT', 1, 'BLOCK', Math.floor(given * 1000), 'STREAMS', 's', '$']],
          ['wait', [1, Math.floor(given * 1000)]],
        ];
        for (const [command, args] of cases) {
          const ms = timeoutOf(command, clampTimeout(command, args, budget) as (string | number)[]);
          expect(ms).toBeGreaterThan(0);
          expect(ms).toBeLessThanOrEqual(Math.max(1, Math.floor(budget)));
        }
      }),
      { numRuns: 5_000 },
    );
  });

  it('leaves other commands and XREAD without BLOCK alone', () => {
    expect(clampTimeout('get', ['k'], 100)).toEqual(['k']);
    expect(clampTimeout('xread', ['STREAMS', 's', '$'], 100)).toEqual(['STREAMS', 's', '$']);
    // A key or id spelled "block" is not the option.
    expect(clampTimeout('xread', ['STREAMS', 'block', '0'], 100)).toEqual(['STREAMS', 'block', '0']);
    expect(clampTimeout('xreadgroup', ['GROUP', 'g', 'block', 'BLOCK', 0, 'STREAMS', 's', '>'], 100)).toEqual([
      'GROUP',
      'g',
      'block',
      'BLOCK',
      '100',
      'STREAMS',
      's',
      '>',
    ]);
    expect(clampTimeout('blpop', ['k', 0], 250)).toEqual(['k', '0.250']);
    expect(clampTimeout('blpop', ['k', 0.1], 250)).toEqual(['k', '0.100']);
  });
});

describe('pushBackCommands', () => {
  it('puts a popped element back where it came from', () => {
    expect(pushBackCommands('blpop', ['k', 0], ['k', 'v'])).toEqual([['lpush', 'k', 'v']]);
    expect(pushBackCommands('brpop', ['k', 0], ['k', 'v'])).toEqual([['rpush', 'k', 'v']]);
    expect(pushBackCommands('bzpopmin', ['z', 0], ['z', 'm', '1.5'])).toEqual([['zadd', 'z', '1.5', 'm']]);
    expect(pushBackCommands('blmpop', [0, 1, 'k', 'LEFT', 'COUNT', 2], ['k', ['a', 'b']])).toEqual([
      ['lpush', 'k', 'b', 'a'],
    ]);
    // From [a, b, c]: RIGHT COUNT 2 pops c, then b.
    expect(pushBackCommands('blmpop', [0, 1, 'k', 'RIGHT', 'COUNT', 2], ['k', ['c', 'b']])).toEqual([
      ['rpush', 'k', 'b', 'c'],
    ]);
    expect(pushBackCommands('bzmpop', [0, 1, 'z', 'MIN'], ['z', [['m', '2']]])).toEqual([['zadd', 'z', '2', 'm']]);
  });

  it('nothing for a timeout (nil), for moves and for stream reads', () => {
    expect(pushBackCommands('blpop', ['k', 0], null)).toEqual([]);
    expect(pushBackCommands('blmove', ['a', 'b', 'LEFT', 'RIGHT', 0], 'v')).toEqual([]);
    expect(pushBackCommands('xread', ['BLOCK', 0, 'STREAMS', 's', '$'], [['s', []]])).toEqual([]);
  });
});

describe('own timeouts', () => {
  it('read in ms from each command\'s unit; 0 is "forever"; undefined for a call that does not block', () => {
    expect(ownTimeoutMs('blpop', ['k', 0.25])).toBe(250);
    expect(ownTimeoutMs('blpop', ['k', '0'])).toBe(0);
    expect(ownTimeoutMs('xread', ['BLOCK', 40, 'STREAMS', 's', '$'])).toBe(40);
    expect(ownTimeoutMs('xread', ['STREAMS', 's', '$'])).toBeUndefined();
    expect(ownTimeoutMs('get', ['k'])).toBeUndefined();
  });

  it('written back rounded up, so the server never answers before the time given', () => {
    expect(withTimeoutMs('blpop', ['k', 1], 6.2)).toEqual(['k', '0.007']);
    expect(withTimeoutMs('xread', ['BLOCK', 0, 'STREAMS', 's', '$'], 0.3)).toEqual(['BLOCK', '1', 'STREAMS', 's', '$']);
  });

  it('every blocking command times out to null, but WAIT (a count only the server knows)', () => {
    expect(nullAtTimeout('blpop')).toBe(true);
    expect(nullAtTimeout('xreadgroup')).toBe(true);
    expect(nullAtTimeout('wait')).toBe(false);
  });
});
