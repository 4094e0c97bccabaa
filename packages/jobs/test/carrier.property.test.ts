/** The job carrier is read back from Redis, where anything may be: property tests for its parser. */
import { runWithContext, traceFrom } from '@deadline/core';
import fc from 'fast-check';
import { describe, expect, it } from 'vitest';
import { carrierFromContext, readCarrier } from '../src/carrier.ts';

describe('job carrier', () => {
  it('never throws on anything; what it returns is well-formed', () => {
    fc.assert(
      fc.property(fc.anything({ withNullPrototype: true, withObjectString: true }), (value) => {
        const found = readCarrier(value);
        if (found.budgetMs !== undefined) {
          expect(Number.isFinite(found.budgetMs) && found.budgetMs >= 1).toBe(true);
        }
        if (found.trace !== undefined) expect(found.trace.traceId).toMatch(/^[0-9a-f]{32}$/);
        if (found.hop !== undefined) expect(found.hop).toMatch(/^[\x21-\x7e]{1,128}$/);
        for (const v of Object.values(found.baggage ?? {})) expect(typeof v).toBe('string');
      }),
      { numRuns: 20_000 },
    );
  });

  it('fields of the right shape among garbage: each kept or dropped on its own', () => {
    fc.assert(
      fc.property(
        fc.record({
          traceparent: fc.oneof(fc.string(), fc.constant('00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01')),
          budgetMs: fc.oneof(fc.double(), fc.integer(), fc.string()),
          hop: fc.oneof(fc.string(), fc.constant('orders')),
          baggage: fc.oneof(fc.dictionary(fc.string(), fc.oneof(fc.string(), fc.integer())), fc.string()),
        }),
        (carrier) => {
          const found = readCarrier(carrier);
          if (carrier.traceparent.startsWith('00-4bf9'))
            expect(found.trace?.traceId).toBe('4bf92f3577b34da6a3ce929d0e0e4736');
          if (carrier.hop === 'orders') expect(found.hop).toBe('orders');
          const b = carrier.budgetMs;
          expect(found.budgetMs).toBe(typeof b === 'number' && b >= 1 && b <= 2 ** 31 - 1 ? b : undefined);
        },
      ),
      { numRuns: 20_000 },
    );
  });

  it('round trip through JSON: the trace continues as a child span, the budget and baggage survive', () => {
    fc.assert(
      fc.property(
        fc.integer({ min: 1, max: 2 ** 31 - 1 }),
        fc.dictionary(fc.string(), fc.string(), { maxKeys: 5 }),
        (budgetMs, baggage) => {
          const trace = traceFrom();
          const carrier = runWithContext({ root: true, trace, hop: 'orders', baggage }, () =>
            carrierFromContext(budgetMs),
          );
          const found = readCarrier(JSON.parse(JSON.stringify(carrier)));
          expect(found.trace?.traceId).toBe(trace.traceId);
          expect(found.trace?.parentId).toBe(trace.spanId);
          expect(found.budgetMs).toBe(budgetMs);
          expect(found.hop).toBe('orders');
          expect(found.baggage ?? {}).toEqual(JSON.parse(JSON.stringify(baggage)));
        },
      ),
      { numRuns: 2_000 },
    );
  });
});
