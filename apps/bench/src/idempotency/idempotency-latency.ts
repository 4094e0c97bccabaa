/**
 * What an idempotent request costs: the latency a `POST` through fastify + `@deadline/fastify` gains when
 * `@deadline/idempotency` claims its key and stores its result, in PostgreSQL and in Redis. Sequential requests
 * from this process on loopback, each with a fresh key (a first request: a claim and a completion, the common
 * case), the three variants alternated round by round so that the machine's noise falls on each alike; the added
 * latency is each variant's percentile minus the bare one's, measured in the same run.
 */
import type { AddressInfo } from 'node:net';
import fastifyDeadline from '@deadline/fastify';
import fastifyIdempotency, { type IdempotencyStore, pgStore, redisStore } from '@deadline/idempotency';
import Fastify, { type FastifyInstance } from 'fastify';
import { Redis } from 'ioredis';
import pg from 'pg';
import { Pool } from 'undici';
import { percentile, round2 } from '../shared/precision-stats.js';

export interface IdempotencyLatencyOptions {
  /** Requests per variant, split over the rounds. */
  requests: number;
  rounds: number;
  /** Requests per variant before the measured ones, not measured. Default 50; the quick run needs none. */
  warmup?: number;
}

/** One variant: latency percentiles, and what it adds to the bare variant's (ms). */
export interface IdempotencyLatencyRow {
  variant: string;
  n: number;
  p50: number | null;
  p99: number | null;
  addedP50: number | null;
  addedP99: number | null;
  skipped?: string | undefined;
}

const POSTGRES_URL = () => process.env.DATABASE_URL ?? process.env.PG_URL ?? 'postgres://postgres@127.0.0.1:5432/test';
const REDIS_URL = () => process.env.REDIS_URL ?? 'redis://127.0.0.1:6379';
const TABLE = `deadline_bench_idempotency_${process.pid}`;
/** The default of `warmup`. */
const WARMUP_REQUESTS = 50;

async function server(store: IdempotencyStore | undefined): Promise<{ app: FastifyInstance; url: string }> {
  const app = Fastify();
  await app.register(fastifyDeadline, { serviceName: 'bench', defaultMs: 5_000 });
  if (store !== undefined) await app.register(fastifyIdempotency, { store });
  app.post('/orders', async (_request, reply) => {
    reply.code(201);
    return { id: 1 };
  });
  await app.listen({ port: 0, host: '127.0.0.1' });
  return { app, url: `http://127.0.0.1:${(app.server.address() as AddressInfo).port}` };
}

export async function measureIdempotencyLatency(
  options: IdempotencyLatencyOptions,
  progress: (line: string) => void,
): Promise<IdempotencyLatencyRow[]> {
  const pool = new pg.Pool({ connectionString: POSTGRES_URL(), max: 2 });
  const redis = new Redis(REDIS_URL(), { maxRetriesPerRequest: 1, lazyConnect: true });
  const variants: { name: string; store: IdempotencyStore | undefined; skipped?: string }[] = [
    { name: 'bare (no idempotency)', store: undefined },
    { name: 'PostgreSQL store', store: pgStore(pool, { table: TABLE }) },
    { name: 'Redis store', store: redisStore(redis) },
  ];
  await pool.query('SELECT 1').catch((error: unknown) => {
    (variants[1] as { skipped?: string }).skipped = `PostgreSQL: ${(error as Error).message}`;
  });
  await redis.connect().catch((error: unknown) => {
    (variants[2] as { skipped?: string }).skipped = `Redis: ${(error as Error).message}`;
  });
  const live = variants.filter((variant) => variant.skipped === undefined);
  const servers = await Promise.all(live.map((variant) => server(variant.store)));
  const clients = servers.map(({ url }) => new Pool(url, { connections: 1 }));
  const samples = live.map(() => [] as number[]);
  let sent = 0;
  const send = async (index: number) => {
    const started = performance.now();
    const response = await (clients[index] as Pool).request({
      method: 'POST',
      path: '/orders',
      headers: { 'content-type': 'application/json', 'idempotency-key': `bench-${process.pid}-${++sent}` },
      body: '{"item":"book","qty":1}',
    });
    await response.body.text();
    if (response.statusCode !== 201) throw new Error(`answered ${response.statusCode}`);
    return performance.now() - started;
  };
  try {
    // Warm-up: connections, the table's creation, the scripts' loading, the JIT.
    const warmup = options.warmup ?? WARMUP_REQUESTS;
    for (let index = 0; index < live.length; index++) for (let i = 0; i < warmup; i++) await send(index);
    const perRound = Math.max(1, Math.ceil(options.requests / options.rounds));
    for (let round = 1; round <= options.rounds; round++) {
      progress(`idempotency latency: round ${round}/${options.rounds}`);
      for (let index = 0; index < live.length; index++) {
        for (let i = 0; i < perRound; i++) (samples[index] as number[]).push(await send(index));
      }
    }
  } finally {
    await Promise.all(clients.map((client) => client.close()));
    await Promise.all(servers.map(({ app }) => app.close()));
    await pool.query(`DROP TABLE IF EXISTS ${TABLE}`).catch(() => {});
    await pool.end();
    await redis.quit().catch(() => redis.disconnect());
  }
  const bare = samples[0] as number[];
  const bareP50 = percentile(bare, 50);
  const bareP99 = percentile(bare, 99);
  return variants.map((variant) => {
    const index = live.indexOf(variant);
    if (index < 0) {
      return {
        variant: variant.name,
        n: 0,
        p50: null,
        p99: null,
        addedP50: null,
        addedP99: null,
        skipped: variant.skipped,
      };
    }
    const mine = samples[index] as number[];
    const p50 = percentile(mine, 50);
    const p99 = percentile(mine, 99);
    return {
      variant: variant.name,
      n: mine.length,
      p50: round2(p50),
      p99: round2(p99),
      addedP50: index === 0 ? null : round2(p50 - bareP50),
      addedP99: index === 0 ? null : round2(p99 - bareP99),
    };
  });
}
