/**
 * Options are checked once, naming the bad one; the server's `trust` and `logger` options do what they say on a
 * real call: a caller the service does not trust may shorten its budget, never lengthen it.
 */
import { InvalidArgumentError, runWithDeadline } from '@deadline/core';
import { afterAll, describe, expect, it } from 'vitest';
import { DeadlineChannel, deadlineService, withDeadline } from '../src/index.ts';
import { client, Inventory, implementation, leftAfter, type Seen, type Served, serve, unary } from './support.ts';

const servers: Served[] = [];
afterAll(async () => {
  for (const server of servers) await server.close();
});

describe('options', () => {
  it('are checked when the client or the service is wrapped, naming the bad one', () => {
    const bad = (make: () => unknown, option: string) => {
      expect(make).toThrow(InvalidArgumentError);
      expect(make).toThrow(new RegExp(`^${option} `));
    };
    bad(() => withDeadline({}, { marginMs: -1 }), 'marginMs');
    bad(() => withDeadline({}, { defaultMs: 0 }), 'defaultMs');
    bad(() => withDeadline({}, { circuitBreaker: {} as never }), 'circuitBreaker');
    bad(() => new DeadlineChannel({} as never, { minMs: Number.NaN }), 'minMs');
    bad(() => deadlineService(Inventory.service, implementation(), { maxMs: 0 }), 'maxMs');
    bad(() => deadlineService(Inventory.service, implementation(), { defaultMs: 5_000, maxMs: 1_000 }), 'defaultMs');
    bad(() => deadlineService(Inventory.service, implementation(), { serviceName: 'a b' }), 'serviceName');
    bad(() => deadlineService(Inventory.service, implementation(), { headers: ['http'] as never }), 'headers');
    bad(() => deadlineService(Inventory.service, implementation(), { logger: {} as never }), 'logger');
  });

  it('trust: any caller may shorten the default, only a trusted one lengthen it (up to maxMs)', async () => {
    const lines: Record<string, unknown>[] = [];
    const record = (line: object) => lines.push(line as Record<string, unknown>);
    const server = await serve({
      serviceName: 'inventory',
      defaultMs: 1_234,
      maxMs: 5_000,
      trust: (call) => call.metadata.get('x-internal')[0] === '1',
      logger: { info: record, warn: record },
    });
    servers.push(server);
    const c = client(server.address);
    const inspect = (ms: number, metadata: Record<string, string> = {}) =>
      runWithDeadline(ms, () => unary<Seen>(c, 'inspect', {}, {}, metadata));
    // Untrusted, shorter than the default: honoured.
    let started = performance.now();
    const shorter = await inspect(800);
    expect(shorter.budgetMs).toBeLessThanOrEqual(800);
    expect(shorter.budgetMs).toBeGreaterThanOrEqual(leftAfter(800, started));
    // Untrusted, longer: the default, and the line says what was asked.
    started = performance.now();
    expect((await inspect(3_000)).budgetMs).toBeCloseTo(1_234, 6);
    const askedAtLeast = leftAfter(3_000, started);
    // Trusted: as long as it asks, up to maxMs.
    started = performance.now();
    const trusted = await inspect(3_000, { 'x-internal': '1' });
    expect(trusted.budgetMs).toBeLessThanOrEqual(3_000);
    expect(trusted.budgetMs).toBeGreaterThanOrEqual(leftAfter(3_000, started));
    expect((await inspect(60_000, { 'x-internal': '1' })).budgetMs).toBeCloseTo(5_000, 6);
    await expect.poll(() => lines.length).toBe(4);
    expect(lines[0]).toMatchObject({ budgetSource: 'header' });
    expect(lines[0]?.requestedMs).toBeUndefined();
    expect(lines[1]).toMatchObject({ budgetSource: 'default', budgetMs: 1_234 });
    expect(lines[1]?.requestedMs).toBeGreaterThanOrEqual(askedAtLeast);
    expect(lines[2]).toMatchObject({ budgetSource: 'header' });
    expect(lines[3]).toMatchObject({ budgetSource: 'header', budgetMs: 5_000 });
    expect(lines[3]?.requestedMs).toBeGreaterThan(55_000);
    c.close();
  });

  it('a throwing trust predicate counts as untrusted: it may shorten the default, not lengthen it', async () => {
    const server = await serve({
      defaultMs: 1_111,
      trust: () => {
        throw new Error('broken predicate');
      },
    });
    servers.push(server);
    const c = client(server.address);
    expect((await runWithDeadline(3_000, () => unary<Seen>(c, 'inspect', {}))).budgetMs).toBeCloseTo(1_111, 6);
    const started = performance.now();
    const shorter = await runWithDeadline(800, () => unary<Seen>(c, 'inspect', {}));
    expect(shorter.budgetMs).toBeLessThanOrEqual(800);
    expect(shorter.budgetMs).toBeGreaterThanOrEqual(leftAfter(800, started));
    c.close();
  });

  it('logger: one line per call, with its method, budget, outcome and code', async () => {
    const lines: { level: string; line: Record<string, unknown>; message: string }[] = [];
    const logger = {
      info: (line: object, message: string) =>
        lines.push({ level: 'info', line: line as Record<string, unknown>, message }),
      warn: (line: object, message: string) =>
        lines.push({ level: 'warn', line: line as Record<string, unknown>, message }),
    };
    // Trusted, so that its 2 s are clamped to maxMs (an untrusted caller gets the default, 100 ms here as well).
    const server = await serve({ serviceName: 'stock', maxMs: 100, trust: () => true, logger });
    servers.push(server);
    const c = client(server.address);
    await runWithDeadline(2_000, () => unary(c, 'inspect', {}));
    await runWithDeadline(2_000, () => unary(c, 'inspect', { wait: true })).catch(() => {});
    await expect.poll(() => lines.length).toBe(2);
    expect(lines[0]).toMatchObject({
      level: 'info',
      message: 'grpc call',
      line: {
        hop: 'stock',
        method: '/deadline.test.Inventory/Inspect',
        budgetMs: 100,
        budgetSource: 'header',
        outcome: 'ok',
        code: 0,
      },
    });
    expect(lines[0]?.line.requestedMs).toBeGreaterThan(100);
    expect(lines[1]).toMatchObject({
      level: 'warn',
      line: { outcome: 'deadline_exceeded', code: 4, exceededBy: 'stock' },
    });
    c.close();
  });
});
