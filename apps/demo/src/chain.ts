/**
 * The three-hop chain, in this process, each a real HTTP server on a loopback port: gateway (fastify) → orders
 * (express) → inventory (fastify). Every hop logs through one pino logger whose lines the demo keeps, to draw a
 * trace's waterfall from them afterwards.
 */
import { Writable } from 'node:stream';
import { currentContext } from '@deadline/core';
import { startGateway } from '@deadline/demo-gateway';
import { type InventoryReport, startInventory } from '@deadline/demo-inventory';
import { startOrders } from '@deadline/demo-orders';
import { background, withJobContext } from '@deadline/jobs';
import { deadlineMixin, logCalls } from '@deadline/pino';
import { Queue, Worker } from 'bullmq';
import { Redis } from 'ioredis';
import pino from 'pino';
import { DEMO_BREAKER } from './breaker.js';
import type { Environment } from './environment.js';

export interface Chain {
  gatewayUrl: string;
  ordersUrl: string;
  inventoryUrl: string;
  /** What inventory saw, per request. */
  inventory: InventoryReport[];
  /** Every log line of every hop, parsed. */
  lines: Record<string, unknown>[];
  /** Closes orders' breakers: a slow inventory in one scenario must not leave the next one's circuit open. */
  resetBreakers(): void;
  /** Jobs the worker processed: the trace id each ran under. */
  jobs: { traceId: string | undefined }[];
  close(): Promise<void>;
}

export { DEMO_BREAKER } from './breaker.js';

export async function startChain(env: Environment): Promise<Chain> {
  const lines: Record<string, unknown>[] = [];
  const sink = new Writable({
    write(chunk, _encoding, done) {
      for (const line of String(chunk).split('\n')) {
        if (line.length > 0) lines.push(JSON.parse(line) as Record<string, unknown>);
      }
      done();
    },
  });
  const logger = pino({ mixin: deadlineMixin(), level: 'info' }, sink);
  const stopLogging = logCalls(logger);
  // Detached tasks report on the same logger, so their lines join the trace they came from.
  background.logger = logger;
  const redis = env.redisUrl === undefined ? undefined : new Redis(env.redisUrl, { maxRetriesPerRequest: 1 });
  const connection = env.redisUrl === undefined ? undefined : redisConnection(env.redisUrl);
  const queue = connection === undefined ? undefined : new Queue(`deadline-demo-${process.pid}`, { connection });
  const jobs: { traceId: string | undefined }[] = [];
  const worker =
    queue === undefined || connection === undefined
      ? undefined
      : new Worker(
          queue.name,
          withJobContext(
            async (job) => {
              jobs.push({ traceId: currentContext()?.trace?.traceId });
              return job.data;
            },
            { hop: 'orders-worker' },
          ),
          { connection },
        );
  worker?.on('error', () => {});

  const inventory = await startInventory({ pool: env.pool, logger });
  const orders = await startOrders({
    inventoryUrl: inventory.url,
    pool: env.pool,
    logger,
    redis,
    queue,
    breaker: DEMO_BREAKER,
  });
  const gateway = await startGateway({ ordersUrl: orders.url, logger });
  return {
    gatewayUrl: gateway.url,
    ordersUrl: orders.url,
    inventoryUrl: inventory.url,
    inventory: inventory.reports,
    lines,
    jobs,
    resetBreakers: () => orders.resetBreakers(),
    async close() {
      await gateway.close();
      await orders.close();
      await inventory.close();
      await worker?.close(true);
      await queue?.obliterate({ force: true }).catch(() => {});
      await queue?.close();
      redis?.disconnect();
      stopLogging();
    },
  };
}

function redisConnection(url: string) {
  const { hostname, port, password } = new URL(url);
  return { host: hostname, port: Number(port || 6379), password: password || undefined, maxRetriesPerRequest: null };
}
