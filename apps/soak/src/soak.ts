/**
 * The soak: the demo chain (gateway → orders → inventory, a BullMQ worker beside them) in four processes, on a
 * PostgreSQL and a Redis of its own (so restarting them disturbs nothing else) and the machine's MariaDB, under
 * the mixed open-loop load of soak-load.ts, while fault-schedule.ts's faults are done to it. What it returns is
 * everything verdict.ts judges and the timeline chart draws.
 */
import { startEmbeddedPostgres } from '@deadline/demo/embedded-postgres';
import { Queue } from 'bullmq';
import { createConnection } from 'mysql2/promise';
import pg from 'pg';
import { FaultProxy } from './fault-proxy.js';
import { type FaultKind, faultPlan } from './fault-schedule.js';
import type { ProcessSample } from './process-probe.js';
import { startPrivateRedis } from './redis-server.js';
import { ServiceProcess } from './service-process.js';
import { type ChargeKey, SoakLoad, type SoakRecord } from './soak-load.js';
import type { FinishReport, SoakServiceName } from './soak-protocol.js';

export interface SoakOptions {
  /** How long the load runs (ms). */
  durationMs: number;
  /** Requests per second; default: `capacityShare` of the capacity measured first. */
  rate?: number | undefined;
  /** Default 0.7. */
  capacityShare?: number;
  /** inventory's query time (ms). Default 30. */
  workMs?: number;
  /** A budget that fits (ms). Default 1 000. */
  enoughMs?: number;
  /** Connections per database pool. Default 10. */
  poolSize?: number;
  /**
   * How often each process is sampled (ms). Default 5 s: each sample is two full collections in every service,
   * which stop the chain for a moment; growth is judged over minute-long windows, and a run under four minutes
   * judges none, so sampling faster would only move its goodput.
   */
  sampleEveryMs?: number;
  mysqlUrl?: string;
  /** Where the services' logs go (one file each); default nowhere. */
  logDir?: string | undefined;
  /** Progress lines. */
  progress?: (line: string) => void;
}

/** A fault as it happened (ms on the run's clock: 0 is the start of the load). */
export interface FaultRecord {
  kind: FaultKind;
  startedAt: number;
  /**
   * When what broke was back: a restarted server once it said it accepts connections again (its own "ready to
   * accept connections" line), the KILLs once done, the paused process once continued, the link once restored.
   */
  clearedAt: number;
  detail: string;
}

/** One process's sample, with its abort listeners. */
export interface ServiceSample extends ProcessSample {
  abortListeners: number;
}

export interface SoakResult {
  durationMs: number;
  rate: number;
  /** The capacity measured first (answers in time per second), or undefined when a rate was given. */
  capacity: number | undefined;
  /** Every request (times: ms from the start of the load). */
  records: SoakRecord[];
  charges: ChargeKey[];
  faults: FaultRecord[];
  /** Per service, its samples in order (at: ms from the start of the load). */
  samples: Record<SoakServiceName, ServiceSample[]>;
  finish: { orders: FinishReport; inventory: FinishReport };
  /** Per service, the unhandled rejections and uncaught exceptions of the whole run, drain included. */
  unhandled: Record<SoakServiceName, string[]>;
  jobs: {
    /** Ids Redis acknowledged adding. */
    added: string[];
    /** How many times the worker ran each id. */
    processed: Record<string, number>;
    /** Ids still in the queue at the end (waiting, delayed, active). */
    queued: string[];
  };
  /** Rows of the charges table per order (= per idempotency key), for the orders that have any. */
  chargeRows: Record<number, number>;
  /** The breaker's cooldown (ms): what a recovery may take more where it opened. */
  breakerCooldownMs: number;
}

const SERVICES: SoakServiceName[] = ['gateway', 'orders', 'inventory', 'worker'];

/**
 * Runs a soak and returns what happened; throws if its setup fails (a server that does not start, MariaDB not
 * reachable), with the reason in one line.
 *
 * @example
 * ```ts
 * const result = await runSoak({ durationMs: 600_000, progress: console.log });
 * const verdict = judge(result);
 * ```
 */
export async function runSoak(options: SoakOptions): Promise<SoakResult> {
  const say = options.progress ?? (() => {});
  const workMs = options.workMs ?? 30;
  const enoughMs = options.enoughMs ?? 1_000;
  const poolSize = options.poolSize ?? 10;
  const sampleEveryMs = options.sampleEveryMs ?? 5_000;
  const mysqlUrl = options.mysqlUrl ?? process.env.MYSQL_URL ?? 'mysql://root@127.0.0.1:3306/test';
  const cleanup: (() => Promise<unknown>)[] = [];
  try {
    say('starting a private PostgreSQL and Redis');
    const [postgres, redis] = await Promise.all([startEmbeddedPostgres(), startPrivateRedis()]);
    cleanup.push(
      () => postgres.stop(),
      () => redis.stop(),
    );
    const killer = await createConnection({ uri: mysqlUrl }).catch((error: Error) => {
      throw new Error(`no MariaDB/MySQL at ${mysqlUrl} (${error.message}); start it or set MYSQL_URL`);
    });
    cleanup.push(() => killer.end());
    const queueName = `deadline-soak-${process.pid}`;
    const added: string[] = [];
    const processed: Record<string, number> = {};
    const onJobs = (newlyAdded: string[], newlyProcessed: string[]) => {
      added.push(...newlyAdded);
      for (const id of newlyProcessed) processed[id] = (processed[id] ?? 0) + 1;
    };
    const base = { postgresUrl: postgres.url, mysqlUrl, redisUrl: redis.url, queueName, poolSize };
    const logFile = (service: string) =>
      options.logDir === undefined ? undefined : `${options.logDir}/${service}.log`;
    const services = {} as Record<SoakServiceName, ServiceProcess>;
    cleanup.push(() => Promise.all(Object.values(services).map((s) => s.close())));
    say('starting inventory, orders, gateway and the worker');
    services.inventory = await ServiceProcess.start({ ...base, service: 'inventory', logFile: logFile('inventory') });
    const inventoryPort = Number(new URL(services.inventory.url as string).port);
    const link = await FaultProxy.start({ host: '127.0.0.1', port: inventoryPort });
    cleanup.push(() => link.close());
    services.orders = await ServiceProcess.start(
      { ...base, service: 'orders', upstreamUrl: `http://127.0.0.1:${link.port}`, logFile: logFile('orders') },
      onJobs,
    );
    services.gateway = await ServiceProcess.start({
      ...base,
      service: 'gateway',
      upstreamUrl: services.orders.url,
      logFile: logFile('gateway'),
    });
    services.worker = await ServiceProcess.start({ ...base, service: 'worker', logFile: logFile('worker') }, onJobs);

    const loadOptions = {
      gatewayUrl: services.gateway.url as string,
      ordersUrl: services.orders.url as string,
      workMs,
      enoughMs,
      runId: `${process.pid}-${Date.now()}`,
    };
    let capacity: number | undefined;
    let rate = options.rate;
    if (rate === undefined) {
      say('measuring the chain’s capacity (10 s, 32 clients)');
      const probe = new SoakLoad(loadOptions);
      capacity = await probe.capacity(32, 10);
      await probe.close();
      rate = Math.max(1, Math.round((options.capacityShare ?? 0.7) * capacity));
      say(`capacity ${capacity.toFixed(0)} answers/s; the load: ${rate} requests/s`);
    }

    // A warm-up at the load's rate, not recorded: the code warm, the pools grown to what the load needs, and the
    // capacity probe's extra connections idled out — the first minute is then the service as it runs.
    const warmUpMs = Math.min(20_000, options.durationMs / 10);
    say(`warming up: ${rate} requests/s for ${warmUpMs / 1000} s`);
    const warmUp = new SoakLoad({ ...loadOptions, runId: `${loadOptions.runId}-warm-up`, firstOrder: 1_000_000_000 });
    await warmUp.run(rate, warmUpMs / 1000);
    await warmUp.settle();
    await warmUp.close();

    const load = new SoakLoad(loadOptions);
    cleanup.push(() => load.close());
    const samples = Object.fromEntries(SERVICES.map((s) => [s, [] as ServiceSample[]])) as SoakResult['samples'];
    const faults: FaultRecord[] = [];
    const start = performance.now();
    const clock = () => performance.now() - start;
    let sampling = true;
    const sampler = (async () => {
      for (let next = 0; sampling; next += sampleEveryMs) {
        await sleep(Math.max(0, next - clock()));
        if (!sampling) break;
        await Promise.all(
          SERVICES.map(async (name) => {
            const reply = await services[name].sample();
            samples[name].push({
              ...reply.sample,
              at: clock(),
              abortListeners: reply.abort.listeners,
            });
          }),
        );
      }
    })();
    const breakThings = (async () => {
      for (const planned of faultPlan(options.durationMs)) {
        await sleep(Math.max(0, planned.at - clock()));
        const startedAt = clock();
        let detail = '';
        if (planned.kind === 'postgres-restart') {
          await postgres.restart();
          detail = 'PostgreSQL stopped (fast shutdown) and started again';
        } else if (planned.kind === 'redis-restart') {
          await redis.restart();
          detail = 'Redis stopped (SIGTERM) and started again on its append-only file';
        } else if (planned.kind === 'mariadb-kill') {
          const ids = await services.inventory.mysqlThreads();
          for (const id of ids) await killer.query(`KILL CONNECTION ${Number(id)}`).catch(() => {});
          detail = `KILL CONNECTION of inventory's ${ids.length} MariaDB connections`;
        } else if (planned.kind === 'hop-paused') {
          services.inventory.pause();
          await sleep(planned.holdMs);
          services.inventory.resume();
          detail = `inventory stopped (SIGSTOP) for ${planned.holdMs / 1000} s, then continued`;
        } else {
          link.set({ kind: 'drip', bytes: 64, everyMs: 100 });
          await sleep(planned.holdMs);
          link.set({ kind: 'none' });
          detail = `orders → inventory at 64 bytes per 100 ms for ${planned.holdMs / 1000} s`;
        }
        faults.push({ kind: planned.kind, startedAt, clearedAt: clock(), detail });
        say(`${(startedAt / 1000).toFixed(1)} s: ${detail} (cleared at ${(clock() / 1000).toFixed(1)} s)`);
      }
    })();
    // Awaited once the load is done; a rejection before then (a service gone) is not unhandled meanwhile.
    sampler.catch(() => {});
    breakThings.catch(() => {});
    say(`load: ${rate} requests/s for ${options.durationMs / 1000} s`);
    await load.run(rate, options.durationMs / 1000);
    await breakThings;
    await load.settle();
    sampling = false;
    await sampler;
    say('load done; draining');

    const [orders, inventory] = await Promise.all([services.orders.finish(), services.inventory.finish()]);
    const queued = await settledQueue(queueName, redis.url);
    // The worker's last batch of processed ids.
    await services.worker.finish();
    // What went unhandled up to the very end (the drain included), from each process once more.
    const unhandled = Object.fromEntries(
      await Promise.all(SERVICES.map(async (name) => [name, (await services[name].sample()).unhandled] as const)),
    ) as SoakResult['unhandled'];
    const chargeRows = await countCharges(postgres.url);
    for (const record of load.records) {
      record.sentAt -= start;
      record.doneAt -= start;
    }
    return {
      durationMs: options.durationMs,
      rate,
      capacity,
      records: load.records,
      charges: load.charges,
      faults,
      samples,
      finish: { orders, inventory },
      unhandled,
      jobs: { added, processed, queued },
      chargeRows,
      breakerCooldownMs: 1_000,
    };
  } finally {
    for (const step of cleanup.reverse()) await step().catch(() => {});
  }
}

const sleep = (ms: number) => new Promise((resolve) => setTimeout(resolve, ms));

/** Waits (30 s at most) for the worker to empty the queue; the ids still in it. */
async function settledQueue(name: string, url: string): Promise<string[]> {
  const { hostname, port } = new URL(url);
  const queue = new Queue(name, { connection: { host: hostname, port: Number(port), maxRetriesPerRequest: null } });
  try {
    const until = performance.now() + 30_000;
    const states = ['waiting', 'active', 'delayed', 'prioritized', 'waiting-children'] as const;
    for (;;) {
      const counts = await queue.getJobCounts(...states);
      const left = Object.values(counts).reduce((a, b) => a + b, 0);
      if (left === 0 || performance.now() > until) break;
      await sleep(100);
    }
    const jobs = await queue.getJobs([...states]);
    return jobs.map((job) => String(job?.id));
  } finally {
    await queue.close();
  }
}

/** How many charge rows each order has (orders with one or more). */
async function countCharges(url: string): Promise<Record<number, number>> {
  const client = new pg.Client({ connectionString: url });
  await client.connect();
  try {
    const { rows } = await client.query<{ order_id: number; n: string }>(
      'SELECT order_id, count(*) AS n FROM deadline_demo_charges GROUP BY order_id',
    );
    return Object.fromEntries(rows.map((r) => [r.order_id, Number(r.n)]));
  } finally {
    await client.end();
  }
}
