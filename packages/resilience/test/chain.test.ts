/**
 * Seed 003's retry row, on real servers: client (1000 ms) → edge (fastify) → orders (express) which retries
 * a downstream that never answers, 3 attempts of at most 400 ms each. Without the one budget that is
 * 400 + 400 + 400 = 1200 ms of work for a client gone at 1000 ms; with it, the edge answers near 1000 ms.
 */

import { once } from 'node:events';
import { createServer } from 'node:http';
import type { AddressInfo } from 'node:net';
import { deadlineErrors, deadline as expressDeadline } from '@deadline/express';
import fastifyDeadline from '@deadline/fastify';
import { createFetch } from '@deadline/http';
import express from 'express';
import Fastify from 'fastify';
import { request } from 'undici';
import { describe, expect, it } from 'vitest';
import { downstreamsPerTest, silent } from '../../http/test/servers.ts';
import { retry } from '../src/index.ts';

const downstream = downstreamsPerTest();

describe('retries inside the edge budget (real servers)', () => {
  it('client 1000 ms → failure near 1000 ms, never 1200 ms; each attempt gets what is left', async () => {
    const inventory = await downstream(silent);
    const fetch = createFetch();
    const attempts: number[] = [];
    const orders = express();
    orders.use(expressDeadline({ serviceName: 'orders' }));
    orders.get('/orders/42', async (_req, res, next) => {
      try {
        const response = await retry(
          (attempt, signal) => {
            attempts.push(attempt);
            return fetch(`${inventory.url}/stock/42`, { signal: signal ?? null });
          },
          { attempts: 3, perAttemptTimeoutMs: 400, baseDelayMs: 10 },
        );
        res.status(response.status).send(await response.text());
      } catch (error) {
        next(error);
      }
    });
    orders.use(deadlineErrors());
    const ordersServer = createServer(orders).listen(0, '127.0.0.1');
    await once(ordersServer, 'listening');
    const ordersUrl = `http://127.0.0.1:${(ordersServer.address() as AddressInfo).port}`;

    const edge = Fastify({ forceCloseConnections: true });
    await edge.register(fastifyDeadline, { serviceName: 'edge' });
    edge.get('/', async (_request, reply) => {
      const response = await fetch(`${ordersUrl}/orders/42`);
      reply.code(response.status);
      return response.text();
    });
    const edgeUrl = await edge.listen({ port: 0, host: '127.0.0.1' });
    try {
      const started = performance.now();
      const response = await request(edgeUrl, { headers: { 'x-request-deadline': '1000' } });
      const elapsed = performance.now() - started;
      await response.body.dump();
      expect(response.statusCode).toBe(504);
      expect(elapsed).toBeGreaterThanOrEqual(950);
      // Never the 1200 ms that fresh per-attempt timeouts would take.
      expect(elapsed).toBeLessThan(1_200);
      // 400 + 400 + what was left: three attempts inside the one budget, the downstream saw each.
      expect(attempts).toEqual([1, 2, 3]);
      expect(inventory.requests.length).toBe(3);
      const budgets = inventory.requests.map((headers) => Number(headers['x-request-deadline']));
      expect(budgets[0]).toBeLessThanOrEqual(400);
      expect(budgets[1]).toBeLessThanOrEqual(400);
      expect(budgets[2]).toBeLessThan(200);
      console.log(
        `chain with retries: edge answered in ${elapsed.toFixed(0)} ms; attempt budgets ${budgets.join(', ')} ms`,
      );
    } finally {
      await edge.close();
      ordersServer.closeAllConnections();
      ordersServer.close();
    }
  });
});
