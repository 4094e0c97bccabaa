/**
 * The keys of outgoing calls: the same work in the same order gets the same keys, whatever the process or the
 * attempt; another secret, position or branch gets others.
 */

import { createContext, InvalidArgumentError, runWithContext, withoutCancel } from '@deadline/core';
import { describe, expect, it } from 'vitest';
import { IDEMPOTENCY_KEYS, IdempotencyKeys } from '../src/keys.ts';

const take = (keys: IdempotencyKeys, n: number) => Array.from({ length: n }, () => keys.next());

describe('IdempotencyKeys', () => {
  it('derives the same keys from the same secret, in order; another secret derives others', () => {
    const a = take(IdempotencyKeys.fromSecret('s1'), 5);
    expect(take(IdempotencyKeys.fromSecret('s1'), 5)).toEqual(a);
    expect(new Set(a).size).toBe(5);
    for (const key of a) expect(key).toMatch(/^[A-Za-z0-9_-]{43}$/);
    expect(take(IdempotencyKeys.fromSecret('s2'), 5).some((key) => a.includes(key))).toBe(false);
  });

  it('a branch takes one position; restarting it gives the same keys again', () => {
    const keys = IdempotencyKeys.fromSecret('s');
    const before = keys.next();
    const branch = keys.branch();
    const after = keys.next();
    const attempt1 = take(branch.restart(), 3);
    const attempt2 = take(branch.restart(), 3);
    expect(attempt2).toEqual(attempt1);
    const all = [before, after, ...attempt1];
    expect(new Set(all).size).toBe(5);
    // The same shape of work again: the same keys.
    const again = IdempotencyKeys.fromSecret('s');
    expect([again.next(), ...take(again.branch(), 3), again.next()]).toEqual([before, ...attempt1, after]);
  });

  it('fromKey gives the key itself first, then keys derived from it, on every restart', () => {
    const keys = IdempotencyKeys.fromKey('order-42');
    const [first, second] = take(keys.restart(), 2);
    expect(first).toBe('order-42');
    expect(second).not.toBe('order-42');
    expect(take(keys.restart(), 2)).toEqual([first, second]);
  });

  it('refuses an empty secret and a key that could not be a header', () => {
    expect(() => IdempotencyKeys.fromSecret('')).toThrow(InvalidArgumentError);
    expect(() => IdempotencyKeys.fromKey('')).toThrow(InvalidArgumentError);
    expect(() => IdempotencyKeys.fromKey('a\nb')).toThrow(InvalidArgumentError);
    expect(() => IdempotencyKeys.fromKey('k'.repeat(256))).toThrow(InvalidArgumentError);
    expect(() => createContext({ values: ['key' as never] })).toThrow(InvalidArgumentError);
  });

  it('contexts inherit the keys; detached work gets a branch of its own; without keys there are none', () => {
    const keys = IdempotencyKeys.fromSecret('ctx');
    expect(IDEMPOTENCY_KEYS.get()).toBeUndefined();
    runWithContext({ values: [IDEMPOTENCY_KEYS.with(keys)] }, () => {
      expect(IDEMPOTENCY_KEYS.get()).toBe(keys);
      runWithContext({ deadline: 100 }, () => expect(IDEMPOTENCY_KEYS.get()).toBe(keys));
      const detached = withoutCancel(() => IDEMPOTENCY_KEYS.get());
      expect(detached).toBeInstanceOf(IdempotencyKeys);
      expect(detached).not.toBe(keys);
    });
    withoutCancel(() => expect(IDEMPOTENCY_KEYS.get()).toBeUndefined());
  });
});
