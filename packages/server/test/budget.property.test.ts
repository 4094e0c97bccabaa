/**
 * The budget a request runs with, for any headers a caller may send: never more than the route allows this
 * caller — `maxMs` when `trust` accepts it, `defaultMs` otherwise (a caller may shorten the default, never
 * lengthen it) — never a crash, and always the caller's own budget when it asked for less.
 */
import type { IncomingHttpHeaders } from 'node:http';
import { parseBudget } from '@deadline/core/wire';
import fc from 'fast-check';
import { describe, expect, it } from 'vitest';
import { createParser, resolveBudget } from '../src/budget.ts';
import { resolveLimits, resolveOptions } from '../src/options.ts';

const parser = createParser(resolveOptions({}) as never);

/** Values a caller may send: valid budgets of every dialect, and anything else. */
const value = fc.oneof(
  fc.integer({ min: 0, max: 9_999_999_999 }).map(String),
  fc
    .tuple(fc.integer({ min: 0, max: 99_999_999 }), fc.constantFrom('H', 'M', 'S', 'm', 'u', 'n'))
    .map(([n, u]) => `${n}${u}`),
  fc.string({ maxLength: 12 }),
);
const headers = fc.record(
  {
    'x-request-deadline': value,
    'grpc-timeout': value,
    'connect-timeout-ms': value,
    'x-envoy-expected-rq-timeout-ms': value,
  },
  { requiredKeys: [] },
) as fc.Arbitrary<IncomingHttpHeaders>;
const limits = fc
  .tuple(fc.integer({ min: 1, max: 100_000 }), fc.integer({ min: 0, max: 100_000 }))
  .map(([defaultMs, extra]) => resolveLimits({ defaultMs, maxMs: defaultMs + extra, minMs: 0 }));

describe('resolveBudget', () => {
  it('never grants more than the caller may have, and always what it asked when that is less', () => {
    fc.assert(
      fc.property(headers, limits, fc.boolean(), (sent, route, trusted) => {
        const budget = resolveBudget(sent, trusted, parser, route);
        const allowed = trusted ? route.maxMs : route.defaultMs;
        expect(budget.budgetMs).toBeGreaterThanOrEqual(0);
        expect(budget.budgetMs).toBeLessThanOrEqual(allowed);
        expect(budget.trusted).toBe(trusted);
        // What the caller asked for, before the parser's own clamp (2^31−1 ms).
        const parsed = parseBudget(sent);
        const asked = parsed.requestedMs ?? parsed.budgetMs;
        if (asked === undefined) {
          expect(budget).toMatchObject({ source: 'default', budgetMs: route.defaultMs });
        } else if (asked <= allowed) {
          expect(budget).toMatchObject({ source: 'header', budgetMs: asked, requestedMs: undefined });
        } else {
          // More than it may have: clamped (trusted) or the default (untrusted), what it asked kept.
          expect(budget.budgetMs).toBe(allowed);
          expect(budget.source).toBe(trusted ? 'header' : 'default');
          expect(budget.requestedMs).toBe(asked);
        }
      }),
      { numRuns: 2_000 },
    );
  });
});
