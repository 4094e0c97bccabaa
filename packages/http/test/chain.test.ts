/**
 * Real multi-hop chains — fastify → express → fastify, each with its server package, calling the next hop with
 * the plain global `fetch()` through `installGlobalDispatcher` — and what a hop and its client see.
 */
import type { AddressInfo } from 'node:net';
import { deadline, deadlineErrors } from '@deadline/express';
import fastifyDeadline from '@deadline/fastify';
import express from 'express';
import Fastify, { type FastifyInstance } from 'fastify';
import { request } from 'undici';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { installGlobalDispatcher } from '../src/index.ts';
import { rawDownstream, silent } from './servers.ts';

interface HopReport {
  hop: string;
  budgetMs: number;
  /** Remaining right before this hop called the next one. */
  remainingAtCall?: number;
  /** How long that call took, from just before `remainingAtCall` was read: the budget was sent within it. */
  callMs?: number;
  next?: HopReport;
}

let uninstall: () => void;
const closers: (() => Promise<unknown>)[] = [];
beforeAll(() => {
  uninstall = installGlobalDispatcher();
});
afterAll(async () => {
  uninstall();
  for (const close of closers.reverse()) await close();
});

async function fastifyHop(name: string, next: string | undefined, route?: { maxMs: number; slowMs: number }) {
  const app: FastifyInstance = Fastify();
  await app.register(fastifyDeadline, { serviceName: name });
  app.get('/', { config: route ? { deadline: { maxMs: route.maxMs, defaultMs: route.maxMs } } : {} }, async (req) => {
    const report: HopReport = { hop: name, budgetMs: req.deadline?.budget.budgetMs as number };
    if (route) await new Promise((resolve) => setTimeout(resolve, route.slowMs)); // the slow work itself
    if (next !== undefined) {
      const calling = performance.now();
      report.remainingAtCall = req.deadline?.remainingMs() as number;
      report.next = (await (await fetch(next)).json()) as HopReport;
      report.callMs = performance.now() - calling;
    }
    return report;
  });
  const url = await app.listen({ port: 0, host: '127.0.0.1' });
  closers.push(() => app.close());
  return url;
}

async function expressHop(name: string, next: string) {
  const app = express();
  app.use(deadline({ serviceName: name }));
  app.get('/', async (req, res, fail) => {
    try {
      const report: HopReport = { hop: name, budgetMs: req.deadline?.budget.budgetMs as number };
      const calling = performance.now();
      report.remainingAtCall = req.deadline?.remainingMs() as number;
      report.next = (await (await fetch(next)).json()) as HopReport;
      report.callMs = performance.now() - calling;
      res.json(report);
    } catch (error) {
      fail(error);
    }
  });
  app.use(deadlineErrors());
  const server = app.listen(0, '127.0.0.1');
  await new Promise((resolve) => server.once('listening', resolve));
  closers.push(() => new Promise((resolve) => server.close(resolve)));
  return `http://127.0.0.1:${(server.address() as AddressInfo).port}`;
}

describe('three hops: fastify → express → fastify', () => {
  it('each hop receives what the previous one had left, within a few ms', async () => {
    const inventory = await fastifyHop('inventory', undefined);
    const orders = await expressHop('orders', inventory);
    const gateway = await fastifyHop('gateway', orders);
    const res = await request(gateway, { headers: { 'x-request-deadline': '2000' } });
    expect(res.statusCode).toBe(200);
    const report = (await res.body.json()) as HopReport;
    const ordersReport = report.next as HopReport;
    const inventoryReport = ordersReport.next as HopReport;
    expect(report.budgetMs).toBe(2000);
    // What a hop sends is its remaining time, floored; the next hop re-anchors it on arrival. It was sent during the
    // call, so it is at most the call's length below what was left as it began: a few ms on a quiet machine, and
    // however long a loaded one made the call (a fixed 50 ms broke there).
    for (const [caller, callee] of [
      [report, ordersReport],
      [ordersReport, inventoryReport],
    ] as const) {
      const left = caller.remainingAtCall as number;
      console.log(`${caller.hop} → ${callee.hop}: ${left.toFixed(1)} ms left, ${callee.budgetMs} ms received`);
      expect(callee.budgetMs).toBeLessThanOrEqual(left);
      expect(callee.budgetMs).toBeGreaterThan(left - (caller.callMs as number) - 1);
    }
    expect(inventoryReport.budgetMs).toBeLessThan(2000);
  });

  it('the hop whose deadline fired is named all the way back to the client', async () => {
    // inventory allows itself 150 ms whatever it is given, and needs a second.
    const inventory = await fastifyHop('inventory', undefined, { maxMs: 150, slowMs: 1_000 });
    const orders = await expressHop('orders', inventory);
    const gateway = await fastifyHop('gateway', orders);
    const res = await request(gateway, { headers: { 'x-request-deadline': '3000' } });
    await res.body.text();
    expect(res.statusCode).toBe(504);
    expect(res.headers['x-deadline-exceeded-by']).toBe('inventory');
  });
});

describe('the client at the edge goes away', () => {
  it('the call in flight downstream is aborted: the downstream sees its socket close', async () => {
    const stuck = await rawDownstream(silent);
    closers.push(() => stuck.close());
    const gateway = await fastifyHop('gateway', stuck.url);
    const controller = new AbortController();
    const pending = request(gateway, { signal: controller.signal }).catch((e: unknown) => e);
    const closed = stuck.nextClose();
    await stuck.arrived();
    controller.abort();
    await pending;
    await closed;
    expect(stuck.requests).toHaveLength(1);
  });

  it("through a real hop: the downstream's own request context is cancelled, as its client left", async () => {
    let cancelled: (reason: unknown) => void = () => {};
    const seen = new Promise((resolve) => {
      cancelled = resolve;
    });
    let arrived: () => void = () => {};
    const inFlight = new Promise<void>((resolve) => {
      arrived = resolve;
    });
    const inventory = Fastify();
    await inventory.register(fastifyDeadline, { serviceName: 'inventory' });
    inventory.get('/', async (req) => {
      const signal = req.deadline?.context.signal as AbortSignal;
      signal.addEventListener('abort', () => cancelled(signal.reason), { once: true });
      arrived();
      await new Promise((resolve) => signal.addEventListener('abort', resolve, { once: true }));
      return {};
    });
    const inventoryUrl = await inventory.listen({ port: 0, host: '127.0.0.1' });
    closers.push(() => inventory.close());
    const gateway = await fastifyHop('gateway', inventoryUrl);
    const controller = new AbortController();
    const pending = request(gateway, { signal: controller.signal }).catch((e: unknown) => e);
    await inFlight;
    controller.abort();
    await pending;
    const reason = await seen;
    expect(reason).toMatchObject({ name: 'CancelledError', reason: 'client-disconnected' });
  });
});
