/**
 * One error family: every error class any package exports extends `DeadlineError`, carries the brand (so
 * `instanceof` holds across copies of a package) and a code of the one `ErrorCode` table, sets `name` and
 * `statusCode` one way (a prototype `name`, a getter), and has a guard that sees through causes.
 * Found by importing every public entry point, not by a list kept by hand: a new class is checked as it lands.
 */
import { readdirSync, readFileSync } from 'node:fs';
import { join } from 'node:path';
import { fileURLToPath } from 'node:url';
import { DeadlineError, ErrorCode, isDeadlineError } from '@deadline/core';
import { describe, expect, it } from 'vitest';

const repo = fileURLToPath(new URL('..', import.meta.url));

/** Every public entry point of every package, by its published name (the adapter kits left out). */
function entryPoints(): string[] {
  return readdirSync(join(repo, 'packages')).flatMap((dir) => {
    const manifest = JSON.parse(readFileSync(join(repo, 'packages', dir, 'package.json'), 'utf8'));
    return Object.keys(manifest.exports ?? {})
      .filter((subpath) => subpath !== './internal' && subpath !== './package.json')
      .map((subpath) => (subpath === '.' ? manifest.name : `${manifest.name}/${subpath.slice(2)}`));
  });
}

/** A value of each class, made the way its package makes it. */
const SAMPLES: Record<string, () => Error> = {
  DeadlineExceededError: () => new classes.DeadlineExceededError({ phase: 'during-call', hop: 'orders' }),
  CancelledError: () => new classes.CancelledError('client went away', { reason: 'client-disconnected' }),
  InvalidArgumentError: () => new classes.InvalidArgumentError('marginMs', 'a number', -1),
  CircuitOpenError: () => new classes.CircuitOpenError('inventory', 'open', 1_500),
  IdempotencyKeyLostError: () => new classes.IdempotencyKeyLostError('charge', 'scope'),
};
// biome-ignore lint/suspicious/noExplicitAny: the classes are found at run time
const classes: Record<string, any> = {};
/** Each class's guard, `is<Class>`, wherever it is exported. */
const guards: Record<string, (error: unknown) => boolean> = {};

const STATUS: Record<string, number> = {
  DeadlineExceededError: 504,
  CancelledError: 499,
  InvalidArgumentError: 500,
  CircuitOpenError: 503,
  IdempotencyKeyLostError: 409,
};

describe('every exported error class is one of the family', async () => {
  for (const name of entryPoints()) {
    const module = (await import(name)) as Record<string, unknown>;
    for (const [exported, value] of Object.entries(module)) {
      if (typeof value !== 'function') continue;
      if (value.prototype instanceof Error || value === DeadlineError) classes[exported] ??= value;
      if (/^is[A-Z]\w*Error$/.test(exported)) guards[exported.slice(2)] ??= value as (error: unknown) => boolean;
    }
  }
  const found = Object.keys(classes).filter((name) => name !== 'DeadlineError');

  it('finds the five classes the packages export, and a sample of each', () => {
    expect(found.sort()).toEqual(Object.keys(SAMPLES).sort());
  });

  it.each(Object.keys(SAMPLES))(
    '%s: extends DeadlineError, branded, a code of ErrorCode, name and status one way',
    (name) => {
      const error = SAMPLES[name]?.();
      expect(error).toBeInstanceOf(DeadlineError);
      expect(isDeadlineError(error)).toBe(true);
      const code = (error as DeadlineError).code;
      expect(Object.values(ErrorCode)).toContain(code);
      // The brand decides instanceof: a copy's error (another prototype, the same brand) is recognised.
      const copy = Object.create(Object.prototype, Object.getOwnPropertyDescriptors(error));
      expect(copy).toBeInstanceOf(classes[name]);
      expect(copy).toBeInstanceOf(DeadlineError);
      // One way each: `name` on the prototype, `statusCode` and `headers` getters, `code` an own enumerable field.
      expect(error?.name).toBe(name);
      expect(Object.hasOwn(error as object, 'name')).toBe(false);
      expect(Object.getOwnPropertyDescriptor(classes[name].prototype, 'statusCode')?.get).toBeTypeOf('function');
      expect((error as DeadlineError).statusCode).toBe(STATUS[name]);
      expect(Object.getOwnPropertyDescriptor(error, 'code')?.enumerable).toBe(true);
      expect(Object.hasOwn(error as object, 'statusCode')).toBe(false);
    },
  );

  it.each(Object.keys(SAMPLES).filter((name) => name !== 'InvalidArgumentError'))(
    '%s: its guard sees through causes and wrappers (global fetch wraps it in a TypeError)',
    (name) => {
      const guard = guards[name];
      expect(guard, `is${name} exported`).toBeTypeOf('function');
      const error = SAMPLES[name]?.();
      expect(guard?.(error)).toBe(true);
      expect(guard?.(new TypeError('fetch failed', { cause: error }))).toBe(true);
      expect(guard?.(new Error('outer', { cause: new Error('middle', { cause: error }) }))).toBe(true);
      expect(guard?.(new Error('unrelated'))).toBe(false);
      expect(guard?.(undefined)).toBe(false);
    },
  );

  it('every code of ErrorCode belongs to a class or to a problem an idempotent endpoint answers with', () => {
    const classCodes = Object.values(SAMPLES).map((make) => (make() as DeadlineError).code);
    const answered = [ErrorCode.IdempotencyConflict, ErrorCode.IdempotencyMismatch];
    expect([...classCodes, ...answered].sort()).toEqual(Object.values(ErrorCode).sort());
  });
});
