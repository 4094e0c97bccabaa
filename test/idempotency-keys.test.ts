/**
 * Across packages (`@deadline/idempotency` with `@deadline/http`, `@deadline/jobs` and `@deadline/resilience`,
 * which depend on it): the keys of an idempotent request's outgoing calls: each POST/PATCH through the http adapter carries an
 * `Idempotency-Key` derived from the inbound key and the call's order, so an attempt that takes the key over sends
 * the same ones; `retry()` resends such a call with the same key; `enqueue()` uses one as the job id.
 */
import { createServer, type IncomingMessage, type Server } from 'node:http';
import type { AddressInfo } from 'node:net';
import { setTimeout as sleep } from 'node:timers/promises';
import { currentSignal, runWithDeadline } from '@deadline/core';
import fastifyDeadline from '@deadline/fastify';
import { deadlineInterceptor, prepareHttpRequest } from '@deadline/http';
import fastifyIdempotency, { type IdempotencyStore } from '@deadline/idempotency';
import { enqueue } from '@deadline/jobs';
import { retry } from '@deadline/resilience';
import { Queue } from 'bullmq';
import Fastify from 'fastify';
import { Agent, fetch } from 'undici';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { openStore, send } from '../packages/idempotency/test/harness.js';
import { REDIS, requireService } from './support/services.js';

const available = await requireService(REDIS);

/**
 * The budget of the attempt that is cut: its calls (six downstream requests, a job) take tens of ms alone and took
 * over 400 ms with both cores busy, cutting it among them; 2 s see them all done, and it is cut in its final wait,
 * as the test means.
 */
const CUT_ATTEMPT_MS = 2_000;

/** A downstream that records the key of every request and answers 503 to the paths told to fail once. */
function downstream() {
  const seen: { method: string; path: string; key: string | undefined }[] = [];
  const failOnce = new Set<string>();
  const server: Server = createServer((req: IncomingMessage, res) => {
    const path = req.url ?? '/';
    seen.push({ method: req.method ?? '', path, key: req.headers['idempotency-key'] as string | undefined });
    req.resume();
    if (failOnce.delete(path)) {
      res.statusCode = 503;
      res.end();
      return;
    }
    res.end('{}');
  });
  return { server, seen, failOnce };
}

describe.runIf(available)('outgoing keys', () => {
  const down = downstream();
  const agent = new Agent().compose(deadlineInterceptor());
  let base: string;
  let store: IdempotencyStore;
  let end: () => Promise<void>;
  let queue: Queue;
  const apps: { close(): Promise<unknown> }[] = [];
  beforeAll(async () => {
    await new Promise<void>((resolve) => down.server.listen(0, '127.0.0.1', resolve));
    base = `http://127.0.0.1:${(down.server.address() as AddressInfo).port}`;
    ({ store, end } = await openStore('redis'));
    queue = new Queue(`idem-${process.pid}-${Date.now()}`, { connection: { url: REDIS.url } as never });
  });
  afterAll(async () => {
    await Promise.all(apps.map((app) => app.close()));
    await queue.obliterate({ force: true });
    await queue.close();
    await end();
    await agent.close();
    down.server.close();
  });

  const post = (path: string) => fetch(`${base}${path}`, { method: 'POST', body: '{}', dispatcher: agent });

  it('an attempt that takes the key over sends the same downstream keys, in a retry() and as a job id too', async () => {
    let attempts = 0;
    /** The attempts that made all their calls and got to their final wait. */
    const waited: number[] = [];
    const jobIds: (string | undefined)[] = [];
    const app = Fastify();
    await app.register(fastifyDeadline, { serviceName: 'orders', defaultMs: 5_000 });
    await app.register(fastifyIdempotency, { store });
    app.post('/orders', async () => {
      const attempt = ++attempts;
      await post('/payments');
      await fetch(`${base}/lookup`, { dispatcher: agent }); // a GET: no key
      // Resent after a 503 with the same key: the key makes the non-idempotent call safe to resend.
      down.failOnce.add('/reserve');
      const reserved = await retry(() => post('/reserve'), { idempotent: false, idempotencyKey: true, baseDelayMs: 1 });
      expect(reserved.status).toBe(200);
      jobIds.push((await enqueue(queue, 'mail', { attempt })).id);
      await fetch(`${base}/own`, {
        method: 'POST',
        body: '{}',
        headers: { 'Idempotency-Key': 'mine' },
        dispatcher: agent,
      });
      // The node:http path (axios, got) gets its key the same way.
      const prepared = prepareHttpRequest('PATCH', `${base}/patch`);
      prepared.done();
      if (attempt === 1) {
        waited.push(attempt);
        await sleep(10_000, undefined, { signal: currentSignal() });
      }
      return { attempt, patchKey: prepared.idempotencyKey };
    });
    await app.listen({ port: 0, host: '127.0.0.1' });
    apps.push(app);
    const url = `http://127.0.0.1:${(app.server.address() as AddressInfo).port}`;

    const first = await send(url, { key: 'order-1', body: {}, budgetMs: CUT_ATTEMPT_MS });
    expect(first.status).toBe(504);
    // Cut in its wait, after every call: what the downstream saw of it is complete.
    expect(waited).toEqual([1]);
    const firstCalls = down.seen.splice(0);
    const retried = await send(url, { key: 'order-1', body: {}, budgetMs: 5_000 });
    expect(retried.status).toBe(200);
    const secondCalls = down.seen.splice(0);

    expect(secondCalls).toEqual(firstCalls);
    const keyOf = (path: string) => firstCalls.filter((call) => call.path === path).map((call) => call.key);
    const [payments] = keyOf('/payments');
    const reserve = keyOf('/reserve');
    expect(payments).toMatch(/^[A-Za-z0-9_-]{43}$/);
    expect(keyOf('/lookup')).toEqual([undefined]);
    expect(reserve).toHaveLength(2);
    expect(reserve[0]).toBe(reserve[1]);
    expect(reserve[0]).not.toBe(payments);
    expect(keyOf('/own')).toEqual(['mine']);
    expect(jobIds[0]).toBe(jobIds[1]);
    expect(new Set([payments, reserve[0], jobIds[0], retried.body.patchKey]).size).toBe(4);
    expect(await queue.getJobCounts('waiting', 'active', 'delayed', 'completed')).toMatchObject({ waiting: 1 });

    // Another inbound key: other downstream keys.
    await send(url, { key: 'order-2', body: {}, budgetMs: 5_000 });
    const other = down.seen.splice(0).find((call) => call.path === '/payments');
    expect(other?.key).not.toBe(payments);
  });

  it('outside an idempotent request, an explicit key is reused across the attempts of a retry()', async () => {
    down.failOnce.add('/explicit');
    const response = await runWithDeadline(2_000, () =>
      retry(() => post('/explicit'), { idempotent: false, idempotencyKey: 'charge-42', baseDelayMs: 1 }),
    );
    expect(response.status).toBe(200);
    expect(down.seen.splice(0).map((call) => call.key)).toEqual(['charge-42', 'charge-42']);
    // Without a key, a non-idempotent call's 503 is not resent: nothing says it was not done.
    down.failOnce.add('/unkeyed');
    const unkeyed = await runWithDeadline(2_000, () =>
      retry(() => post('/unkeyed'), { idempotent: false, baseDelayMs: 1 }),
    );
    expect(unkeyed.status).toBe(503);
    expect(down.seen.splice(0).map((call) => call.key)).toEqual([undefined]);
  });
});
