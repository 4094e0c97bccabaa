/**
 * A real edge (fastify + @deadline/fastify) in front of a real failing downstream (node:http answering 503), on
 * loopback: once the breaker opens, the edge answers 503 with Retry-After from fastify's default error handler,
 * and the downstream sees no more requests.
 */
import { createServer, type Server } from 'node:http';
import type { AddressInfo } from 'node:net';
import fastifyDeadline from '@deadline/fastify';
import Fastify, { type FastifyInstance } from 'fastify';
import { request } from 'undici';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { type BreakerStateEvent, CircuitBreaker } from '../src/index.ts';

let downstream: Server;
let downstreamUrl: string;
let downstreamHits = 0;
let edge: FastifyInstance;
let edgeUrl: string;
const lines: { level: string; msg: string }[] = [];
const breaker = new CircuitBreaker({
  target: 'inventory',
  failureThreshold: 3,
  minimumCalls: 3,
  cooldownMs: 30_000,
  logger: {
    info: (_fields, msg) => lines.push({ level: 'info', msg }),
    warn: (_fields, msg) => lines.push({ level: 'warn', msg }),
  },
});
const events: BreakerStateEvent[] = [];
/** When the breaker opened (`performance.now()`): the cooldown, and so each Retry-After, counts from it. */
let openedAt = Number.NaN;
breaker.on('state', (event) => {
  events.push(event);
  if (event.to === 'open') openedAt = performance.now();
});

beforeAll(async () => {
  downstream = createServer((_req, res) => {
    downstreamHits++;
    res.writeHead(503, { 'content-type': 'text/plain' }).end('inventory is down');
  });
  await new Promise<void>((resolve) => downstream.listen(0, '127.0.0.1', resolve));
  downstreamUrl = `http://127.0.0.1:${(downstream.address() as AddressInfo).port}`;

  edge = Fastify();
  await edge.register(fastifyDeadline, { serviceName: 'edge' });
  edge.get('/stock', async (_req, reply) => {
    // The 503 answer is returned by execute() (and counted as a failure); the edge reports it as a bad gateway.
    const res = await breaker.execute((signal) => fetch(`${downstreamUrl}/stock`, { signal: signal ?? null }));
    const text = await res.text();
    reply.code(res.status >= 500 ? 502 : res.status);
    return text;
  });
  edgeUrl = await edge.listen({ port: 0, host: '127.0.0.1' });
});

afterAll(async () => {
  await edge?.close();
  downstream?.closeAllConnections();
  await new Promise((resolve) => downstream?.close(resolve));
});

describe('a breaker behind a real fastify edge', () => {
  it('opens on the downstream’s 503s; then the edge answers 503 + Retry-After and the downstream is left alone', async () => {
    for (let i = 0; i < 3; i++) {
      const res = await request(`${edgeUrl}/stock`);
      expect(res.statusCode).toBe(502);
      expect(await res.body.text()).toBe('inventory is down');
    }
    expect(downstreamHits).toBe(3);
    expect(breaker.state).toBe('open');

    for (let i = 0; i < 5; i++) {
      const res = await request(`${edgeUrl}/stock`);
      const body = (await res.body.json()) as Record<string, unknown>;
      expect(res.statusCode).toBe(503);
      // What is left of the 30 s cooldown, in whole seconds rounded up: 30 just after it opened, less by each second
      // a busy machine took since (read on the run's own clock, not assumed to be none).
      const sinceOpened = performance.now() - openedAt;
      const retryAfter = Number(res.headers['retry-after']);
      expect(retryAfter).toBeLessThanOrEqual(30);
      expect(retryAfter).toBeGreaterThanOrEqual(Math.ceil((30_000 - sinceOpened) / 1_000));
      expect(body).toMatchObject({
        statusCode: 503,
        code: 'ERR_CIRCUIT_OPEN',
        error: 'Service Unavailable',
        message: expect.stringMatching(/^circuit for inventory is open: call not made \(retry in \d+ ms\)$/),
      });
      // The deadline plugin leaves it alone: it is not a deadline error, so no X-Deadline-Exceeded-By.
      expect(res.headers['x-deadline-exceeded-by']).toBeUndefined();
    }
    expect(downstreamHits).toBe(3);
    expect(events.map((e) => `${e.from}→${e.to}:${e.reason}`)).toEqual(['closed→open:failure-rate']);
    expect(lines).toEqual([
      { level: 'warn', msg: 'circuit for inventory opened (failure-rate): calls fail fast for 30000 ms' },
    ]);
  });
});
