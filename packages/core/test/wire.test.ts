import { describe, expect, it } from 'vitest';
import { InvalidArgumentError } from '../src/index.ts';
import {
  createBudgetParser,
  formatBudgetHeaders,
  formatGrpcTimeout,
  formatRequestDeadline,
  parseBudget,
  parseGrpcTimeout,
  parseRequestDeadline,
} from '../src/wire.ts';
import { BAD_BUDGET_VALUES, BAD_GRPC_TIMEOUT_VALUES } from './fixtures/bad-budget-values.ts';

describe('X-Request-Deadline', () => {
  it('parses positive whole milliseconds, up to 10 digits, trimming HTTP whitespace', () => {
    expect(parseRequestDeadline('2500')).toBe(2500);
    expect(parseRequestDeadline(' 2500\t')).toBe(2500);
    expect(parseRequestDeadline('0002500')).toBe(2500);
    expect(parseRequestDeadline('9999999999')).toBe(9_999_999_999);
    expect(parseRequestDeadline(['2500'])).toBe(2500);
    expect(parseRequestDeadline(250)).toBe(250);
  });

  it.each(BAD_BUDGET_VALUES)('refuses %j', (value) => {
    expect(parseRequestDeadline(value)).toBeUndefined();
  });

  it('refuses non-strings and several values', () => {
    for (const value of [undefined, null, {}, ['1', '2'], [], Number.NaN, -1, 1.5, Number.POSITIVE_INFINITY]) {
      expect(parseRequestDeadline(value)).toBeUndefined();
    }
  });

  it('formats rounded down, never 0, and refuses to format nothing left', () => {
    expect(formatRequestDeadline(2499.7)).toBe('2499');
    expect(formatRequestDeadline(0.2)).toBe('1');
    expect(formatRequestDeadline(1e12)).toBe('9999999999');
    for (const bad of [0, -1, Number.NaN, Number.POSITIVE_INFINITY]) {
      expect(() => formatRequestDeadline(bad)).toThrow(InvalidArgumentError);
    }
  });
});

describe('grpc-timeout', () => {
  it('parses every unit', () => {
    expect(parseGrpcTimeout('1H')).toBe(3_600_000);
    expect(parseGrpcTimeout('2M')).toBe(120_000);
    expect(parseGrpcTimeout('3S')).toBe(3_000);
    expect(parseGrpcTimeout('250m')).toBe(250);
    expect(parseGrpcTimeout('999514u')).toBe(999.514);
    expect(parseGrpcTimeout('1500000n')).toBe(1.5);
    expect(parseGrpcTimeout('99999999m')).toBe(99_999_999);
  });

  it.each([...BAD_BUDGET_VALUES, ...BAD_GRPC_TIMEOUT_VALUES])('refuses %j', (value) => {
    expect(parseGrpcTimeout(value)).toBeUndefined();
  });

  it('reads zero of any unit as 0 ms: a timeout already expired, as gRPC implementations read it', () => {
    for (const value of ['0H', '0M', '0S', '0m', '0u', '0n', '00000000m', ' 0S\t']) {
      expect(parseGrpcTimeout(value), value).toBe(0);
    }
  });

  it('formats in the finest unit that fits 8 digits, rounded down, never 0', () => {
    expect(formatGrpcTimeout(2500)).toBe('2500000u');
    expect(formatGrpcTimeout(99_999.999)).toBe('99999999u');
    expect(formatGrpcTimeout(100_000)).toBe('100000m');
    expect(formatGrpcTimeout(3_600_000)).toBe('3600000m');
    expect(formatGrpcTimeout(200_000_000)).toBe('200000S');
    expect(formatGrpcTimeout(0.0004)).toBe('1u');
    expect(formatGrpcTimeout(1e30)).toBe('99999999H');
    expect(() => formatGrpcTimeout(0)).toThrow(InvalidArgumentError);
  });
});

describe('parseBudget', () => {
  it('returns no budget, allocation-free, when no header is present', () => {
    const a = parseBudget({});
    expect(a).toEqual({
      budgetMs: undefined,
      header: undefined,
      value: undefined,
      requestedMs: undefined,
      ignored: [],
    });
    expect(parseBudget({ accept: '*/*' })).toBe(a);
  });

  it('takes the smallest valid budget among dialects and says which header it came from', () => {
    const parsed = parseBudget({
      'x-request-deadline': '800',
      'grpc-timeout': '500m',
      'connect-timeout-ms': '900',
      'x-envoy-expected-rq-timeout-ms': '15000',
    });
    expect(parsed).toMatchObject({ budgetMs: 500, header: 'grpc-timeout', value: '500m', requestedMs: undefined });
    expect(parseBudget({ 'x-envoy-expected-rq-timeout-ms': '120' })).toMatchObject({
      budgetMs: 120,
      header: 'x-envoy-expected-rq-timeout-ms',
    });
  });

  it('sets invalid values aside with a reason, and still uses the valid ones', () => {
    const parsed = parseBudget({
      'x-request-deadline': '12ms',
      'grpc-timeout': '300m',
      'x-envoy-expected-rq-timeout-ms': '0',
    });
    expect(parsed.budgetMs).toBe(300);
    expect(parsed.ignored).toEqual([
      { header: 'x-request-deadline', value: '12ms', reason: 'not a whole number of milliseconds' },
      {
        header: 'x-envoy-expected-rq-timeout-ms',
        value: '0',
        reason: 'zero is not a budget (several systems read 0 as "no timeout")',
      },
    ]);
    expect(parseBudget({ 'x-request-deadline': '100, 200' }).ignored[0]?.reason).toBe('more than one value');
    expect(parseBudget({ 'x-request-deadline': '1'.repeat(50) }).ignored[0]).toMatchObject({ reason: 'too long' });
    expect(parseBudget({ 'x-request-deadline': '1'.repeat(12) }).ignored[0]).toMatchObject({
      reason: 'more than 10 digits',
    });
    expect(parseBudget({ 'x-request-deadline': ['1', '2'] }).ignored[0]?.reason).toBe('more than one value');
    expect(parseBudget({ 'x-request-deadline': [] }).ignored[0]?.reason).toBe('empty');
  });

  it('never throws on whatever a host may put in a header record', () => {
    const odd: unknown[] = [
      Object.create(null),
      [Object.create(null)],
      Symbol('s'),
      () => 1,
      10n,
      null,
      { toString: 1 },
    ];
    for (const value of odd) {
      const parsed = parseBudget({ 'x-request-deadline': value, 'grpc-timeout': value } as never);
      expect(parsed.budgetMs).toBeUndefined();
      expect(parsed.ignored).toHaveLength(2);
    }
  });

  it("reads a zero grpc-timeout or Connect-Timeout-Ms as nothing left, and refuses ours and Envoy's zero", () => {
    expect(parseBudget({ 'connect-timeout-ms': '0' })).toMatchObject({ budgetMs: 0, header: 'connect-timeout-ms' });
    expect(parseBudget({ 'grpc-timeout': '0n' })).toMatchObject({ budgetMs: 0, header: 'grpc-timeout' });
    expect(parseBudget(new Headers({ 'Connect-Timeout-Ms': '000' }))).toMatchObject({ budgetMs: 0 });
    // The smallest wins: a zero beside a real budget is still nothing left.
    expect(parseBudget({ 'x-request-deadline': '800', 'connect-timeout-ms': '0' }).budgetMs).toBe(0);
    for (const header of ['x-request-deadline', 'x-envoy-expected-rq-timeout-ms']) {
      expect(parseBudget({ [header]: '0' }), header).toMatchObject({
        budgetMs: undefined,
        ignored: [{ header, value: '0', reason: 'zero is not a budget (several systems read 0 as "no timeout")' }],
      });
    }
  });

  it('reads WHATWG Headers and Maps', () => {
    const headers = new Headers({ 'X-Request-Deadline': '700', 'Grpc-Timeout': '1S' });
    expect(parseBudget(headers)).toMatchObject({ budgetMs: 700, header: 'x-request-deadline' });
    headers.append('X-Request-Deadline', '100');
    expect(parseBudget(headers)).toMatchObject({ budgetMs: 1000, header: 'grpc-timeout' });
    expect(parseBudget(new Map([['x-request-deadline', '42']]))).toMatchObject({ budgetMs: 42 });
  });
});

describe('createBudgetParser', () => {
  it('clamps to maxMs and reports what was asked', () => {
    const parse = createBudgetParser({ maxMs: 5_000 });
    expect(parse({ 'x-request-deadline': '60000' })).toMatchObject({ budgetMs: 5_000, requestedMs: 60_000 });
    expect(parse({ 'x-request-deadline': '4000' })).toMatchObject({ budgetMs: 4_000, requestedMs: undefined });
  });

  it('accepts only the configured dialects and reports the others as ignored', () => {
    const parse = createBudgetParser({ dialects: ['grpc'] });
    const parsed = parse({ 'x-request-deadline': '100', 'grpc-timeout': '2S' });
    expect(parsed).toMatchObject({ budgetMs: 2_000, header: 'grpc-timeout' });
    expect(parsed.ignored).toEqual([
      { header: 'x-request-deadline', value: '100', reason: 'dialect not accepted here' },
    ]);
  });

  it('reads the absolute form only when opted in, minus the skew allowance', () => {
    const wallClock = 1_700_000_000_000;
    const headers = { 'x-request-deadline-at': String(wallClock + 1_000) };
    expect(parseBudget(headers)).toMatchObject({
      budgetMs: undefined,
      ignored: [
        { header: 'x-request-deadline-at', reason: 'absolute form not accepted here (see the absolute option)' },
      ],
    });
    const parse = createBudgetParser({ absolute: { skewMs: 50 }, now: () => wallClock });
    expect(parse(headers)).toMatchObject({ budgetMs: 950, header: 'x-request-deadline-at' });
    // Already past: a real answer, the caller has nothing left.
    expect(parse({ 'x-request-deadline-at': String(wallClock - 10) }).budgetMs).toBe(0);
    // The relative header still wins when smaller.
    expect(parse({ ...headers, 'x-request-deadline': '300' }).budgetMs).toBe(300);
    expect(parse({ 'x-request-deadline-at': 'soon' }).ignored[0]?.reason).toBe(
      'not an epoch time in whole milliseconds',
    );
  });

  it('validates its options, naming them', () => {
    expect(() => createBudgetParser({ maxMs: 0 })).toThrow(/maxMs must be a finite number between 1 and 2147483647/);
    expect(() => createBudgetParser({ dialects: ['http2' as 'grpc'] })).toThrow(/dialects must be an array of/);
    expect(() => createBudgetParser({ absolute: { skewMs: -1 } })).toThrow(/absolute.skewMs/);
    expect(() => createBudgetParser({ absolute: {} as { skewMs: number } })).toThrow(/absolute.skewMs/);
  });
});

describe('formatBudgetHeaders', () => {
  it('always writes ours, and the other dialects on request', () => {
    expect(formatBudgetHeaders(2499.6)).toEqual({ 'x-request-deadline': '2499' });
    expect(formatBudgetHeaders(2499.6, ['deadline', 'grpc', 'connect', 'envoy'])).toEqual({
      'x-request-deadline': '2499',
      'grpc-timeout': '2499600u',
      'connect-timeout-ms': '2499',
      'x-envoy-upstream-rq-timeout-ms': '2499',
    });
    expect(() => formatBudgetHeaders(0)).toThrow(InvalidArgumentError);
    expect(() => formatBudgetHeaders(10, ['http' as 'grpc'])).toThrow(/dialects must be/);
  });

  it('round-trips through the parser', () => {
    for (const ms of [1, 7, 250, 2500, 99_999, 3_600_000]) {
      expect(parseBudget(formatBudgetHeaders(ms, ['grpc', 'connect'])).budgetMs).toBe(ms);
    }
  });
});
