/**
 * Dead work under overload across a broker (`npm run bench:overload -- --broker rabbitmq`). Callers send RPC requests
 * over RabbitMQ (direct reply-to) to a queue; one consumer process handles them, one `pg_sleep(50 ms)` per message on
 * a pool of 5 connections with a prefetch of 10 (≈ 100 answers/s: the database is the bottleneck, as in the HTTP
 * chain's benchmark). Every caller has a 1 s budget and gives up when it runs out. The load arrives open-loop at 1.5×,
 * 2× and 3× the consumer's capacity (its closed-loop maximum with the library, measured first), then drops to 0.5×
 * until the service is healthy again. Twice per level, on a fresh queue and a fresh consumer each: with the library
 * (`request()` and a consumer bounded by `@deadline/amqp`, pool by `@deadline/pg`) and plain (amqplib and pg alone).
 *
 * Dead work: the share of the database's busy time spent after the request's caller had stopped waiting (its answer,
 * or its give-up), each statement timed in the consumer where the driver sends it and hears back and tagged with its
 * request, over the requests sent during the level — counted until the level and its recovery are over: a plain
 * consumer's backlog left then is dead work this figure does not count.
 */
import { type ChildProcess, spawn } from 'node:child_process';
import { randomUUID } from 'node:crypto';
import { fileURLToPath } from 'node:url';
import amqp from 'amqplib';
import pg from 'pg';
import { closedLoop, interestEnd, latency, paced, quantile, type RequestRecord } from '../overload-load.js';
import { BrokerClient } from './broker-client.js';
import type { BrokerStatement, BrokerVariant, ConsumerConfig, ConsumerMessage } from './broker-protocol.js';
import { now } from './broker-protocol.js';

export interface BrokerOverloadOptions {
  /** One short level per variant, a few seconds in all: proves it runs, measures nothing. */
  quick: boolean;
}

export interface BrokerLevelResult {
  multiplier: number;
  variant: BrokerVariant;
  /** Requests per second sent. */
  rate: number;
  sent: number;
  /** Answers in time, per second of the level. */
  goodput: number;
  /** Latency of the answered requests, p99 (ms). */
  p99Ms: number | null;
  /** Share of the statement time spent after the caller stopped waiting. */
  deadWork: number;
  /** All statement time of the level's requests (s). */
  statementSeconds: number;
  /** Messages the consumer did not handle: they arrived with no time left (library). */
  expired: number;
  /** Answers not sent: they came after their message's deadline (library). */
  lateAnswers: number;
  /** From the load's drop to 0.5× until two windows of 500 ms in a row answered 95 % in time (s); null: not within the cap. */
  recoverySeconds: number | null;
}

export interface BrokerOverloadReport {
  quick: boolean;
  skipped: string | null;
  setup: {
    rabbitmq: string;
    postgres: string;
    workMs: number;
    budgetMs: number;
    poolSize: number;
    prefetch: number;
    multipliers: number[];
    levelSeconds: number;
    recoveryCapSeconds: number | null;
  };
  /** The consumer's capacity with the library, closed loop (answers/s). */
  capacity: number;
  levels: BrokerLevelResult[];
  goals: {
    deadWork: { worst: number | null; met: boolean };
    goodputAt2x: { library: number | null; plain: number | null; ratio: number | null; met: boolean };
  };
}

const WORK_MS = 50;
const BUDGET_MS = 1_000;
const POOL_SIZE = 5;
const PREFETCH = 100;
const RECOVERY_MULTIPLIER = 0.5;
const RECOVERY_WINDOW_MS = 500;
const HEALTHY_SHARE = 0.95;
const PLANS = {
  full: { multipliers: [1.5, 2, 3], levelSeconds: 10, capacitySeconds: 5, recoveryCapSeconds: 15 },
  quick: { multipliers: [2], levelSeconds: 2, capacitySeconds: 1, recoveryCapSeconds: null },
} as const;

const AMQP_URL = process.env.AMQP_URL ?? 'amqp://guest:guest@127.0.0.1:5672';
const POSTGRES_URL = process.env.DATABASE_URL ?? process.env.PG_URL ?? 'postgres://postgres@127.0.0.1:5432/test';

const round = (x: number, digits: number) => Math.round(x * 10 ** digits) / 10 ** digits;
const message = (error: unknown) => (error instanceof Error ? error.message : String(error));

/** The consumer process of one run, on its own queue. */
class Consumer {
  readonly #child: ChildProcess;
  readonly #stderr: () => string;
  private constructor(child: ChildProcess, stderr: () => string) {
    this.#child = child;
    this.#stderr = stderr;
  }

  static async start(config: ConsumerConfig): Promise<Consumer> {
    const script = fileURLToPath(new URL('./broker-consumer.js', import.meta.url));
    const child = spawn(process.execPath, [script, JSON.stringify(config)], {
      stdio: ['ignore', 'ignore', 'pipe', 'ipc'],
    });
    let stderr = '';
    child.stderr?.on('data', (chunk: Buffer) => {
      stderr = (stderr + chunk.toString()).slice(-2_000);
    });
    const first = await new Promise<ConsumerMessage | { type: 'exit' }>((resolve) => {
      child.once('message', (m: ConsumerMessage) => resolve(m));
      child.once('exit', () => resolve({ type: 'exit' }));
    });
    if (first.type !== 'ready') {
      child.kill();
      const reason = first.type === 'failed' ? first.reason : `exited: ${stderr.trim().split('\n').at(-1) ?? ''}`;
      throw new Error(`the ${config.variant} consumer did not start: ${reason}`);
    }
    return new Consumer(child, () => stderr);
  }

  collect(): Promise<ConsumerMessage & { type: 'collected' }> {
    return new Promise((resolve, reject) => {
      if (!this.#child.connected) {
        reject(new Error(`the consumer process is gone: ${this.#stderr().trim().split('\n').slice(0, 4).join(' | ')}`));
        return;
      }
      const listener = (m: ConsumerMessage) => {
        if (m.type !== 'collected') return;
        this.#child.off('message', listener);
        resolve(m);
      };
      this.#child.on('message', listener);
      this.#child.send({ type: 'collect' });
    });
  }

  stop(): void {
    this.#child.kill();
  }
}

/** Whether RabbitMQ and PostgreSQL answer; their versions. */
async function probe(): Promise<{ rabbitmq: string; postgres: string }> {
  const connection = await amqp.connect(AMQP_URL);
  const product = connection.connection.serverProperties;
  await connection.close();
  const client = new pg.Client({ connectionString: POSTGRES_URL });
  await client.connect();
  const { rows } = await client.query<{ v: string }>('SHOW server_version');
  await client.end();
  return {
    rabbitmq: `${product.product ?? 'RabbitMQ'} ${product.version ?? ''}`.trim(),
    postgres: `PostgreSQL ${rows[0]?.v ?? '?'}`,
  };
}

let nextRid = 1;
const rid = () => nextRid++;

/** A fresh queue and consumer, a client for it; `use` runs; everything is torn down after. */
async function withRun<T>(
  variant: BrokerVariant,
  use: (client: BrokerClient, consumer: Consumer) => Promise<T>,
): Promise<T> {
  const queue = `deadline-bench-broker-${randomUUID().slice(0, 8)}`;
  const admin = await amqp.connect(AMQP_URL);
  const channel = await admin.createChannel();
  await channel.assertQueue(queue, { durable: false });
  const consumer = await Consumer.start({
    variant,
    amqpUrl: AMQP_URL,
    postgresUrl: POSTGRES_URL,
    queue,
    poolSize: POOL_SIZE,
    prefetch: PREFETCH,
    workMs: WORK_MS,
  });
  const client = await BrokerClient.open({ variant, amqpUrl: AMQP_URL, queue, budgetMs: BUDGET_MS, nextRid: rid });
  try {
    return await use(client, consumer);
  } finally {
    consumer.stop();
    await client.close().catch(() => {});
    await channel.deleteQueue(queue).catch(() => {});
    await admin.close().catch(() => {});
  }
}

/** When (epoch ms) the first of two healthy windows in a row began, from `from`, by send time; undefined: none yet. */
function recoveredAt(records: RequestRecord[], from: number, until: number): number | undefined {
  let previousHealthy = false;
  for (let start = from; start + RECOVERY_WINDOW_MS <= until; start += RECOVERY_WINDOW_MS) {
    const window = records.filter((r) => r.sentAt >= start && r.sentAt < start + RECOVERY_WINDOW_MS);
    const settled = window.filter((r) => r.outcome !== 'pending');
    const healthy =
      window.length > 0 &&
      settled.length === window.length &&
      settled.filter((r) => r.outcome === 'ok').length / window.length >= HEALTHY_SHARE;
    if (healthy && previousHealthy) return start - RECOVERY_WINDOW_MS;
    previousHealthy = healthy;
  }
  return undefined;
}

/** Statement time after each request's caller stopped waiting, and all of it (ms), for the requests of `records`. */
function deadWorkOf(records: RequestRecord[], statements: BrokerStatement[]): { dead: number; total: number } {
  const interest = new Map(records.map((r) => [r.rid, interestEnd(r)]));
  let dead = 0;
  let total = 0;
  for (const [statementRid, startedAt, endedAt] of statements) {
    const until = interest.get(statementRid);
    if (until === undefined) continue;
    total += endedAt - startedAt;
    dead += Math.max(0, endedAt - Math.max(startedAt, until));
  }
  return { dead, total };
}

async function level(
  multiplier: number,
  variant: BrokerVariant,
  capacity: number,
  plan: (typeof PLANS)[keyof typeof PLANS],
): Promise<BrokerLevelResult> {
  return withRun(variant, async (client, consumer) => {
    const rate = multiplier * capacity;
    const start = now();
    const run = await paced(rate, plan.levelSeconds, () => void client.send());
    const end = start + (run.end - run.start);
    let recoverySeconds: number | null = null;
    if (plan.recoveryCapSeconds !== null) {
      const dropAt = now();
      let recovered: number | undefined;
      await paced(
        RECOVERY_MULTIPLIER * capacity,
        plan.recoveryCapSeconds,
        () => void client.send(),
        () => (recovered = recoveredAt(client.records, dropAt, now() - BUDGET_MS)) !== undefined,
      );
      await client.settle();
      recovered ??= recoveredAt(client.records, dropAt, now());
      recoverySeconds = recovered === undefined ? null : round(Math.max(0, recovered - dropAt) / 1000, 1);
    } else {
      await client.settle();
    }
    const collected = await consumer.collect();
    const records = client.records.filter((r) => r.sentAt >= start && r.sentAt < end);
    const answered = records.filter((r) => r.outcome === 'ok');
    const { dead, total } = deadWorkOf(records, collected.statements);
    return {
      multiplier,
      variant,
      rate: round(rate, 1),
      sent: records.length,
      goodput: round(answered.length / ((end - start) / 1000), 1),
      p99Ms: answered.length === 0 ? null : round(quantile(answered.map(latency), 0.99), 0),
      deadWork: total === 0 ? 0 : round(dead / total, 4),
      statementSeconds: round(total / 1000, 1),
      expired: collected.expired,
      lateAnswers: collected.lateAnswers,
      recoverySeconds,
    };
  });
}

/** Runs the benchmark; `progress` hears what it is doing. Never throws: a run that cannot start says why. */
export async function measureBrokerOverload(
  options: BrokerOverloadOptions,
  progress: (line: string) => void = () => {},
): Promise<BrokerOverloadReport> {
  const plan = options.quick ? PLANS.quick : PLANS.full;
  const setup = {
    rabbitmq: '',
    postgres: '',
    workMs: WORK_MS,
    budgetMs: BUDGET_MS,
    poolSize: POOL_SIZE,
    prefetch: PREFETCH,
    multipliers: [...plan.multipliers],
    levelSeconds: plan.levelSeconds,
    recoveryCapSeconds: plan.recoveryCapSeconds,
  };
  const report: BrokerOverloadReport = {
    quick: options.quick,
    skipped: null,
    setup,
    capacity: 0,
    levels: [],
    goals: {
      deadWork: { worst: null, met: false },
      goodputAt2x: { library: null, plain: null, ratio: null, met: false },
    },
  };
  try {
    Object.assign(setup, await probe());
  } catch (error) {
    report.skipped = `RabbitMQ (${AMQP_URL}) or PostgreSQL (${POSTGRES_URL}) not reachable: ${message(error)}`;
    return report;
  }
  progress('capacity: closed loop with the library');
  report.capacity = await withRun('library', async (client) => {
    const run = await closedLoop(client, 4 * POOL_SIZE, plan.capacitySeconds);
    await client.settle();
    const ok = client.records.filter((r) => r.outcome === 'ok').length;
    return round(ok / ((run.end - run.start) / 1000), 1);
  });
  for (const multiplier of plan.multipliers) {
    for (const variant of ['library', 'plain'] as const) {
      progress(`${multiplier}× ${variant}`);
      report.levels.push(await level(multiplier, variant, report.capacity, plan));
    }
  }
  const library = report.levels.filter((l) => l.variant === 'library');
  const worst = library.length === 0 ? null : Math.max(...library.map((l) => l.deadWork));
  report.goals.deadWork = { worst, met: worst !== null && worst <= 0.02 };
  const at2 = (variant: BrokerVariant) =>
    report.levels.find((l) => l.multiplier === 2 && l.variant === variant)?.goodput;
  const [lib, plain] = [at2('library') ?? null, at2('plain') ?? null];
  const ratio = lib === null || plain === null ? null : plain === 0 ? Number.POSITIVE_INFINITY : round(lib / plain, 1);
  report.goals.goodputAt2x = { library: lib, plain, ratio, met: ratio !== null && ratio >= 2 };
  return report;
}

/** The report as table rows, one per level and variant. */
export function brokerOverloadRows(report: BrokerOverloadReport): Record<string, string | number>[] {
  return report.levels.map((l) => ({
    load: `${l.multiplier}× (${l.rate}/s)`,
    variant: l.variant,
    'goodput/s': l.goodput,
    'dead work': `${(l.deadWork * 100).toFixed(1)} %`,
    'p99 ms': l.p99Ms ?? '–',
    'statement s': l.statementSeconds,
    expired: l.expired,
    'late answers': l.lateAnswers,
    'recovery s':
      l.recoverySeconds ?? (report.setup.recoveryCapSeconds === null ? '–' : `> ${report.setup.recoveryCapSeconds}`),
  }));
}
