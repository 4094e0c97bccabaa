/**
 * What a soak service process runs (started by service-main.ts): one hop of the demo chain, or the worker, on
 * its own pools, answering the runner's samples and its end-of-run questions.
 */
import { DEMO_BREAKER } from '@deadline/demo/breaker';
import { startGateway } from '@deadline/demo-gateway';
import { startInventory } from '@deadline/demo-inventory';
import { startOrders } from '@deadline/demo-orders';
import { background, drain, withJobContext } from '@deadline/jobs';
import { deadlineMixin, logCalls } from '@deadline/pino';
import { Queue, Worker } from 'bullmq';
import { Redis } from 'ioredis';
import { createPool as createMysqlPool, type Pool as MysqlPool } from 'mysql2/promise';
import pg from 'pg';
import pino from 'pino';
import { liveAbortListeners } from './abort-listeners.js';
import { mysqlPoolSettings, pgPoolSettings } from './pool-settings.js';
import { sampleProcess } from './process-probe.js';
import type { FinishReport, PoolReport, RunnerMessage, ServiceMessage, SoakServiceConfig } from './soak-protocol.js';

const send = (message: ServiceMessage) => process.send?.(message);

/** Ids waiting to be sent to the runner (sent every 250 ms, then forgotten here). */
const added: string[] = [];
const processed: string[] = [];

export async function runService(config: SoakServiceConfig, unhandled: string[]): Promise<void> {
  const logger = pino(
    { mixin: deadlineMixin(), level: 'info' },
    pino.destination({ dest: config.logFile ?? '/dev/null', sync: false }),
  );
  logCalls(logger);
  background.logger = logger;
  const redisOptions = redisConnection(config.redisUrl);
  const pool =
    config.service === 'orders' || config.service === 'inventory'
      ? new pg.Pool({ connectionString: config.postgresUrl, max: config.poolSize, connectionTimeoutMillis: 10_000 })
      : undefined;
  // A restart of the server ends idle connections: the pool drops them and says so; nothing else to do.
  pool?.on('error', () => {});
  const mariadb =
    config.service === 'inventory'
      ? createMysqlPool({ uri: config.mysqlUrl, connectionLimit: config.poolSize })
      : undefined;
  const finishers: (() => Promise<Partial<FinishReport>>)[] = [];
  if (pool !== undefined) finishers.push(async () => ({ pools: [await pgReport(pool)] }));
  if (mariadb !== undefined) finishers.push(async () => ({ pools: [await mysqlReport(mariadb)] }));

  let url: string | undefined;
  if (config.service === 'inventory') {
    url = (await startInventory({ pool, mariadb, logger, keepReports: false })).url;
  } else if (config.service === 'orders') {
    const redis = new Redis(config.redisUrl, { maxRetriesPerRequest: 1 });
    redis.on('error', () => {});
    const queue = new AddCountingQueue(config.queueName, { connection: redisOptions });
    queue.on('error', () => {});
    url = (
      await startOrders({
        inventoryUrl: config.upstreamUrl ?? '',
        pool: pool as pg.Pool,
        logger,
        redis,
        queue,
        breaker: DEMO_BREAKER,
      })
    ).url;
    // First: the detached tasks use the pool, which is judged idle after them.
    finishers.unshift(async () => ({ drain: await drain({ timeoutMs: 15_000 }) }));
  } else if (config.service === 'gateway') {
    url = (await startGateway({ ordersUrl: config.upstreamUrl ?? '', logger })).url;
  } else {
    const worker = new Worker(
      config.queueName,
      withJobContext(
        async (job: { id?: string | undefined; data: unknown }) => {
          processed.push(String(job.id));
          return null;
        },
        { hop: 'orders-worker' },
      ),
      { connection: redisOptions },
    );
    worker.on('error', () => {});
  }

  setInterval(flushJobs, 250).unref();
  process.on('message', async (message: RunnerMessage) => {
    if (message.type === 'sample') {
      const sample = sampleProcess();
      send({ type: 'sample', seq: message.seq, sample, abort: liveAbortListeners(), unhandled: [...unhandled] });
    } else if (message.type === 'mysql-threads') {
      send({ type: 'mysql-threads', seq: message.seq, ids: mysqlThreads(mariadb) });
    } else if (message.type === 'finish') {
      const report: FinishReport = { pools: [] };
      for (const finish of finishers) {
        const part = await finish();
        if (part.drain !== undefined) report.drain = part.drain;
        report.pools.push(...(part.pools ?? []));
      }
      flushJobs();
      send({ type: 'finished', seq: message.seq, report });
    }
  });
  send({ type: 'ready', url });
}

function flushJobs(): void {
  if (added.length === 0 && processed.length === 0) return;
  send({ type: 'jobs', added: added.splice(0), processed: processed.splice(0) });
}

/** orders' queue, telling the runner each job Redis acknowledged: the jobs that must not be lost. */
class AddCountingQueue extends Queue {
  override async add(...args: Parameters<Queue['add']>): ReturnType<Queue['add']> {
    const job = await super.add(...args);
    if (job.id !== undefined) added.push(job.id);
    return job;
  }
}

function redisConnection(url: string) {
  const { hostname, port } = new URL(url);
  return { host: hostname, port: Number(port || 6379), maxRetriesPerRequest: null };
}

/** Waits (up to 10 s) for a pool to have nothing checked out and nobody waiting. */
async function settled(state: () => { total: number; idle: number; waiting: number }): Promise<void> {
  const until = performance.now() + 10_000;
  while (performance.now() < until) {
    const { total, idle, waiting } = state();
    if (total === idle && waiting === 0) return;
    await new Promise((resolve) => setTimeout(resolve, 50));
  }
}

async function pgReport(pool: pg.Pool): Promise<PoolReport> {
  const state = () => ({ total: pool.totalCount, idle: pool.idleCount, waiting: pool.waitingCount });
  await settled(state);
  const counts = state();
  return { name: 'postgres', ...counts, settings: await pgPoolSettings(pool) };
}

/** mysql2 publishes no counts: the lengths of its lists. */
function mysqlLists(pool: MysqlPool) {
  const inner = (pool as unknown as { pool: Record<string, { length: number }> }).pool;
  return {
    total: inner._allConnections?.length ?? 0,
    idle: inner._freeConnections?.length ?? 0,
    waiting: inner._connectionQueue?.length ?? 0,
  };
}

async function mysqlReport(pool: MysqlPool): Promise<PoolReport> {
  await settled(() => mysqlLists(pool));
  const counts = mysqlLists(pool);
  return { name: 'mariadb', ...counts, settings: await mysqlPoolSettings(pool) };
}

/** The server's thread ids of the pool's connections (what `KILL CONNECTION` takes). */
function mysqlThreads(pool: MysqlPool | undefined): number[] {
  if (pool === undefined) return [];
  const all = (pool as unknown as { pool: { _allConnections?: { toArray?(): unknown[] } & Iterable<unknown> } }).pool
    ._allConnections;
  const list = (all?.toArray?.() ?? [...(all ?? [])]) as { threadId?: number | null }[];
  return list.map((c) => c.threadId).filter((id): id is number => typeof id === 'number');
}
