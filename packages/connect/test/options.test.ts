/**
 * Options are checked once, naming the bad one; the interceptor's `trust` and `logger` options do what they say on
 * a real call.
 */

import { createGrpcTransport } from '@connectrpc/connect-node';
import { InvalidArgumentError, runWithDeadline } from '@deadline/core';
import { afterAll, describe, expect, it } from 'vitest';
import { deadlineInterceptor, withDeadline } from '../src/index.ts';
import { client, type Served, serve } from './support.ts';

const servers: Served[] = [];
afterAll(async () => {
  for (const server of servers) await server.close();
});

describe('options', () => {
  it('are checked when the transport is wrapped or the interceptor made, naming the bad one', () => {
    const transport = createGrpcTransport({ baseUrl: 'http://127.0.0.1:9' });
    const bad = (make: () => unknown, option: string) => {
      expect(make).toThrow(InvalidArgumentError);
      expect(make).toThrow(new RegExp(`^${option} `));
    };
    bad(() => withDeadline(transport, { marginMs: -1 }), 'marginMs');
    bad(() => withDeadline(transport, { defaultMs: Number.POSITIVE_INFINITY }), 'defaultMs');
    bad(() => deadlineInterceptor({ minMs: 20, defaultMs: 10 }), 'minMs');
    bad(() => deadlineInterceptor({ trust: 'yes' as never }), 'trust');
    bad(() => deadlineInterceptor({ cancelOnEnd: 1 as never }), 'cancelOnEnd');
  });

  it("trust: an untrusted caller's timeout is not the handler's budget, the service default is", async () => {
    const server = await serve({ defaultMs: 1_234, trust: (req) => req.header.get('x-internal') === '1' });
    servers.push(server);
    const c = client(server.baseUrl, 'connect');
    expect((await runWithDeadline(800, () => c.inspect({}))).budgetMs).toBeCloseTo(1_234, 6);
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
    const c = client(server.baseUrl, 'grpc');
    await runWithDeadline(2_000, () => c.inspect({}));
    await runWithDeadline(2_000, () => c.inspect({ wait: true })).catch(() => {});
    await expect.poll(() => lines.length).toBe(2);
    expect(lines[0]).toMatchObject({
      level: 'info',
      message: 'connect call',
      line: {
        hop: 'stock',
        method: '/deadline.test.Inventory/Inspect',
        budgetMs: 100,
        budgetSource: 'header',
        outcome: 'ok',
        code: 'ok',
      },
    });
    expect(lines[1]).toMatchObject({
      level: 'warn',
      line: { outcome: 'deadline_exceeded', code: 'DeadlineExceeded', exceededBy: 'stock' },
    });
  });
});
