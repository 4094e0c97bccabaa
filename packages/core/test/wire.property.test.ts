/**
 * Property tests: whatever arrives in a header, the codec answers with a sane budget or a reason — it never
 * throws, never yields NaN, a negative number or more than the clamp.
 */
import fc from 'fast-check';
import { describe, expect, it } from 'vitest';
import { ourBudgetAlone } from '../src/internal.ts';
import {
  createBudgetParser,
  formatBudgetHeaders,
  formatDeadlineAt,
  formatGrpcTimeout,
  parseBudget,
  parseGrpcTimeout,
  parseRequestDeadline,
  waitedMs,
} from '../src/wire.ts';
import { BAD_BUDGET_VALUES } from './fixtures/bad-budget-values.ts';

const RUNS = 100_000;

/** Header values from everywhere: random text, near-misses of each grammar, numbers dressed up, arrays. */
const headerValue = fc.oneof(
  fc.string({ unit: 'binary', maxLength: 40 }),
  fc.string({ unit: 'grapheme', maxLength: 20 }),
  fc.stringMatching(/^[ \t]?-?\d{0,14}(\.\d{0,3})?(e\d{1,3})?[HMSmun]?[ \t]?$/),
  fc.stringMatching(/^\d{1,12}(, ?\d{1,12})?$/),
  fc.double().map(String),
  fc.integer().map(String),
  fc.constantFrom(...BAD_BUDGET_VALUES),
  fc.array(fc.stringMatching(/^\d{1,6}$/), { maxLength: 3 }),
  // Whatever else a host or a user's header record might hold.
  fc.anything({ withNullPrototype: true, withBigInt: true, maxDepth: 2 }),
);

const headerRecord = fc.record(
  {
    'x-request-deadline': headerValue,
    'grpc-timeout': headerValue,
    'connect-timeout-ms': headerValue,
    'x-envoy-expected-rq-timeout-ms': headerValue,
    'x-request-deadline-at': headerValue,
  },
  { requiredKeys: [] },
);

/** The headers whose 0 is a timeout already expired (gRPC's, Connect's), and the absolute form's time already past. */
const ZERO_MEANS_EXPIRED: ReadonlySet<string> = new Set([
  'grpc-timeout',
  'connect-timeout-ms',
  'x-request-deadline-at',
]);

function sane(ms: number | undefined, max: number): boolean {
  return ms === undefined || (typeof ms === 'number' && !Number.isNaN(ms) && ms >= 0 && ms <= max);
}

describe('wire codec properties', () => {
  it(`${RUNS} random header sets: never throws, never NaN, negative or over the clamp`, () => {
    const maxMs = 30_000;
    const parse = createBudgetParser({ maxMs, absolute: { skewMs: 10 } });
    let withBudget = 0;
    fc.assert(
      // Plain boolean checks (not expect) in the hot loop: 100k runs stay fast.
      fc.property(headerRecord, (headers) => {
        const parsed = parse(headers as Record<string, string>);
        const plain = parseBudget(headers as Record<string, string>);
        if (parsed.budgetMs !== undefined) withBudget++;
        return (
          sane(parsed.budgetMs, maxMs) &&
          // 0 (nothing left) only from a header that means "expired" by it: never ours nor Envoy's, where several
          // systems read 0 as "no timeout".
          (parsed.budgetMs !== 0 || ZERO_MEANS_EXPIRED.has(parsed.header as string)) &&
          parsed.ignored.every((ignored) => ignored.reason.length > 0) &&
          sane(plain.budgetMs, 2_147_483_647) &&
          (plain.budgetMs !== 0 || ZERO_MEANS_EXPIRED.has(plain.header as string))
        );
      }),
      { numRuns: RUNS },
    );
    // The generators must reach the valid grammar too, or the property proves little.
    expect(withBudget).toBeGreaterThan(RUNS / 10);
  });

  it(`${RUNS} random header sets: the fast read of the common request agrees with the parser, or leaves it to it`, () => {
    const parse = createBudgetParser();
    // As often: the records above, and ones with our header alone (or none), digits or not.
    const oursAlone = fc.record(
      { 'x-request-deadline': fc.oneof(headerValue, fc.stringMatching(/^\d{1,12}$/)) },
      { requiredKeys: [] },
    );
    let answered = 0;
    fc.assert(
      fc.property(fc.oneof(headerRecord, oursAlone), (headers) => {
        const fast = ourBudgetAlone(headers as Record<string, unknown>);
        if (fast === -1) return true;
        answered++;
        const parsed = parse(headers as Record<string, string>);
        if (parsed.ignored.length !== 0) return false;
        if (fast === 0) return parsed.budgetMs === undefined && parsed.header === undefined;
        return (
          parsed.header === 'x-request-deadline' &&
          parsed.budgetMs === Math.min(fast, 2_147_483_647) &&
          parsed.value === headers['x-request-deadline'] &&
          (parsed.requestedMs ?? parsed.budgetMs) === fast
        );
      }),
      { numRuns: RUNS },
    );
    // The common cases did come up: no header at all, and ours alone with bare digits.
    expect(answered).toBeGreaterThan(RUNS / 10);
  });

  it(`${RUNS} random single values: X-Request-Deadline is positive or undefined, grpc-timeout never negative`, () => {
    fc.assert(
      fc.property(headerValue, (value) => {
        const ours = parseRequestDeadline(value);
        const grpc = parseGrpcTimeout(value);
        return (
          (ours === undefined || (Number.isFinite(ours) && ours > 0)) &&
          (grpc === undefined || (Number.isFinite(grpc) && grpc >= 0))
        );
      }),
      { numRuns: RUNS },
    );
  });

  it(`${RUNS} random zeros and near-zeros: 0 of any unit or width means expired, never "none", never refused`, () => {
    const zero = fc.tuple(fc.integer({ min: 1, max: 8 }), fc.constantFrom('H', 'M', 'S', 'm', 'u', 'n'));
    const zeroMs = fc.integer({ min: 1, max: 10 }).map((digits) => '0'.repeat(digits));
    fc.assert(
      fc.property(zero, zeroMs, fc.constantFrom('', ' ', '\t'), ([digits, unit], ms, pad) => {
        const grpc = parseBudget({ 'grpc-timeout': `${pad}${'0'.repeat(digits)}${unit}${pad}` });
        const connect = parseBudget({ 'connect-timeout-ms': `${pad}${ms}${pad}` });
        const ours = parseBudget({ 'x-request-deadline': ms, 'x-envoy-expected-rq-timeout-ms': ms });
        return (
          grpc.budgetMs === 0 &&
          grpc.ignored.length === 0 &&
          connect.budgetMs === 0 &&
          connect.ignored.length === 0 &&
          ours.budgetMs === undefined &&
          ours.ignored.length === 2
        );
      }),
      { numRuns: RUNS / 10 },
    );
  });

  it('grpc-timeout: format → parse round-trips within one unit, never above the input', () => {
    const unitMs: Record<string, number> = { u: 0.001, m: 1, S: 1_000, M: 60_000, H: 3_600_000 };
    fc.assert(
      fc.property(fc.double({ min: 0.001, max: 1e12, noNaN: true }), (ms) => {
        const text = formatGrpcTimeout(ms);
        const parsed = parseGrpcTimeout(text);
        const unit = unitMs[text.slice(-1)] as number;
        return parsed !== undefined && parsed <= ms * (1 + 1e-12) && ms - parsed < unit * (1 + 1e-9);
      }),
      { numRuns: RUNS },
    );
  });

  it('formatted headers always parse back to a budget ≤ the one formatted, never 0', () => {
    fc.assert(
      fc.property(fc.double({ min: Number.MIN_VALUE, max: 1e15, noNaN: true }), (ms) => {
        const headers = formatBudgetHeaders(ms, ['grpc', 'connect']);
        const parsed = parseBudget(headers).budgetMs;
        return (
          Object.values(headers).every((value) => !/^0+[a-zA-Z]?$/.test(value)) &&
          parsed !== undefined &&
          parsed > 0 &&
          parsed <= Math.max(ms, 1)
        );
      }),
      { numRuns: 20_000 },
    );
  });
  it('a message’s wait: never negative, never more than its budget, nothing for a value without digits', () => {
    const now = 1_800_000_000_000;
    fc.assert(
      fc.property(
        fc.integer({ min: 1, max: 9_999_999_999 }),
        fc.oneof(headerValue, fc.integer({ min: 0, max: 9_999_999_999_999 }).map(String)),
        fc.integer({ min: 0, max: 60_000 }),
        (budgetMs, deadlineAt, skewMs) => {
          const waited = waitedMs(budgetMs, deadlineAt, skewMs, () => now);
          const digitless = typeof deadlineAt === 'string' && !/\d/.test(deadlineAt);
          return waited >= 0 && waited <= budgetMs && (!digitless || waited === 0);
        },
      ),
      { numRuns: RUNS },
    );
  });

  it('a message’s wait read back exactly as formatted, less the allowance', () => {
    fc.assert(
      fc.property(fc.integer({ min: 1, max: 100_000 }), fc.integer({ min: 0, max: 100_000 }), (budgetMs, waited) => {
        const publishedAt = 1_800_000_000_000;
        const deadlineAt = formatDeadlineAt(budgetMs, () => publishedAt);
        return (
          waitedMs(budgetMs, deadlineAt, 10, () => publishedAt + waited) ===
          Math.min(Math.max(waited - 10, 0), budgetMs)
        );
      }),
      { numRuns: RUNS },
    );
  });
});
