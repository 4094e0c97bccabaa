/**
 * Options are checked once, naming the bad one; the server's `trust` and `logger` options do what they say on a
 * real call.
 */
import { InvalidArgumentError, runWithDeadline } from '@deadline/core';
import { afterAll, describe, expect, it } from 'vitest';
import { DeadlineChannel, deadlineService, withDeadline } from '../src/index.ts';
import { client, Inventory, implementation, type Seen, type Served, serve, unary } from './support.ts';

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

  it("trust: an untrusted caller's deadline is not the handler's budget, the service default is", async () => {
    const server = await serve({
      serviceName: 'inventory',
      defaultMs: 1_234,
      trust: (call) => call.metadata.get('x-internal')[0] === '1',
    });
    servers.push(server);
    const c = client(server.address);
    const seen = await runWithDeadline(800, () => unary<Seen>(c, 'inspect', {}));
    expect(seen.budgetMs).toBeCloseTo(1_234, 6);
    c.close();
  });

  it('a throwing trust predicate counts as untrusted; the call goes on', async () => {
    const server = await serve({
      defaultMs: 1_111,
      trust: () => {
        throw new Error('broken predicate');
      },
    });
    servers.push(server);
    const c = client(server.address);
    expect((await runWithDeadline(800, () => unary<Seen>(c, 'inspect', {}))).budgetMs).toBeCloseTo(1_111, 6);
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
    const server = await serve({ serviceName: 'stock', maxMs: 100, logger });
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
