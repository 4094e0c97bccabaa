/**
 * Values under keys of other packages: inherited by child contexts, set over the parent's, passed into detached
 * work as each key says, shared by name across copies of a package; bad input is refused.
 */
import { describe, expect, it } from 'vitest';
import {
  createContext,
  createContextKey,
  InvalidArgumentError,
  runWithContext,
  runWithDeadline,
  withoutCancel,
} from '../src/index.ts';

describe('createContextKey', () => {
  it('a child inherits the value; a value set in a child covers the parent only there', () => {
    const TENANT = createContextKey<string>('test/tenant');
    expect(TENANT.get()).toBeUndefined();
    runWithContext({ values: [TENANT.with('t-1')] }, (outer) => {
      expect(TENANT.get()).toBe('t-1');
      runWithDeadline(100, () => expect(TENANT.get()).toBe('t-1'));
      runWithContext({ values: [TENANT.with('t-2')] }, () => expect(TENANT.get()).toBe('t-2'));
      expect(TENANT.get()).toBe('t-1');
      expect(TENANT.get(outer)).toBe('t-1');
      expect(TENANT.get(createContext({ root: true }))).toBeUndefined();
    });
    expect(TENANT.get()).toBeUndefined();
  });

  it("detached work gets each value through its key's hook: kept by default, changed, or dropped", () => {
    const KEPT = createContextKey<string>('test/kept');
    const BRANCHED = createContextKey<{ n: number }>('test/branched', { detached: (v) => ({ n: v.n + 1 }) });
    const DROPPED = createContextKey<string>('test/dropped', { detached: () => undefined });
    runWithContext({ values: [KEPT.with('k'), BRANCHED.with({ n: 1 }), DROPPED.with('d')] }, () => {
      withoutCancel(() => {
        expect(KEPT.get()).toBe('k');
        expect(BRANCHED.get()).toEqual({ n: 2 });
        expect(DROPPED.get()).toBeUndefined();
      });
    });
  });

  it('two keys of one name (two copies of a package) share the value', () => {
    const mine = createContextKey<string>('test/shared');
    const theirs = createContextKey<string>('test/shared');
    runWithContext({ values: [mine.with('v')] }, () => expect(theirs.get()).toBe('v'));
  });

  it('refuses a name that is not 1–128 visible characters, a hook that is not a function, and odd values', () => {
    for (const name of ['', 'a b', 'x'.repeat(129), 42]) {
      expect(() => createContextKey(name as string)).toThrow(InvalidArgumentError);
    }
    expect(() => createContextKey('test/odd', { detached: 'no' as never })).toThrow(InvalidArgumentError);
    expect(() => createContext({ values: 'v' as never })).toThrow(InvalidArgumentError);
    expect(() => createContext({ values: [{ id: 'x' }] as never })).toThrow(InvalidArgumentError);
  });
});
