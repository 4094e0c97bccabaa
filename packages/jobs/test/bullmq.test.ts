/**
 * BullMQ on the Redis and PostgreSQL running here: a job enqueued from a request keeps the request's trace id in
 * the worker (and in its logs), runs under its own budget (not the long-gone request's), is cancelled on the
 * database when that budget runs out, and is retried per its BullMQ options.
 */
import { Writable } from 'node:stream';
import { CancelledError, createContext, currentContext, DeadlineExceededError, traceFrom } from '@deadline/core';
import { formatTraceparent } from '@deadline/core/wire';
import fastifyDeadline from '@deadline/fastify';
import { type DeadlinePool, withDeadline } from '@deadline/pg';
import { deadlineMixin } from '@deadline/pino';
import { Job, Queue, Worker } from 'bullmq';
import Fastify from 'fastify';
import pg from 'pg';
import pino from 'pino';
import { request } from 'undici';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { POSTGRES, REDIS, requireService } from '../../../test/support/services.ts';
import { enqueue, JOB_CONTEXT_KEY, withJobContext } from '../src/index.ts';

const available = (await requireService(REDIS)) && (await requireService(POSTGRES));
const { hostname, port } = new URL(REDIS.url);
const connection = { host: hostname, port: Number(port || 6379), maxRetriesPerRequest: null };

const queues: Queue[] = [];
const workers: Worker[] = [];
let queueNumber = 0;
function newQueue(): Queue {
  const queue = new Queue(`deadline-test-${process.pid}-${++queueNumber}`, { connection });
  queues.push(queue);
  return queue;
}
function newWorker(queue: Queue, processor: (job: Job, token?: string, signal?: AbortSignal) => Promise<unknown>) {
  const worker = new Worker(queue.name, processor, { connection, concurrency: 4 });
  worker.on('error', () => {});
  workers.push(worker);
  return worker;
}

/**
 * The job's `completed` or `failed` outcome. The worker may finish a quick job before the test gets its id (the
 * request answers, `queue.add` of the next job returns), so after listening the job's stored state is read too:
 * an event already missed is found there.
 */
async function settled(worker: Worker, jobId: string, event: 'completed' | 'failed') {
  let listener!: (job: Job | undefined, resultOrError: unknown) => void;
  const fromEvent = new Promise<{ job: Job; error?: Error }>((resolve) => {
    listener = (job, resultOrError) => {
      if (job?.id !== jobId) return;
      resolve({ job, ...(event === 'failed' ? { error: resultOrError as Error } : {}) });
    };
    worker.on(event, listener);
  });
  // The job is read again once its state says it finished: the first read may predate the finish (the state is
  // read after it), and would then hold no return value or failure reason.
  const probe = await Job.fromId(worker, jobId);
  const stored = probe && (await probe.getState()) === event ? await Job.fromId(worker, jobId) : undefined;
  const outcome = stored
    ? { job: stored, ...(event === 'failed' ? { error: new Error(stored.failedReason) } : {}) }
    : await fromEvent;
  worker.off(event, listener);
  return outcome;
}

let pool: pg.Pool;
let db: DeadlinePool<pg.Pool>;
async function running(marker: string): Promise<boolean> {
  const { rows } = await pool.query(
    "SELECT count(*)::int AS n FROM pg_stat_activity WHERE state = 'active' AND query LIKE $1 AND pid <> pg_backend_pid()",
    [`%${marker}%`],
  );
  return (rows[0] as { n: number }).n > 0;
}

describe.runIf(available)('@deadline/jobs: BullMQ (Redis, PostgreSQL)', () => {
  beforeAll(() => {
    pool = new pg.Pool({ connectionString: POSTGRES.url, max: 8 });
    db = withDeadline(pool);
  });
  afterAll(async () => {
    await Promise.all(workers.map((worker) => worker.close(true)));
    for (const queue of queues) await queue.obliterate({ force: true }).catch(() => {});
    await Promise.all(queues.map((queue) => queue.close()));
    await pool?.end();
  });

  it('a job enqueued from a request is processed with the same trace id, in the worker and in its logs', async () => {
    const queue = newQueue();
    const lines: Record<string, unknown>[] = [];
    const logger = pino(
      { mixin: deadlineMixin() },
      new Writable({
        write(chunk, _encoding, done) {
          for (const line of String(chunk).split('\n')) if (line) lines.push(JSON.parse(line));
          done();
        },
      }),
    );
    const seen: { traceId?: string | undefined; data: unknown; remaining: number }[] = [];
    const worker = newWorker(
      queue,
      withJobContext(
        async (job) => {
          seen.push({
            traceId: currentContext()?.trace?.traceId,
            data: job.data,
            remaining: currentContext()?.remainingMs() ?? 0,
          });
          logger.info('sending welcome mail');
          return 'sent';
        },
        { hop: 'mail-worker' },
      ),
    );
    const app = Fastify({ forceCloseConnections: true });
    await app.register(fastifyDeadline, { serviceName: 'orders' });
    app.post('/signup', async () => {
      const job = (await enqueue(queue, 'welcome', { userId: 42 }, { budgetMs: 10_000 })) as Job;
      return { jobId: job.id };
    });
    const url = await app.listen({ port: 0, host: '127.0.0.1' });
    try {
      const trace = traceFrom();
      const response = await request(`${url}/signup`, {
        method: 'POST',
        headers: { 'x-request-deadline': '1000', traceparent: formatTraceparent(trace) },
      });
      const { jobId } = (await response.body.json()) as { jobId: string };
      await settled(worker, jobId, 'completed');
      expect(seen).toHaveLength(1);
      expect(seen[0]?.traceId).toBe(trace.traceId);
      // The processor sees exactly the data enqueued; the job's own budget, not the request's 1 s.
      expect(seen[0]?.data).toEqual({ userId: 42 });
      expect(seen[0]?.remaining).toBeGreaterThan(5_000);
      expect(lines).toContainEqual(
        expect.objectContaining({
          msg: 'sending welcome mail',
          traceId: trace.traceId,
          hop: 'mail-worker',
          queue: queue.name,
          job: 'welcome',
          jobId,
          attempt: 1,
          enqueuedBy: 'orders',
        }),
      );
      // Stored with the job: the trace, the budget, never the request's deadline.
      const stored = (await queue.getJob(jobId))?.data[JOB_CONTEXT_KEY];
      expect(stored).toEqual({
        v: 1,
        traceparent: expect.stringContaining(trace.traceId),
        budgetMs: 10_000,
        hop: 'orders',
      });
    } finally {
      await app.close();
    }
  });

  it('a job with a 300 ms budget running pg_sleep(5) is cancelled on the server and retried per its options', async () => {
    const queue = newQueue();
    const attempts: Promise<{ elapsed: number; error: unknown; marker: string }>[] = [];
    const worker = newWorker(
      queue,
      withJobContext(async (job) => {
        const marker = `deadline_job_${process.pid}_${job.id}_${job.attemptsMade}`;
        const started = performance.now();
        const query = db.query(`SELECT pg_sleep(5) /* ${marker} */`);
        // The attempt fails at its budget; the query's own rejection (after the cancel) is recorded apart.
        attempts.push(
          query.then(
            () => ({ elapsed: performance.now() - started, error: undefined, marker }),
            (error: unknown) => ({ elapsed: performance.now() - started, error, marker }),
          ),
        );
        await query;
      }),
    );
    const job = (await enqueue(
      queue,
      'report',
      { month: '2026-11' },
      {
        budgetMs: 300,
        attempts: 2,
        backoff: { type: 'fixed', delay: 50 },
      },
    )) as Job;
    const jobId = job.id as string;
    // The first failure is retried; the second is final.
    const { job: failed, error } = await new Promise<{ job: Job; error?: Error }>((resolve) => {
      worker.on('failed', (j, e) => {
        if (j?.id === jobId && j.attemptsMade >= 2) resolve({ job: j, error: e });
      });
    });
    expect(error).toBeInstanceOf(DeadlineExceededError);
    expect(failed.attemptsMade).toBe(2);
    expect(attempts).toHaveLength(2);
    for (const attempt of await Promise.all(attempts)) {
      expect(attempt.error).toBeInstanceOf(DeadlineExceededError);
      expect(attempt.elapsed).toBeGreaterThanOrEqual(280);
      expect(attempt.elapsed).toBeLessThan(2_000);
      // Cancelled on the server, not merely abandoned.
      const end = performance.now() + 5_000;
      while ((await running(attempt.marker)) && performance.now() < end) {}
      expect(await running(attempt.marker)).toBe(false);
    }
    expect((await queue.getJob(jobId))?.failedReason).toMatch(/deadline/i);
    console.log(
      `bullmq: 300 ms job budget, queries of both attempts cut after ${(await Promise.all(attempts)).map((a) => a.elapsed.toFixed(0)).join(' and ')} ms`,
    );
  });

  it('worker.cancelJob() cancels the job context: its query is cancelled on the server', async () => {
    const queue = newQueue();
    let reached!: () => void;
    const running_ = new Promise<void>((resolve) => {
      reached = resolve;
    });
    const marker = `deadline_cancel_${process.pid}`;
    const worker = newWorker(
      queue,
      withJobContext(async () => {
        const query = db.query(`SELECT pg_sleep(5) /* ${marker} */`);
        reached();
        await query;
      }),
    );
    const job = (await enqueue(queue, 'cancel-me', {})) as Job;
    const failed = settled(worker, job.id as string, 'failed');
    await running_;
    while (!(await running(marker))) {}
    worker.cancelJob(job.id as string, 'operator');
    const { error } = await failed;
    expect(error).toBeInstanceOf(CancelledError);
    const end = performance.now() + 5_000;
    while ((await running(marker)) && performance.now() < end) {}
    expect(await running(marker)).toBe(false);
  });

  it('no time left in the request: nothing is enqueued', async () => {
    const queue = newQueue();
    const ctx = createContext({ root: true, deadline: 0.5 });
    const error = await ctx.run(() => enqueue(queue, 'late', { a: 1 })).catch((e: unknown) => e);
    expect(error).toMatchObject({ phase: 'before-call' });
    expect(await queue.count()).toBe(0);
  });

  it('bad input: clear errors, nothing enqueued', async () => {
    const queue = newQueue();
    await expect(enqueue(queue, 'x', 'a string' as never)).rejects.toThrow(/plain object/);
    await expect(enqueue(queue, 'x', new Map([['a', 1]]) as never)).rejects.toThrow(/plain object/);
    await expect(enqueue(queue, 'x', { [JOB_CONTEXT_KEY]: 1 })).rejects.toThrow(/__deadline/);
    await expect(enqueue(queue, 'x', {}, { budgetMs: -5 })).rejects.toThrow(/budgetMs/);
    await expect(enqueue({} as never, 'x', {})).rejects.toThrow(/Queue/);
    expect(() => withJobContext('nope' as never)).toThrow(/processor/);
    expect(await queue.count()).toBe(0);
  });

  it('a job from outside any request (or enqueued by hand, with a broken carrier) still runs, on a new trace', async () => {
    const queue = newQueue();
    const seen: (string | undefined)[] = [];
    const worker = newWorker(
      queue,
      withJobContext(async (job) => {
        seen.push(currentContext()?.trace?.traceId);
        return job.data;
      }),
    );
    const a = (await enqueue(queue, 'plain', { n: 1 })) as Job;
    const b = await queue.add('by-hand', { n: 2, [JOB_CONTEXT_KEY]: { traceparent: 'garbage', budgetMs: 'soon' } });
    const [ra, rb] = await Promise.all([
      settled(worker, a.id as string, 'completed'),
      settled(worker, b.id as string, 'completed'),
    ]);
    expect(ra.job.returnvalue).toEqual({ n: 1 });
    expect(rb.job.returnvalue).toEqual({ n: 2 });
    expect(seen.every((id) => typeof id === 'string' && /^[0-9a-f]{32}$/.test(id))).toBe(true);
  });
});
