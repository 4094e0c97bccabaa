/**
 * BullMQ under `withJobContext()`/`enqueue()` when Redis drops connections: the queue's and the worker's
 * connections (its blocking one included) killed with `CLIENT KILL` on the shared server — only this test's
 * own, found by the names it gave them — while requests enqueue jobs and a worker processes them.
 *
 * What must hold: the process lives (nothing uncaught, no unhandled rejection, no ioredis "Unhandled error
 * event"); every job enqueued ends completed or failed (none lost, none stuck), a failed attempt with a clear
 * reason, retried per its `attempts`; enqueues in flight end by their deadline; and within a second of each kill
 * the worker completes jobs at half the rate it had before, or better — judged beside a twin (the same queue,
 * worker and producer, whose connections nobody kills), which the machine slows alike.
 */
import { once } from 'node:events';
import { setTimeout as delay } from 'node:timers/promises';
import { currentContext, DeadlineExceededError, runWithDeadline } from '@deadline/core';
import { type Job, Queue, Worker } from 'bullmq';
import { Redis } from 'ioredis';
import { afterAll, describe, expect, it } from 'vitest';
// The redis package's: uncaught exceptions, unhandled rejections, ioredis's "Unhandled error event" lines.
import { watchProcess } from '../../../test/support/process-watch.ts';
import { REDIS, requireService } from '../../../test/support/services.ts';
import { besideTwin, longestGap, type SteadyLoad, steadyLoad } from '../../../test/support/steady-load.ts';
import { enqueue, withJobContext } from '../src/index.ts';

const available = await requireService(REDIS);
const { hostname, port } = new URL(REDIS.url);
const prefix = `deadline-bullfaults-${process.pid}`;
/**
 * BullMQ's own connections, named so the test kills only them (a worker's blocking connection is named by BullMQ:
 * `bull:<the queue's name in base64>`). With ioredis's own reconnection backoff (50 ms, 100 ms, … up to 2 s):
 * BullMQ's default waits 1 s at least before reconnecting, a second without jobs after every drop.
 */
const connection = (role: string, retryStrategy = (attempt: number) => Math.min(attempt * 50, 2_000)) => ({
  host: hostname,
  port: Number(port || 6379),
  maxRetriesPerRequest: null,
  connectionName: `${prefix}-${role}`,
  retryStrategy,
});

const closing: (() => Promise<unknown>)[] = [];
afterAll(async () => {
  for (const close of closing.reverse()) await close().catch(() => {});
});

/** Kills the connections named `name`; resolves with what they were doing (`cmd`), one entry per connection. */
async function kill(admin: Redis, name: string): Promise<string[]> {
  const list = (await admin.client('LIST')) as string;
  const killed: string[] = [];
  for (const line of list.split('\n')) {
    if (/\bname=(\S*)/.exec(line)?.[1] !== name) continue;
    await admin.client('KILL', 'ID', /\bid=(\d+)/.exec(line)?.[1] as string);
    killed.push(/\bcmd=(\S*)/.exec(line)?.[1] ?? '');
  }
  return killed;
}

/** How many jobs the producer may be ahead of the worker. */
const BACKLOG = 400;
/** Each enqueue's deadline, as a request's. */
const ENQUEUE_BUDGET_MS = 500;
/**
 * How late past its deadline an enqueue may end and still not be waiting on the reconnect: generous, for a
 * process that a busy 2-core machine can keep off the CPU for a few hundred ms; a hang shows at any bound.
 */
const SETTLE_MARGIN_MS = 1_000;
/** The budget of the requests that enqueue while the queue's Redis is away (BullMQ reconnects after 1 s). */
const AWAY_BUDGET_MS = 200;
/** Past a plain timer's lateness, what 20 rejections take to settle: well short of the reconnect's 1 s. */
const AWAY_MARGIN_MS = 250;
/** The worker completes a job within this long of a kill (plus any stall its twin saw meanwhile)… */
const FIRST_COMPLETION_MS = 1_000;
/** …and over the second after it, at least this share of the rate expected beside its twin. */
const RECOVERED_SHARE = 0.5;

/** Waits for the worker's next completion, or `limitMs` (a worker stuck shows in the counts, not as a hang). */
async function completion(worker: Worker, limitMs: number): Promise<void> {
  const done = new AbortController();
  await Promise.race([
    once(worker, 'completed', { signal: done.signal }),
    delay(limitMs, undefined, { signal: done.signal }),
  ]).catch(() => {});
  done.abort();
}

/** Waits (on the load's own successes, not a timer) until `at` has passed. */
async function until(load: SteadyLoad, at: number): Promise<void> {
  while (performance.now() < at) await load.successes(1);
}

describe.runIf(available)('@deadline/jobs: BullMQ when Redis drops connections', () => {
  /**
   * A queue, a worker on it and a producer feeding it: requests enqueue jobs back to back, each `enqueue()` under
   * its deadline — at most BACKLOG ahead of the worker (each waits for one completion once it is): unpaced, a
   * producer with the machine to itself (Node 24 and 26) enqueued 40,000 jobs in 4 s, which the worker, at
   * ~1,300/s, had not drained in the 20 s given. Its connections are named after `role`.
   */
  async function workload(role: string) {
    const queue = new Queue(`${prefix}-${role}`, { connection: connection(`${role}-queue`) });
    // As BullMQ asks: the app listens to its errors (ioredis's, forwarded).
    const queueErrors: string[] = [];
    queue.on('error', (error) => queueErrors.push(error.message));
    closing.push(async () => {
      await queue.obliterate({ force: true });
      await queue.close();
    });
    const completedAt: number[] = [];
    const failures: { id: string | undefined; attemptsMade: number; reason: string }[] = [];
    const workerErrors: string[] = [];
    const budgets: number[] = [];
    const worker = new Worker(
      queue.name,
      withJobContext(async (job: Job<{ n: number }>, _token, signal) => {
        budgets.push(currentContext()?.remainingMs() ?? Number.NaN);
        // A few ms of work that listens to the attempt's signal.
        await delay(5, undefined, { signal });
        return job.data.n;
      }),
      // A script whose reply died with a killed connection is sent again by ioredis; when its first run had
      // already moved the next job to active for this worker (moveToFinished fetches it), the second run is
      // refused ("Missing lock") and that job waits for its lock to expire and the stalled-job check to put it
      // back: 30 s and 30 s by default, 2 s and 1 s here so that the test sees it end.
      { connection: connection(`${role}-worker`), concurrency: 8, lockDuration: 2_000, stalledInterval: 1_000 },
    );
    const stalled: string[] = [];
    worker.on('stalled', (jobId) => stalled.push(jobId));
    worker.on('error', (error) => workerErrors.push(error.message));
    worker.on('completed', () => completedAt.push(performance.now()));
    worker.on('failed', (job, error) =>
      failures.push({ id: job?.id, attemptsMade: job?.attemptsMade ?? 0, reason: error.message }),
    );
    closing.push(() => worker.close(true));
    await worker.waitUntilReady();
    let n = 0;
    const enqueued: string[] = [];
    const producer = steadyLoad(2, async () => {
      if (enqueued.length - completedAt.length > BACKLOG) await completion(worker, 1_000);
      const job = await runWithDeadline(ENQUEUE_BUDGET_MS, () =>
        enqueue(queue, 'work', { n: n++ }, { budgetMs: 2_000, attempts: 3, backoff: { type: 'fixed', delay: 20 } }),
      );
      enqueued.push(job.id as string);
    });
    /** Resolves once the worker has completed a job after `at` (waited for on its own events). */
    const completedAfter = async (at: number) => {
      while (!((completedAt.at(-1) ?? 0) >= at)) await once(worker, 'completed');
    };
    return {
      queue,
      worker,
      producer,
      completedAt,
      completedAfter,
      enqueued,
      failures,
      budgets,
      stalled,
      queueErrors,
      workerErrors,
      /** The names of its connections on the server: the queue's, the worker's and the worker's blocking one. */
      names: [
        `${prefix}-${role}-queue`,
        `${prefix}-${role}-worker`,
        `bull:${Buffer.from(queue.name).toString('base64')}`,
      ],
    };
  }

  it("the queue's and the worker's connections killed under load: no job lost or stuck, the worker back at its rate", async () => {
    const watch = watchProcess();
    const admin = new Redis(REDIS.url);
    closing.push(async () => admin.disconnect());
    const subject = await workload('killed');
    const twin = await workload('twin');
    const { queue, producer, completedAt, enqueued, failures, budgets, stalled } = subject;
    const summary: string[] = [];
    try {
      const startedAt = performance.now();
      await until(producer, startedAt + 1_000);
      const kills: { at: number; killed: string[] }[] = [];
      for (let i = 0; i < 3; i++) {
        const at = performance.now();
        const killed: string[] = [];
        for (const name of subject.names) killed.push(...(await kill(admin, name)));
        kills.push({ at, killed });
        await until(producer, at + 1_000);
        // Both workers complete jobs the second after, too: its record is whole.
        await Promise.all([subject.completedAfter(at + 1_000), twin.completedAfter(at + 1_000)]);
      }
      await Promise.all([producer.stop(), twin.producer.stop()]);
      for (const { at, killed } of kills) {
        const rates = besideTwin({
          load: completedAt,
          twin: twin.completedAt,
          before: [at - 1_000, at],
          after: [at, at + 1_000],
        });
        const first = (completedAt.find((t) => t >= at) ?? Number.POSITIVE_INFINITY) - at;
        // How long the machine kept the twin from completing anything in that time: the same holds this worker.
        const stall = longestGap(twin.completedAt, at, at + Math.min(first, 1_000));
        const line = `kill of ${killed.length} connections (${killed.join(', ')}): worker ${rates.line}, first completion ${first.toFixed(0)} ms after (the twin's longest wait meanwhile ${stall.toFixed(0)} ms); enqueue ${producer.rate(at - 1_000, at).toFixed(0)}/s before, ${producer.rate(at, at + 1_000).toFixed(0)}/s after, failed ${producer.failures(at, at + 1_000).length}`;
        summary.push(line);
        // The queue's, the worker's and the worker's blocking one.
        expect(killed, line).toHaveLength(3);
        expect(first, line).toBeLessThan(FIRST_COMPLETION_MS + stall);
        expect(rates.after, line).toBeGreaterThanOrEqual(rates.expectedAfter * RECOVERED_SHARE);
      }
      // Every enqueue that failed did so with a clear error, by its deadline.
      for (const outcome of producer.outcomes) {
        expect(outcome.endedAt - outcome.startedAt).toBeLessThan(ENQUEUE_BUDGET_MS + SETTLE_MARGIN_MS);
        if (outcome.error !== undefined) expect((outcome.error as Error).message).not.toBe('');
      }
      // None lost, none stuck: every job in the queue ends completed or failed (asked until so, or 20 s).
      const end = performance.now() + 20_000;
      let counts = await queue.getJobCounts();
      const pending = () =>
        (counts.waiting ?? 0) + (counts.active ?? 0) + (counts.delayed ?? 0) + (counts.prioritized ?? 0);
      while (pending() > 0 && performance.now() < end) counts = await queue.getJobCounts();
      // More jobs than acknowledged enqueues: an add in flight at a kill that had run on the server, its reply lost
      // with the connection, re-sent by ioredis (autoResendUnfulfilledCommands) and run again — hence `jobId`s.
      summary.push(
        `jobs: ${JSON.stringify(counts)}; enqueued (acknowledged) ${enqueued.length}; put back by the stalled-job check: ${JSON.stringify(stalled)}`,
      );
      expect(pending()).toBe(0);
      const states = await Promise.all(enqueued.map((id) => queue.getJobState(id)));
      const notDone = enqueued.filter((_, i) => states[i] !== 'completed' && states[i] !== 'failed');
      expect(notDone).toEqual([]);
      // A job that failed for good did so after its attempts, each with a reason.
      for (const failure of failures) expect(failure.reason).not.toBe('');
      const finalFailures = await queue.getFailed();
      for (const job of finalFailures) expect(job.attemptsMade).toBe(3);
      summary.push(
        `failed attempts ${failures.length} (${[...new Set(failures.map((f) => f.reason))].join('; ')}), failed for good ${finalFailures.length}`,
      );
      // Each attempt ran under the job's own budget.
      expect(budgets.every((ms) => ms > 1_500 && ms <= 2_000)).toBe(true);
    } finally {
      await Promise.all([producer.stop(), twin.producer.stop()]);
      watch.stop();
      console.log(
        `bullmq, connections killed:\n  ${summary.join('\n  ')}\n  worker 'error' events: ${JSON.stringify([...new Set(subject.workerErrors)])}; queue 'error' events: ${JSON.stringify([...new Set(subject.queueErrors)])}`,
      );
    }
    expect(watch.seen).toEqual([]);
  }, 90_000);

  it("an enqueue made while the queue's Redis is away waits within its budget, and adds nothing once it gave up", async () => {
    const admin = new Redis(REDIS.url);
    closing.push(async () => admin.disconnect());
    // BullMQ's default reconnection: a second at least, longer than these requests' budgets.
    const { retryStrategy: _ioredis, ...bullmqDefault } = connection('queue');
    const queue = new Queue(`${prefix}-away`, { connection: { ...bullmqDefault, connectionName: `${prefix}-away` } });
    queue.on('error', () => {});
    closing.push(async () => {
      await queue.obliterate({ force: true });
      await queue.close();
    });
    await queue.waitUntilReady();
    const client = (await queue.getBackend().client) as unknown as Redis;
    const reconnecting = once(client, 'reconnecting');
    expect(await kill(admin, `${prefix}-away`)).toHaveLength(1);
    await reconnecting;
    const started = performance.now();
    // A plain timer for the same 200 ms, set beside their deadlines: how late the machine let timers fire.
    const timerLate = delay(AWAY_BUDGET_MS).then(() => performance.now() - started - AWAY_BUDGET_MS);
    const outcomes = await Promise.all(
      Array.from({ length: 20 }, (_, i) =>
        runWithDeadline(AWAY_BUDGET_MS, () => enqueue(queue, 'late', { i }, { budgetMs: 1_000 })).catch(
          (e: unknown) => e,
        ),
      ),
    );
    const elapsed = performance.now() - started;
    for (const outcome of outcomes) expect(outcome).toBeInstanceOf(DeadlineExceededError);
    // At their deadline, as late as the timer was at most, and not at BullMQ's reconnect a second on.
    expect(elapsed).toBeLessThan(AWAY_BUDGET_MS + (await timerLate) + AWAY_MARGIN_MS);
    // Back, a moment later: nothing was left queued in ioredis to be added now, for requests long gone.
    if (client.status !== 'ready') await once(client, 'ready');
    expect(await queue.count()).toBe(0);
    // And the next enqueue goes through.
    await runWithDeadline(1_000, () => enqueue(queue, 'now', { i: 20 }));
    expect(await queue.count()).toBe(1);
    console.log(
      `bullmq, queue's Redis away (BullMQ's 1 s reconnect): 20 enqueues under 200 ms failed after ${elapsed.toFixed(0)} ms; jobs added later: 0`,
    );
  });
});
