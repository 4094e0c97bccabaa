/**
 * `@deadline/core` by audience: the application API stays small (at most 30 runtime exports), and each name is
 * exported by one entry point only — the application's, the wire codec's or the adapter kit's.
 */
import * as core from '@deadline/core';
import * as internal from '@deadline/core/internal';
import * as wire from '@deadline/core/wire';
import { expect, it } from 'vitest';

it('@deadline/core exports at most 30 runtime values', () => {
  expect(Object.keys(core).length).toBeLessThanOrEqual(30);
});

it('each name is exported by one entry point of @deadline/core', () => {
  const entries = { core, wire, internal };
  const seen = new Map<string, string>();
  const twice: string[] = [];
  for (const [entry, module] of Object.entries(entries)) {
    for (const name of Object.keys(module)) {
      const first = seen.get(name);
      if (first === undefined) seen.set(name, entry);
      else twice.push(`${name} (${first}, ${entry})`);
    }
  }
  expect(twice).toEqual([]);
});
