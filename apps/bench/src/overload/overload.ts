/**
 * Dead work under overload. The demo's three-hop chain — gateway (fastify) → orders (express) → inventory
 * (fastify), three processes, whose stock query holds one of 5 pooled Postgres connections for `pg_sleep(50 ms)`
 * — is driven by clients with a 1 s budget, arriving open-loop at 0.5×, 1×, 1.5×, 2× and 3× the chain's capacity
 * (its closed-loop maximum with the library, measured first). Twice, level by level alternately: with the
 * library, and with the same services on fixed per-hop timeouts only (gateway 5 s, orders 4 s, plain pg: nothing
 * cancelled on the database). Per level: goodput (answers in time, per second), p99 latency, the share of the
 * database's busy time spent on requests whose client had stopped waiting ("dead work"), and how long the chain
 * takes to be back to its 0.5× self once the load drops to 0.5×.
 *
 * Why 50 ms on 5 connections: a slow-but-ordinary OLTP query, on a pool small enough that the database is the
 * bottleneck (5 ÷ 50 ms ≈ 100 answers/s) rather than the Node hops. Those cost 3–4 ms of CPU per request together
 * on a small VM once give-ups make every hop open a new connection per request, and every request crosses them
 * whether it is answered or not: 3× a pool of 10 (≈ 600 req/s) would need more than the two cores that Postgres
 * and the load generator share too, and 3× would measure the CPU, not the database. The 1 s budget is 20 times
 * the work: it is waiting, not working, that overruns it.
 *
 * How dead work is measured: every statement is timed where the driver sends it and hears back, in the service
 * processes (overload-chain.ts), and tagged with its request's id (the order id the client chose); the client
 * records when it stopped waiting (its answer, or its give-up at 1 s). Dead work = statement time after that ÷
 * all statement time, over the level's window, on one clock (the processes' clocks are mapped onto the runner's).
 *
 * With `stockDatabase: 'mariadb'` (`npm run bench:overload -- --database mariadb`) inventory's stock query runs on
 * MariaDB through mysql2 instead — `SLEEP(0.05)` on a pool of 5, `@deadline/mysql` against plain mysql2 (nothing
 * killed) — and orders still reads Postgres.
 *
 * With `bottleneck: 'cpu'` (`npm run bench:overload -- --bottleneck cpu`) the chain is CPU-bound instead: each hop's
 * handler first spends a fixed `CPU_MS_PER_HOP` ms of CPU on the request (JSON and SHA-256 rounds until the process
 * has used that much CPU time, cpu-work.ts), inventory's statement reads its row at once
 * (no `pg_sleep`) and the pools (30 connections each, closed after 1 s idle) never bind: each hop's event loop is the bottleneck. Four
 * variants, level by level alternately — fixed timeouts (`baseline`), the library, the library with
 * `@fastify/under-pressure` on its two fastify hops as its README registers it (overload-chain.ts; orders is express,
 * which it does not serve), and the library with `admission: true` on every hop — at 0.5×, 0.8×, 1×, 1.5×, 2× and 3×
 * the library's closed-loop capacity, with a mix of client budgets (`BUDGET_MIX`: 70 % 1 s, 20 % 500 ms, 10 %
 * 250 ms, by request id, the same requests in every variant). Per level beside the above: the share refused (a 503
 * or 504 answered at arrival, before any handler ran: the gateway's handler never saw the request), the p99 of the
 * answered requests, and dead work counted as CPU, the handlers' and the databases' together: each handler's CPU
 * (its `process.cpuUsage()`, tagged with its request's id and shipped like the statements) spent after its client had
 * stopped waiting, plus the databases' CPU over the level (from /proc) shared evenly among the statements sent in its
 * window, those sent after their client had stopped waiting dead, ÷ all of both. (A statement's time as the driver
 * sees it is no measure of the database's work here: under a busy event loop it is mostly the wait for the loop to
 * read the answer.) Beside it, `missedWork`: the same CPU spent on requests that got no 2xx in time, whenever.
 */
import { readdirSync, readFileSync } from 'node:fs';
import { cpus, loadavg } from 'node:os';
import { createConnection, type RowDataPacket } from 'mysql2/promise';
import pg from 'pg';
import {
  BudgetedClient,
  closedLoop,
  interestEnd,
  latency,
  type PacedRun,
  paced,
  quantile,
  type RequestRecord,
} from './overload-load.js';
import {
  type Bottleneck,
  type ChainVariant,
  type HandlerRecord,
  type ServiceName,
  STATEMENT_KINDS,
  type StockDatabase,
} from './overload-protocol.js';
import { allowedCpus, ChainProcess, type Collected, type TimedStatement } from './overload-spawn.js';

export interface OverloadOptions {
  /** One short level per variant, a few seconds in all: proves it runs, measures nothing. */
  quick: boolean;
  /**
   * Where inventory's stock query runs: Postgres (`pg_sleep`, `@deadline/pg`) or MariaDB through mysql2 (`SLEEP`,
   * `@deadline/mysql`). Default `'postgres'`. orders reads Postgres either way.
   */
  stockDatabase?: StockDatabase | undefined;
  /** What limits the chain: inventory's pool (default, `pg_sleep`), or each hop's CPU (`'cpu'`). */
  bottleneck?: Bottleneck | undefined;
  /**
   * The variants to run, in this order each level; must include `'library'` (the capacity is its). Default: library
   * and baseline on the pool-bound chain; all four on the CPU-bound one.
   */
  variants?: ChainVariant[] | undefined;
  /**
   * Shorter levels (4 s) and recovery cap (10 s), for `npm run bench`: the pool-bound chain's four variants in about
   * the time two take at full length (0.8×, where admission's false sheds are counted, is the CPU-bound run's). Not
   * with `quick`.
   */
  compact?: boolean | undefined;
}

/** What was run: everything a reader needs to reproduce it (no machine-specific figure is assumed). */
export interface OverloadSetup {
  /** `PostgreSQL <version> at <host:port>`. */
  postgres: string;
  /** Where inventory's stock query runs. */
  stockDatabase: StockDatabase;
  /** `MariaDB <version> at <host:port>`, when the stock query runs there. */
  mariadb: string | null;
  /** What limits the chain: inventory's pool (`pg_sleep`) or each hop's CPU. */
  bottleneck: Bottleneck;
  /** The variants run, in the order run at each level. */
  variants: ChainVariant[];
  /** Each stock query's length: `pg_sleep(workMs / 1000)`, or `SLEEP(workMs / 1000)` on MariaDB; 0: a one-row read. */
  workMs: number;
  /** CPU each hop's handler spends per request (ms), aimed at; null on the pool-bound chain. */
  cpuMsPerHop: number | null;
  /** The longest client budget (sent as `X-Request-Deadline`, and when it abandons the request). */
  budgetMs: number;
  /** The clients' budgets and their shares, by request id; one budget of `budgetMs` on the pool-bound chain. */
  budgetMix: { ms: number; share: number }[];
  /** inventory's pool (the bottleneck). */
  poolSize: number;
  /** orders' pool (one short read per request). */
  ordersPoolSize: number;
  /** The baseline's per-hop timeouts. */
  fixedTimeoutsMs: { gateway: number; orders: number };
  /** Load levels, as multiples of the measured capacity, in the order run. */
  multipliers: number[];
  /** How long each level lasts (it sends rate × seconds requests, then stops). */
  levelSeconds: number;
  /** After each level above 0.5×, the load drops to this multiple until recovered or `recoveryCapSeconds`. */
  recoveryMultiplier: number;
  /** null: no recovery phase (quick). */
  recoveryCapSeconds: number | null;
  /** Recovery is judged on windows of this many ms (by send time); two healthy ones in a row. */
  recoveryWindowMs: number;
  capacityConcurrency: number;
  capacitySeconds: number;
  /** The three services run as three processes on these CPUs; the runner (the load generator) on these. */
  cpusAllowed: { services: string; runner: string };
  cpus: number;
  /** Load average (1 min) when the run began: a shared machine's other tenants show here. */
  loadAverageAtStart: number;
}

/** Closed-loop maximum of one chain. */
export interface CapacityResult {
  concurrency: number;
  seconds: number;
  sent: number;
  /** 2xx answers within the budget that completed in the window. */
  ok: number;
  okPerSecond: number;
  p50Ms: number;
  p99Ms: number;
}

/** The database side of a time window: statements clipped to it. */
export interface DatabaseWindow {
  /** Statements that ran (in part) in the window. */
  statements: number;
  /** Sum of statement time in the window (connection-ms). */
  busyMs: number;
  /** Of which after the statement's request's client had stopped waiting (gave up, or had its answer). */
  deadMs: number;
  /** deadMs ÷ busyMs; null when the database did nothing. */
  deadWork: number | null;
  /** inventory's statements ÷ the window: how many of its pool's connections were running one, on average. */
  inventoryBusyConnections: number;
  /**
   * busyMs and deadMs by pool and statement (`inventory stock`, `orders order`, `inventory set`, `… reset`): the
   * requests' own statements and the library's SET/RESET statement_timeout around them.
   */
  byKind: Record<string, { busyMs: number; deadMs: number }>;
}

export interface RecoveryResult {
  /** Seconds from the drop to 0.5× until the chain is back to its 0.5× self; null: not within the cap. */
  seconds: number | null;
  capSeconds: number;
  /** How long the 0.5× phase ran. */
  ranSeconds: number;
  sent: number;
  ok: number;
  gaveUp: number;
  /** inventory's pool queue when the level ended (requests waiting for a connection). */
  queueAtDrop: number;
  database: DatabaseWindow;
  /** Not recovered within the cap: the chain was killed and started afresh for the next level. */
  restarted: boolean;
}

/** Of one level's requests, those that reached a hop, and how long after the client sent them. */
export interface HopArrival {
  reached: number;
  p50Ms: number | null;
  p99Ms: number | null;
}

/** One service process over a level. */
export interface ServiceUsage {
  /** CPU (cores). */
  cpu: number;
  /** Event-loop delay (ms). */
  loopDelayP99Ms: number;
  loopDelayMaxMs: number;
}

/** The handlers' CPU in a window (the CPU-bound chain's work; zero on the pool-bound one, whose handlers do none). */
export interface HandlerCpuWindow {
  /** Handler CPU in the window (ms, process CPU time). */
  busyMs: number;
  /** Of which after the request's client had stopped waiting. */
  deadMs: number;
  /** Of which on requests that missed (no 2xx in time: refused, shed, gave up), whenever it ran. */
  missedMs: number;
  /**
   * Per hop: handlers that began in the window and their mean CPU (ms; null: none began); the hop's share of `deadMs`;
   * and of that, what handlers spent that began only after their client had stopped waiting (`lateStartMs`, from
   * `lateStarts` handlers): requests that reached the hop already dead, as against ones that were alive when it
   * started on them and ran past their client's patience.
   */
  hops: Record<
    ServiceName,
    { handlers: number; meanCpuMs: number | null; deadMs: number; lateStarts: number; lateStartMs: number }
  >;
}

export interface LevelResult {
  multiplier: number;
  /** Arrival rate aimed at (req/s): multiplier × capacity. */
  rate: number;
  seconds: number;
  sent: number;
  /** 2xx within the budget. */
  ok: number;
  /** Another status within the budget (504, 503, 500). */
  shed: number;
  /** The statuses of those, counted (`{ "503": 1200, "504": 80 }`): 503 is a circuit breaker's refusal. */
  shedStatuses: Record<string, number>;
  /** No answer within the budget: the client gave up. */
  gaveUp: number;
  errors: number;
  /** Of `shed`: 503 or 504 answered before any handler ran (the gateway's never saw it): refused at arrival. */
  refused: number;
  /** refused ÷ sent. */
  refusedShare: number;
  /**
   * Answered 503 or 504 because a hop refused them at arrival, whichever hop (a refusal by orders or inventory is
   * answered by the hops before it, after their handlers ran) ÷ sent. At 0.8× every one is a false shed.
   */
  refusedAnywhereShare: number;
  /**
   * The level's requests that reached each hop and were answered there before its handler ran (refused by that hop;
   * one refused by orders or inventory is answered 503/504 by the hops before it, after their work).
   */
  refusedAt: Record<ServiceName, number>;
  /** p99 time to a 2xx answer in time (the answered requests only); null: none. */
  okP99Ms: number | null;
  /** Requests sent and answered in time, per client budget (ms). */
  byBudget: Record<string, { sent: number; ok: number }>;
  /** The handlers' CPU in the level's window. */
  handlerCpu: HandlerCpuWindow;
  /**
   * The CPU-bound chain's database side as CPU (null on the pool-bound chain): the databases' CPU over the level
   * (`postgresCpu` + `mariadbCpu`), shared evenly among the statements sent in its window — one-row reads and the
   * library's SET/RESET, alike on the server — and dead for those sent after their client had stopped waiting.
   * (Their time as the driver sees it, in `database`, is mostly the wait for the hop's busy event loop to read the
   * answer: connection time, not database work.)
   */
  databaseCpu: {
    cpuMs: number;
    deadMs: number;
    /** The share of `cpuMs` of the statements of requests that missed, whenever sent. */
    missedMs: number;
    statements: number;
    deadStatements: number;
    missedStatements: number;
  } | null;
  /**
   * Dead work: on the CPU-bound chain, (handler CPU + database CPU) after the request's client had stopped waiting ÷
   * all of both, in the level's window; on the pool-bound chain, `database.deadWork` (statement time).
   */
  deadWork: number | null;
  /**
   * The CPU-bound chain only (else null): the same work spent on requests that missed (no 2xx in time), whenever it
   * ran — work wasted, though some of it was done while the client still waited.
   */
  missedWork: number | null;
  /** ok ÷ seconds. */
  goodput: number;
  /** The same over the level's second half (steady state: a queue that only grows shows here). */
  goodputSecondHalf: number;
  /** Time to an answer or to giving up (a request that gave up counts as the whole budget). */
  p50Ms: number;
  p99Ms: number;
  database: DatabaseWindow;
  /** When the level's requests reached each hop, from the client's send (kernel queues included). */
  arrivals: Record<ServiceName, HopArrival>;
  /** How late the open loop sent (ms): it kept its schedule if these are small. */
  senderLagP99Ms: number;
  senderLagMaxMs: number;
  /** Requests waiting for a pooled connection in orders and inventory when the level ended. */
  poolWaiting: { orders: number; inventory: number };
  /** CPU of the three services (cores, together and each), of the runner (cores), of the machine (0–1). */
  chainCpu: number;
  services: Record<ServiceName, ServiceUsage>;
  runnerCpu: number;
  /** CPU of Postgres (cores, all its processes). */
  postgresCpu: number | null;
  /** CPU of MariaDB (cores), when the stock query runs there; else null. */
  mariadbCpu: number | null;
  /**
   * Everything else (cores): other processes on the machine, and kernel work charged to none. Well above zero,
   * the figures of this level were taken on a machine shared with something else.
   */
  otherCpu: number | null;
  machineCpu: number | null;
  recovery: RecoveryResult | null;
}

export interface VariantResult {
  variant: ChainVariant;
  description: string;
  capacity: CapacityResult;
  levels: LevelResult[];
}

export interface OverloadReport {
  /** Why nothing was measured (Postgres unreachable, the chain would not start…); null when it ran. */
  skipped: string | null;
  quick: boolean;
  setup: OverloadSetup | null;
  /** The library chain's closed-loop maximum (req/s): what the levels are multiples of. */
  capacity: number | null;
  variants: VariantResult[];
  goals: {
    /** Dead work with the library, worst level, against ≤ 2 %. */
    libraryDeadWork: { worst: number | null; target: number; met: boolean | null };
    /** Goodput at 2×: the library's ÷ the baseline's, against ≥ 2. */
    goodputAt2x: {
      library: number | null;
      baseline: number | null;
      ratio: number | null;
      target: number;
      met: boolean | null;
    };
    /** The CPU-bound chain's goals, all at 3× but the false sheds (null on the pool-bound chain). */
    cpu: CpuGoals | null;
    /** With admission and the library both run: admission's goodput ÷ the library's at every level, against ≥ 0.95. */
    admissionCost: {
      levels: { multiplier: number; ratio: number | null }[];
      worst: number | null;
      target: number;
      met: boolean | null;
    } | null;
  };
}

/** A ratio or figure held to a target. */
export interface Goal {
  value: number | null;
  target: number;
  met: boolean | null;
}

export interface CpuGoals {
  /** Goodput at 3× per variant run. */
  goodputAt3x: Partial<Record<ChainVariant, number>>;
  /** admission's goodput at 3× ÷ under-pressure's, against ≥ 1.5. */
  admissionOverUnderPressure: Goal;
  /** admission's goodput at 3× ÷ the library's alone, against ≥ 1.2. */
  admissionOverLibrary: Goal;
  /** admission's dead work (handler CPU and database) at 3×, against ≤ 2 %. */
  admissionDeadWorkAt3x: Goal;
  /** admission's recovery once 3× drops to 0.5× (s), against ≤ 1 s. */
  admissionRecoveryAt3x: Goal;
  /**
   * admission's share refused at 0.8× — every refusal there is a false one — against ≤ 0.1 %: refused at any hop's
   * arrival (`refusedAnywhereShare`; the gateway's alone are `refusedShare`).
   */
  falseShedsAt08x: Goal;
}

const WORK_MS = 50;
const BUDGET_MS = 1_000;
const POOL_SIZE = 5;
const ORDERS_POOL_SIZE = 4;
/** Closed-loop clients for the capacity: enough to keep every connection busy with a queue behind it. */
const CAPACITY_CONCURRENCY = 4 * POOL_SIZE;
const RECOVERY_MULTIPLIER = 0.5;
const RECOVERY_WINDOW_MS = 500;

/** The CPU-bound chain: CPU each hop's handler spends per request (ms), and its pools (big enough never to bind). */
const CPU_MS_PER_HOP = 3;
const CPU_POOL_SIZE = 30;
/**
 * Closed-loop clients for its capacity, each with a 1 s budget (the mix starts with the levels): enough to keep the
 * three loops busy with a queue (10 measured 25–30 % less than 20 on this machine, and moved more from run to run).
 */
const CPU_CAPACITY_CONCURRENCY = 20;
/**
 * Its clients' budgets, by request id (`rid % 10`): 0 → 250 ms, 1–2 → 500 ms, the rest 1 s. Consecutive ids, so
 * every level of every variant gets the same mix, spread evenly over its time.
 */
const BUDGET_MIX = [
  { ms: 1_000, share: 0.7 },
  { ms: 500, share: 0.2 },
  { ms: 250, share: 0.1 },
];
const mixedBudget = (rid: number) => {
  const slot = rid % 10;
  return slot === 0 ? 250 : slot <= 2 ? 500 : 1_000;
};
function describe(variant: ChainVariant, stockDatabase: StockDatabase, bottleneck: Bottleneck): string {
  if (variant === 'library' || variant === 'baseline') {
    if (bottleneck === 'pool') return DESCRIPTIONS[stockDatabase][variant];
    return variant === 'library'
      ? 'with the library: each budget propagated, every call and statement bounded by it'
      : 'fixed per-hop timeouts only (gateway 5 s, orders 4 s), plain drivers: nothing stopped';
  }
  return variant === 'library+admission'
    ? `${describe('library', stockDatabase, bottleneck)}; admission: true on every hop (a request that cannot finish refused at arrival)`
    : `${describe('library', stockDatabase, bottleneck)}; @fastify/under-pressure on gateway and inventory, as its README registers it (orders is express: none)`;
}

const DESCRIPTIONS: Record<StockDatabase, Record<'library' | 'baseline', string>> = {
  postgres: {
    library: 'with the library: one 1 s budget, propagated; the pool wait and the query bounded by it, cancelled',
    baseline: 'fixed per-hop timeouts only (gateway 5 s, orders 4 s), plain pg: nothing cancelled on the database',
  },
  mariadb: {
    library:
      'with the library: one 1 s budget, propagated; the pool wait and the MariaDB query bounded by it, killed (KILL QUERY)',
    baseline:
      'fixed per-hop timeouts only (gateway 5 s, orders 4 s), plain mysql2 on MariaDB: nothing killed on the database',
  },
};

interface Plan {
  multipliers: number[];
  levelSeconds: number;
  recoveryCapSeconds: number | null;
  warmupSeconds: number;
  capacityConcurrency: number;
  capacitySeconds: number;
}
const FULL: Plan = {
  multipliers: [0.5, 1, 1.5, 2, 3],
  levelSeconds: 10,
  recoveryCapSeconds: 20,
  warmupSeconds: 3,
  capacityConcurrency: CAPACITY_CONCURRENCY,
  capacitySeconds: 4,
};
/**
 * A smoke test, measuring nothing. The warm-up is only a moment of closed loop: each client's first request
 * (awaited however long it takes, up to the budget) warms the chain. The capacity's window must see answers
 * (above 1/s, or the run is skipped): one client per connection, none queued, so that on a loaded machine they
 * come well within it (20 clients queued on 5 connections had their first 0.4–0.8 s in). The 2× level only has to
 * queue some requests behind the pool.
 */
const QUICK: Plan = {
  multipliers: [2],
  levelSeconds: 0.25,
  recoveryCapSeconds: null,
  warmupSeconds: 0.05,
  capacityConcurrency: POOL_SIZE,
  capacitySeconds: 0.5,
};
/** What `compact` shortens (see {@link OverloadOptions.compact}). */
const COMPACT: Pick<Plan, 'levelSeconds' | 'recoveryCapSeconds'> = { levelSeconds: 4, recoveryCapSeconds: 10 };
/**
 * The CPU-bound chain: 0.8× too (where every refusal is a false one), shorter levels and recovery cap (four variants
 * must fit in 10 minutes; the goal is recovery within 1 s).
 */
const FULL_CPU: Plan = {
  multipliers: [0.5, 0.8, 1, 1.5, 2, 3],
  levelSeconds: 8,
  recoveryCapSeconds: 10,
  warmupSeconds: 5,
  capacityConcurrency: CPU_CAPACITY_CONCURRENCY,
  capacitySeconds: 4,
};

function emptyReport(quick: boolean, skipped: string): OverloadReport {
  return {
    skipped,
    quick,
    setup: null,
    capacity: null,
    variants: [],
    goals: {
      libraryDeadWork: { worst: null, target: 0.02, met: null },
      goodputAt2x: { library: null, baseline: null, ratio: null, target: 2, met: null },
      cpu: null,
      admissionCost: null,
    },
  };
}

const message = (error: unknown) => (error instanceof Error ? error.message : String(error));

/** The URL without its password, for the report. */
function where(url: string, defaultPort = 5432): string {
  try {
    const parsed = new URL(url);
    return `${parsed.hostname}:${parsed.port || defaultPort}`;
  } catch {
    return 'an unparsable URL';
  }
}

async function probe(url: string): Promise<string> {
  const client = new pg.Client({ connectionString: url, connectionTimeoutMillis: 3_000 });
  try {
    await client.connect();
    const { rows } = await client.query('SHOW server_version');
    return `PostgreSQL ${(rows[0] as { server_version: string }).server_version} at ${where(url)}`;
  } finally {
    await client.end().catch(() => {});
  }
}

/** `MariaDB <version> at <host:port>` (or whatever server answers there); throws when none does. */
async function probeMariadb(url: string): Promise<string> {
  const connection = await createConnection({ uri: url, connectTimeout: 3_000 });
  try {
    const [rows] = await connection.query<RowDataPacket[]>('SELECT VERSION() AS version');
    const version = String(rows[0]?.version ?? 'unknown');
    const server = /mariadb/i.test(version) ? 'MariaDB' : 'MySQL';
    return `${server} ${version.replace(/-MariaDB.*$/i, '')} at ${where(url, 3306)}`;
  } finally {
    await connection.end().catch(() => {});
  }
}

/** Busy and total jiffies of all CPUs (Linux /proc/stat); undefined elsewhere. */
function machineTicks(): { busy: number; total: number } | undefined {
  try {
    const fields = (readFileSync('/proc/stat', 'utf8').split('\n')[0] ?? '').trim().split(/\s+/).slice(1).map(Number);
    const total = fields.reduce((a, b) => a + b, 0);
    const idle = (fields[3] ?? 0) + (fields[4] ?? 0);
    return Number.isFinite(total) && total > 0 ? { busy: total - idle, total } : undefined;
  } catch {
    return undefined;
  }
}

/**
 * CPU time of every process with one of `names` (ticks), their reaped children included (for `postgres`: the
 * backends that served CancelRequests, for one; MariaDB is one process, its threads included); undefined without
 * /proc.
 */
function processTicks(...names: string[]): number | undefined {
  try {
    let ticks = 0;
    for (const pid of readdirSync('/proc')) {
      if (!/^\d+$/.test(pid)) continue;
      let stat: string;
      try {
        stat = readFileSync(`/proc/${pid}/stat`, 'utf8');
      } catch {
        continue;
      }
      if (!names.some((name) => stat.includes(`(${name})`))) continue;
      const fields = stat.slice(stat.lastIndexOf(')') + 2).split(' ');
      ticks += Number(fields[11]) + Number(fields[12]) + Number(fields[13]) + Number(fields[14]);
    }
    return ticks;
  } catch {
    return undefined;
  }
}
/** USER_HZ on every Linux this runs on. */
const TICKS_PER_SECOND = 100;

/** The resources used over a phase. */
interface Meter {
  chain: Collected;
  runner: NodeJS.CpuUsage;
  machine: ReturnType<typeof machineTicks>;
  postgres: number | undefined;
  /** Counted only when the stock query runs on MariaDB. */
  mariadb: number | undefined;
}
async function meter(chain: ChainProcess): Promise<Meter> {
  return {
    chain: await chain.collect(),
    runner: process.cpuUsage(),
    machine: machineTicks(),
    postgres: processTicks('postgres'),
    // The server's process is `mariadbd` from MariaDB 10.5 on, `mysqld` before (and for MySQL).
    mariadb: chain.options.stockDatabase === 'mariadb' ? processTicks('mariadbd', 'mysqld') : undefined,
  };
}

interface VariantState {
  variant: ChainVariant;
  chain: ChainProcess;
  client: BudgetedClient;
  /** Statements and arrivals of chains already retired (the live one keeps its own until the end). */
  statements: TimedStatement[];
  arrivals: Record<ServiceName, [number, number][]>;
  handlers: Record<ServiceName, HandlerRecord[]>;
  capacity?: PacedRun;
  /** The 0.5× level's figures, against which recovery is judged. */
  reference?: Reference;
  levels: {
    multiplier: number;
    rate: number;
    run: PacedRun;
    before: Meter;
    after: Meter;
    recovery?: { run: PacedRun; seconds: number | null; queueAtDrop: number; restarted: boolean };
  }[];
}

interface Reference {
  okRatio: number;
  p90Ms: number;
}

/** Moves what a chain collected into the variant's own lists (a loop: these can be long for a spread). */
function retire(state: VariantState, chain: ChainProcess): void {
  for (const statement of chain.statements) state.statements.push(statement);
  for (const service of ['gateway', 'orders', 'inventory'] as const) {
    for (const arrival of chain.arrivals[service]) state.arrivals[service].push(arrival);
    for (const handler of chain.handlers[service]) state.handlers[service].push(handler);
  }
}

/** Requests sent in [start, end) (by schedule), in the order sent. */
function within(records: RequestRecord[], start: number, end: number): RequestRecord[] {
  return records.filter((r) => r.scheduledAt >= start && r.scheduledAt < end);
}

const round = (x: number, digits: number) => Math.round(x * 10 ** digits) / 10 ** digits;
const roundOrNull = (x: number, digits: number) => (Number.isFinite(x) ? round(x, digits) : null);

/** The database's work in [start, end]: statements clipped to the window, split at their client's give-up. */
function database(
  statements: TimedStatement[],
  interest: Map<number, number>,
  start: number,
  end: number,
): DatabaseWindow {
  let busyMs = 0;
  let deadMs = 0;
  let count = 0;
  const byKind: DatabaseWindow['byKind'] = {};
  let inventoryMs = 0;
  for (const [rid, began, ended, kind, pool] of statements) {
    const from = Math.max(began, start);
    const to = Math.min(ended, end);
    if (to <= from) continue;
    count++;
    const stopped = interest.get(rid);
    const dead = stopped === undefined ? 0 : Math.max(0, to - Math.max(from, stopped));
    busyMs += to - from;
    deadMs += dead;
    if (pool === 'inventory') inventoryMs += to - from;
    const entry = (byKind[`${pool} ${STATEMENT_KINDS[kind] ?? 'other'}`] ??= { busyMs: 0, deadMs: 0 });
    entry.busyMs += to - from;
    entry.deadMs += dead;
  }
  for (const entry of Object.values(byKind)) {
    entry.busyMs = Math.round(entry.busyMs);
    entry.deadMs = Math.round(entry.deadMs);
  }
  return {
    statements: count,
    busyMs: Math.round(busyMs),
    deadMs: Math.round(deadMs),
    deadWork: busyMs > 0 ? round(deadMs / busyMs, 4) : null,
    inventoryBusyConnections: round(inventoryMs / (end - start), 2),
    byKind,
  };
}

/** Each hop's dead handler CPU, and in brackets what of it went to requests that reached the hop already dead. */
function deadByHop({ hops }: HandlerCpuWindow): string {
  const one = ({ deadMs, lateStartMs }: HandlerCpuWindow['hops'][ServiceName]) => `${deadMs} (${lateStartMs})`;
  return `${one(hops.gateway)}/${one(hops.orders)}/${one(hops.inventory)}`;
}

/**
 * The handlers' CPU in [start, end]: each handler's CPU spread evenly over its run (a handler that ran across the
 * window's edge, or across its client's give-up, counts for the share of its run on each side).
 */
function handlerWindow(
  handlers: Record<ServiceName, HandlerRecord[]>,
  interest: Map<number, number>,
  missed: Set<number>,
  start: number,
  end: number,
): HandlerCpuWindow {
  let busyMs = 0;
  let deadMs = 0;
  let missedMs = 0;
  const hop = (list: HandlerRecord[]) => {
    let began = 0;
    let cpuMs = 0;
    let hopDeadMs = 0;
    let lateStarts = 0;
    let lateStartMs = 0;
    for (const [rid, from, to, cpuMicros] of list) {
      const stopped = interest.get(rid);
      if (from >= start && from < end) {
        began++;
        cpuMs += cpuMicros / 1000;
        if (stopped !== undefined && from >= stopped) lateStarts++;
      }
      if (cpuMicros === 0 || to <= from) continue;
      const inside = Math.min(to, end) - Math.max(from, start);
      if (inside <= 0) continue;
      const perMs = cpuMicros / 1000 / (to - from);
      busyMs += inside * perMs;
      if (missed.has(rid)) missedMs += inside * perMs;
      if (stopped === undefined) continue;
      const dead = Math.max(0, Math.min(to, end) - Math.max(from, start, stopped)) * perMs;
      hopDeadMs += dead;
      if (from >= stopped) lateStartMs += dead;
    }
    deadMs += hopDeadMs;
    return {
      handlers: began,
      meanCpuMs: began === 0 ? null : round(cpuMs / began, 3),
      deadMs: Math.round(hopDeadMs),
      lateStarts,
      lateStartMs: Math.round(lateStartMs),
    };
  };
  const hops = { gateway: hop(handlers.gateway), orders: hop(handlers.orders), inventory: hop(handlers.inventory) };
  return { busyMs: Math.round(busyMs), deadMs: Math.round(deadMs), missedMs: Math.round(missedMs), hops };
}

/** Whether a window of requests is back to the 0.5× level's figures: as many answered, about as fast. */
function healthy(records: RequestRecord[], reference: Reference): boolean {
  if (records.length === 0) return false;
  const ok = records.filter((r) => r.outcome === 'ok').length / records.length;
  const p90 = quantile(records.map(latency), 0.9);
  return ok >= reference.okRatio - Math.max(0.02, 1 / records.length) && p90 <= reference.p90Ms * 1.5 + 10;
}

/**
 * The recovery point (seconds after `start`): the first window of `RECOVERY_WINDOW_MS` that is healthy and is
 * followed by another; undefined while none is known (windows count once all their requests have settled).
 */
function recoveredAt(records: RequestRecord[], from: number, start: number, reference: Reference): number | undefined {
  const windows: RequestRecord[][] = [];
  for (let i = from; i < records.length; i++) {
    const r = records[i] as RequestRecord;
    if (r.scheduledAt < start) continue;
    (windows[Math.floor((r.scheduledAt - start) / RECOVERY_WINDOW_MS)] ??= []).push(r);
  }
  const now = performance.now();
  let previous = false;
  for (let i = 0; i < windows.length; i++) {
    const window = windows[i] ?? [];
    const closed = start + (i + 1) * RECOVERY_WINDOW_MS <= now;
    if (!closed || window.some((r) => r.outcome === 'pending')) return undefined;
    const good = healthy(window, reference);
    if (good && previous) return ((i - 1) * RECOVERY_WINDOW_MS) / 1000;
    previous = good;
  }
  return undefined;
}

/**
 * Runs the overload benchmark. Never throws: without a reachable Postgres (DATABASE_URL ?? PG_URL ?? the loopback
 * one), a reachable MariaDB for a MariaDB stock query (MYSQL_URL ?? the loopback one), or when a chain will not
 * start, the report says why in `skipped`.
 */
export async function measureOverload(
  options: OverloadOptions,
  progress: (line: string) => void,
): Promise<OverloadReport> {
  const url = process.env.DATABASE_URL ?? process.env.PG_URL ?? 'postgres://postgres@127.0.0.1:5432/test';
  const stockDatabase = options.stockDatabase ?? 'postgres';
  let postgres: string;
  try {
    postgres = await probe(url);
  } catch (error) {
    return emptyReport(options.quick, `PostgreSQL unreachable at ${where(url)}: ${message(error)}`);
  }
  let mariadb: { url: string; server: string } | null = null;
  if (stockDatabase === 'mariadb') {
    const mariadbUrl = process.env.MYSQL_URL ?? 'mysql://root@127.0.0.1:3306/test';
    try {
      mariadb = { url: mariadbUrl, server: await probeMariadb(mariadbUrl) };
    } catch (error) {
      return emptyReport(options.quick, `MariaDB unreachable at ${where(mariadbUrl, 3306)}: ${message(error)}`);
    }
  }
  try {
    return await run(options, url, postgres, mariadb, progress);
  } catch (error) {
    return emptyReport(options.quick, `the overload benchmark failed: ${message(error)}`);
  }
}

async function run(
  options: OverloadOptions,
  url: string,
  postgres: string,
  mariadb: { url: string; server: string } | null,
  progress: (line: string) => void,
): Promise<OverloadReport> {
  const quick = options.quick;
  const bottleneck = options.bottleneck ?? 'pool';
  const cpuBound = bottleneck === 'cpu';
  const variants: ChainVariant[] =
    options.variants ??
    (cpuBound ? ['library', 'library+admission', 'library+under-pressure', 'baseline'] : ['library', 'baseline']);
  if (!variants.includes('library')) throw new Error('the variants must include library (the capacity is its)');
  // Admission beside the pool-bound chain: 0.8× too, where any refusal is a false one.
  const plan = quick
    ? QUICK
    : cpuBound
      ? FULL_CPU
      : variants.includes('library+admission')
        ? options.compact === true
          ? { ...FULL, ...COMPACT }
          : { ...FULL, multipliers: [0.5, 0.8, 1, 1.5, 2, 3] }
        : FULL;
  const stockDatabase: StockDatabase = mariadb === null ? 'postgres' : 'mariadb';
  const poolSize = cpuBound ? CPU_POOL_SIZE : POOL_SIZE;
  const ordersPoolSize = cpuBound ? CPU_POOL_SIZE : ORDERS_POOL_SIZE;
  const workMs = cpuBound ? 0 : WORK_MS;
  const setup: OverloadSetup = {
    postgres,
    stockDatabase,
    mariadb: mariadb?.server ?? null,
    bottleneck,
    variants,
    workMs,
    cpuMsPerHop: cpuBound ? CPU_MS_PER_HOP : null,
    budgetMs: BUDGET_MS,
    budgetMix: cpuBound ? BUDGET_MIX : [{ ms: BUDGET_MS, share: 1 }],
    poolSize,
    ordersPoolSize,
    fixedTimeoutsMs: { gateway: 5_000, orders: 4_000 },
    multipliers: plan.multipliers,
    levelSeconds: plan.levelSeconds,
    recoveryMultiplier: RECOVERY_MULTIPLIER,
    recoveryCapSeconds: plan.recoveryCapSeconds,
    recoveryWindowMs: RECOVERY_WINDOW_MS,
    capacityConcurrency: plan.capacityConcurrency,
    capacitySeconds: plan.capacitySeconds,
    cpusAllowed: { services: `0-${cpus().length - 1}`, runner: allowedCpus() ?? 'unknown' },
    cpus: cpus().length,
    loadAverageAtStart: round(loadavg()[0] ?? 0, 2),
  };
  let rid = 0;
  const nextRid = () => ++rid;
  const start = (variant: ChainVariant) =>
    ChainProcess.start({
      variant,
      postgresUrl: url,
      stockDatabase,
      mariadbUrl: mariadb?.url,
      poolSize,
      ordersPoolSize,
      cpuMs: cpuBound ? CPU_MS_PER_HOP : undefined,
    });
  progress(`overload: starting ${variants.length} chains`);
  const chains = await Promise.allSettled(variants.map(start));
  const started = chains.flatMap((c) => (c.status === 'fulfilled' ? [c.value] : []));
  const failed = chains.find((c): c is PromiseRejectedResult => c.status === 'rejected');
  if (failed !== undefined) {
    await Promise.all(started.map((c) => c.close()));
    throw failed.reason;
  }
  const states: VariantState[] = started.map((chain) => ({
    variant: chain.options.variant,
    chain,
    client: new BudgetedClient({
      url: chain.url,
      workMs,
      budgetMs: BUDGET_MS,
      nextRid,
      budgetOf: cpuBound ? mixedBudget : undefined,
    }),
    statements: [],
    arrivals: { gateway: [], orders: [], inventory: [] },
    handlers: { gateway: [], orders: [], inventory: [] },
    levels: [],
  }));
  try {
    // Capacity: closed loop, enough clients to keep every connection busy with a queue behind it.
    for (const state of states) {
      progress(`overload: capacity of the ${state.variant} chain (closed loop, ${plan.capacityConcurrency} clients)`);
      // Every client on the longest budget (a mix of budgets is for the levels).
      const budgetOf = state.client.budgetOf;
      state.client.budgetOf = undefined;
      // Warm-up (JIT, connections), not measured.
      await closedLoop(state.client, 2 * POOL_SIZE, plan.warmupSeconds);
      state.capacity = await closedLoop(state.client, plan.capacityConcurrency, plan.capacitySeconds);
      state.client.budgetOf = budgetOf;
    }
    const library = states.find((state) => state.variant === 'library') as VariantState;
    const capacity = okPerSecond(library.client.records, library.capacity as PacedRun);
    if (!(capacity > 1)) throw new Error(`the library chain answered ${capacity} requests/s in time`);

    for (const [index, multiplier] of plan.multipliers.entries()) {
      const last = index === plan.multipliers.length - 1;
      // Level by level, one variant then the other: a shared machine's drift falls on both alike.
      for (const state of states) {
        const rate = multiplier * capacity;
        progress(`overload: ${state.variant}, ${multiplier}× (${Math.round(rate)} req/s for ${plan.levelSeconds} s)`);
        const before = await meter(state.chain);
        const level = await paced(rate, plan.levelSeconds, (at) => void state.client.send(at));
        // Not awaited yet: the load drops to 0.5× at once.
        const afterLevel = meter(state.chain);
        let recovery: VariantState['levels'][number]['recovery'];
        if (plan.recoveryCapSeconds !== null && multiplier > RECOVERY_MULTIPLIER && state.reference !== undefined) {
          progress(`overload: ${state.variant}, back to ${RECOVERY_MULTIPLIER}× after ${multiplier}×: recovering…`);
          const reference = state.reference;
          const records = state.client.records;
          const from = records.length;
          let found: number | undefined;
          let checked = 0;
          const recoveryRun = await paced(
            RECOVERY_MULTIPLIER * capacity,
            plan.recoveryCapSeconds + (2 * RECOVERY_WINDOW_MS) / 1000,
            (at) => void state.client.send(at),
            () => {
              if (performance.now() - checked < 100) return false;
              checked = performance.now();
              found = recoveredAt(records, from, level.end, reference);
              return found !== undefined;
            },
          );
          await state.client.settle();
          found ??= recoveredAt(records, from, level.end, reference);
          const seconds = found !== undefined && found <= plan.recoveryCapSeconds ? found : null;
          const queueAtDrop = (await afterLevel).chain.waiting;
          // Still not itself: what it has queued would spill into the next level. Start afresh instead.
          const restarted = seconds === null && !last;
          if (restarted) {
            progress(`overload: ${state.variant} did not recover within ${plan.recoveryCapSeconds} s; restarting it`);
            await state.chain.collect();
            retire(state, state.chain);
            await state.chain.close();
            state.chain = await start(state.variant);
            state.client.url = state.chain.url;
            await closedLoop(state.client, 2 * POOL_SIZE, plan.warmupSeconds);
          }
          recovery = { run: recoveryRun, seconds, queueAtDrop, restarted };
        } else {
          await state.client.settle();
        }
        state.levels.push({
          multiplier,
          rate,
          run: level,
          before,
          after: await afterLevel,
          ...(recovery === undefined ? {} : { recovery }),
        });
        if (multiplier === RECOVERY_MULTIPLIER) {
          const records = within(state.client.records, level.start, level.end);
          state.reference = {
            okRatio: records.filter((r) => r.outcome === 'ok').length / Math.max(1, records.length),
            p90Ms: quantile(records.map(latency), 0.9),
          };
        }
      }
    }
    for (const state of states) {
      await state.client.settle();
      await state.chain.collect();
      retire(state, state.chain);
    }
    return report(quick, setup, capacity, states);
  } finally {
    for (const state of states) {
      await state.chain.close().catch(() => {});
      await state.client.close().catch(() => {});
    }
  }
}

function okPerSecond(records: RequestRecord[], run: PacedRun): number {
  const ok = records.filter(
    (r) => r.outcome === 'ok' && r.doneAt !== undefined && r.doneAt >= run.start && r.doneAt <= run.end,
  );
  return ok.length / ((run.end - run.start) / 1000);
}

function statuses(records: RequestRecord[]): Record<string, number> {
  const counts: Record<string, number> = {};
  for (const r of records) if (r.outcome === 'shed') counts[String(r.status)] = (counts[String(r.status)] ?? 0) + 1;
  return counts;
}

function hopArrivals(
  sent: RequestRecord[],
  arrivals: Record<ServiceName, [number, number][]>,
): Record<ServiceName, HopArrival> {
  const sentAt = new Map(sent.map((r) => [r.rid, r.sentAt]));
  const hop = (list: [number, number][]): HopArrival => {
    const lags: number[] = [];
    for (const [rid, at] of list) {
      const sent = sentAt.get(rid);
      if (sent !== undefined) lags.push(at - sent);
    }
    return {
      reached: lags.length,
      p50Ms: lags.length === 0 ? null : roundOrNull(quantile(lags, 0.5), 1),
      p99Ms: lags.length === 0 ? null : roundOrNull(quantile(lags, 0.99), 1),
    };
  };
  return { gateway: hop(arrivals.gateway), orders: hop(arrivals.orders), inventory: hop(arrivals.inventory) };
}

function report(quick: boolean, setup: OverloadSetup, capacity: number, states: VariantState[]): OverloadReport {
  const variants = states.map((state): VariantResult => {
    const records = state.client.records;
    const interest = new Map(records.map((r) => [r.rid, interestEnd(r)]));
    const capacityRun = state.capacity as PacedRun;
    // Which requests each hop's handler saw, and which reached each hop.
    const handled = {
      gateway: new Set(state.handlers.gateway.map(([rid]) => rid)),
      orders: new Set(state.handlers.orders.map(([rid]) => rid)),
      inventory: new Set(state.handlers.inventory.map(([rid]) => rid)),
    };
    const reached = {
      gateway: new Set(state.arrivals.gateway.map(([rid]) => rid)),
      orders: new Set(state.arrivals.orders.map(([rid]) => rid)),
      inventory: new Set(state.arrivals.inventory.map(([rid]) => rid)),
    };
    // Requests that got no 2xx in time (the capacity phase's and the levels' alike).
    const missed = new Set(records.filter((r) => r.outcome !== 'ok').map((r) => r.rid));
    const capacityOk = records.filter(
      (r) =>
        r.outcome === 'ok' && r.doneAt !== undefined && r.doneAt >= capacityRun.start && r.doneAt <= capacityRun.end,
    );
    return {
      variant: state.variant,
      description: describe(state.variant, setup.stockDatabase, setup.bottleneck),
      capacity: {
        concurrency: setup.capacityConcurrency,
        seconds: setup.capacitySeconds,
        sent: capacityRun.count,
        ok: capacityOk.length,
        okPerSecond: Math.round(okPerSecond(records, capacityRun)),
        p50Ms: round(quantile(capacityOk.map(latency), 0.5), 1),
        p99Ms: round(quantile(capacityOk.map(latency), 0.99), 1),
      },
      levels: state.levels.map(({ multiplier, rate, run, before, after, recovery }): LevelResult => {
        const seconds = (run.end - run.start) / 1000;
        const sent = within(records, run.start, run.end);
        const count = (outcome: RequestRecord['outcome'], list = sent) =>
          list.filter((r) => r.outcome === outcome).length;
        const middle = (run.start + run.end) / 2;
        const lags = sent.map((r) => r.sentAt - r.scheduledAt);
        const elapsedMicros = (after.chain.at - before.chain.at) * 1000;
        const usage = (service: ServiceName): ServiceUsage => ({
          cpu: round(
            (after.chain.services[service].cpuMicros - before.chain.services[service].cpuMicros) / elapsedMicros,
            3,
          ),
          loopDelayP99Ms: round(after.chain.services[service].loopDelayP99Ms, 1),
          loopDelayMaxMs: round(after.chain.services[service].loopDelayMaxMs, 1),
        });
        const runnerMicros = after.runner.user + after.runner.system - (before.runner.user + before.runner.system);
        const machine =
          before.machine && after.machine && after.machine.total > before.machine.total
            ? round((after.machine.busy - before.machine.busy) / (after.machine.total - before.machine.total), 3)
            : null;
        const postgresCpu =
          before.postgres === undefined || after.postgres === undefined
            ? null
            : round((after.postgres - before.postgres) / TICKS_PER_SECOND / (elapsedMicros / 1e6), 3);
        const mariadbCpu =
          before.mariadb === undefined || after.mariadb === undefined
            ? null
            : round((after.mariadb - before.mariadb) / TICKS_PER_SECOND / (elapsedMicros / 1e6), 3);
        const chainCpu = round((after.chain.cpuMicros - before.chain.cpuMicros) / elapsedMicros, 3);
        const runnerCpu = round(runnerMicros / elapsedMicros, 3);
        const db = database(state.statements, interest, run.start, run.end);
        const handlerCpu = handlerWindow(state.handlers, interest, missed, run.start, run.end);
        const databasesCpu = postgresCpu === null ? null : postgresCpu + (mariadbCpu ?? 0);
        let databaseCpu: LevelResult['databaseCpu'] = null;
        let deadWork = db.deadWork;
        let missedWork: number | null = null;
        if (setup.bottleneck === 'cpu') {
          let statements = 0;
          let deadStatements = 0;
          let missedStatements = 0;
          for (const [rid, began] of state.statements) {
            if (began < run.start || began >= run.end) continue;
            statements++;
            const stopped = interest.get(rid);
            if (stopped !== undefined && began >= stopped) deadStatements++;
            if (missed.has(rid)) missedStatements++;
          }
          const cpuMs = ((databasesCpu ?? 0) * elapsedMicros) / 1000;
          const share = (n: number) => (statements === 0 ? 0 : (cpuMs * n) / statements);
          databaseCpu = {
            cpuMs: Math.round(cpuMs),
            deadMs: Math.round(share(deadStatements)),
            missedMs: Math.round(share(missedStatements)),
            statements,
            deadStatements,
            missedStatements,
          };
          const all = handlerCpu.busyMs + cpuMs;
          deadWork = all > 0 ? round((handlerCpu.deadMs + share(deadStatements)) / all, 4) : null;
          missedWork = all > 0 ? round((handlerCpu.missedMs + share(missedStatements)) / all, 4) : null;
        }
        const otherCpu =
          machine === null || databasesCpu === null
            ? null
            : round(Math.max(0, machine * setup.cpus - chainCpu - runnerCpu - databasesCpu), 3);
        let recoveryResult: RecoveryResult | null = null;
        if (recovery !== undefined) {
          const recovering = within(records, recovery.run.start, recovery.run.end);
          recoveryResult = {
            seconds: recovery.seconds,
            capSeconds: setup.recoveryCapSeconds ?? 0,
            ranSeconds: round((recovery.run.end - recovery.run.start) / 1000, 2),
            sent: recovering.length,
            ok: count('ok', recovering),
            gaveUp: count('gave-up', recovering),
            queueAtDrop: recovery.queueAtDrop,
            database: database(state.statements, interest, recovery.run.start, recovery.run.end),
            restarted: recovery.restarted,
          };
        }
        const refused = sent.filter(
          (r) => r.outcome === 'shed' && (r.status === 503 || r.status === 504) && !handled.gateway.has(r.rid),
        ).length;
        const refusedAt = (hop: ServiceName) =>
          sent.filter((r) => reached[hop].has(r.rid) && !handled[hop].has(r.rid)).length;
        const refusedAnywhere = sent.filter(
          (r) =>
            r.outcome === 'shed' &&
            (r.status === 503 || r.status === 504) &&
            (['gateway', 'orders', 'inventory'] as const).some(
              (hop) => reached[hop].has(r.rid) && !handled[hop].has(r.rid),
            ),
        ).length;
        const okLatencies = sent.filter((r) => r.outcome === 'ok').map(latency);
        const byBudget: LevelResult['byBudget'] = {};
        for (const r of sent) {
          const entry = (byBudget[String(Math.round(r.giveUpAt - r.sentAt))] ??= { sent: 0, ok: 0 });
          entry.sent++;
          if (r.outcome === 'ok') entry.ok++;
        }
        return {
          multiplier,
          rate: Math.round(rate),
          seconds: round(seconds, 2),
          sent: sent.length,
          ok: count('ok'),
          shed: count('shed'),
          shedStatuses: statuses(sent),
          // Still pending after settling: its client's timer fired long ago, whatever the socket did.
          gaveUp: count('gave-up') + count('pending'),
          errors: count('error'),
          refused,
          refusedShare: round(refused / Math.max(1, sent.length), 4),
          refusedAnywhereShare: round(refusedAnywhere / Math.max(1, sent.length), 4),
          refusedAt: { gateway: refusedAt('gateway'), orders: refusedAt('orders'), inventory: refusedAt('inventory') },
          okP99Ms: okLatencies.length === 0 ? null : round(quantile(okLatencies, 0.99), 1),
          byBudget,
          handlerCpu,
          databaseCpu,
          deadWork,
          missedWork,
          goodput: Math.round(count('ok') / seconds),
          goodputSecondHalf: Math.round(count('ok', within(sent, middle, run.end)) / (seconds / 2)),
          p50Ms: round(quantile(sent.map(latency), 0.5), 1),
          p99Ms: round(quantile(sent.map(latency), 0.99), 1),
          database: db,
          arrivals: hopArrivals(sent, state.arrivals),
          senderLagP99Ms: round(quantile(lags, 0.99), 1),
          senderLagMaxMs: round(Math.max(0, ...lags), 1),
          poolWaiting: {
            orders: after.chain.services.orders.waiting,
            inventory: after.chain.services.inventory.waiting,
          },
          chainCpu,
          services: { gateway: usage('gateway'), orders: usage('orders'), inventory: usage('inventory') },
          runnerCpu,
          postgresCpu,
          mariadbCpu,
          otherCpu,
          machineCpu: machine,
          recovery: recoveryResult,
        };
      }),
    };
  });
  const libraryLevels = variants.find((v) => v.variant === 'library')?.levels ?? [];
  const deadWorks = libraryLevels.map((l) => l.database.deadWork).filter((d): d is number => d !== null);
  const worst = deadWorks.length === 0 ? null : Math.max(...deadWorks);
  const at2x = (variant: ChainVariant) =>
    variants.find((v) => v.variant === variant)?.levels.find((l) => l.multiplier === 2)?.goodput ?? null;
  const library2x = at2x('library');
  const baseline2x = at2x('baseline');
  const ratio =
    library2x === null || baseline2x === null || (library2x === 0 && baseline2x === 0)
      ? null
      : baseline2x === 0
        ? Number.POSITIVE_INFINITY
        : round(library2x / baseline2x, 2);
  return {
    skipped: null,
    quick,
    setup,
    capacity: Math.round(capacity),
    variants,
    goals: {
      libraryDeadWork: { worst, target: 0.02, met: worst === null ? null : worst <= 0.02 },
      goodputAt2x: {
        library: library2x,
        baseline: baseline2x,
        ratio,
        target: 2,
        met: ratio === null ? null : ratio >= 2,
      },
      cpu: setup.bottleneck === 'cpu' ? cpuGoals(variants) : null,
      admissionCost: admissionCost(variants),
    },
  };
}

const levelOf = (variants: VariantResult[], variant: ChainVariant, multiplier: number) =>
  variants.find((v) => v.variant === variant)?.levels.find((l) => l.multiplier === multiplier);

/** a ÷ b, null when either is missing (or both are 0). */
function ratioOf(a: number | undefined, b: number | undefined): number | null {
  if (a === undefined || b === undefined || (a === 0 && b === 0)) return null;
  return b === 0 ? Number.POSITIVE_INFINITY : round(a / b, 2);
}

const atLeast = (value: number | null, target: number): Goal => ({
  value,
  target,
  met: value === null ? null : value >= target,
});
const atMost = (value: number | null | undefined, target: number): Goal => ({
  value: value ?? null,
  target,
  met: value === null || value === undefined ? null : value <= target,
});

function cpuGoals(variants: VariantResult[]): CpuGoals {
  const goodputAt3x: CpuGoals['goodputAt3x'] = {};
  for (const v of variants) {
    const level = levelOf(variants, v.variant, 3);
    if (level !== undefined) goodputAt3x[v.variant] = level.goodput;
  }
  const admission = levelOf(variants, 'library+admission', 3);
  const recovery = admission?.recovery;
  return {
    goodputAt3x,
    admissionOverUnderPressure: atLeast(
      ratioOf(goodputAt3x['library+admission'], goodputAt3x['library+under-pressure']),
      1.5,
    ),
    admissionOverLibrary: atLeast(ratioOf(goodputAt3x['library+admission'], goodputAt3x.library), 1.2),
    admissionDeadWorkAt3x: atMost(admission?.deadWork, 0.02),
    // Not recovered within the cap: more than the cap, which is more than the goal.
    admissionRecoveryAt3x:
      recovery === null || recovery === undefined
        ? atMost(null, 1)
        : { value: recovery.seconds, target: 1, met: recovery.seconds !== null && recovery.seconds <= 1 },
    falseShedsAt08x: atMost(levelOf(variants, 'library+admission', 0.8)?.refusedAnywhereShare, 0.001),
  };
}

function admissionCost(variants: VariantResult[]): OverloadReport['goals']['admissionCost'] {
  const admission = variants.find((v) => v.variant === 'library+admission');
  if (admission === undefined || !variants.some((v) => v.variant === 'library')) return null;
  const levels = admission.levels.map((level) => ({
    multiplier: level.multiplier,
    ratio: ratioOf(level.goodput, levelOf(variants, 'library', level.multiplier)?.goodput),
  }));
  const ratios = levels.map((l) => l.ratio).filter((r): r is number => r !== null);
  const worst = ratios.length === 0 ? null : Math.min(...ratios);
  return { levels, worst, target: 0.95, met: worst === null ? null : worst >= 0.95 };
}

const recoveryCell = (level: LevelResult) =>
  level.recovery === null
    ? '–'
    : level.recovery.seconds === null
      ? `>${level.recovery.capSeconds} s${level.recovery.restarted ? ' (restarted)' : ''}`
      : `${level.recovery.seconds} s`;

/** One row per variant and level, for `console.table`. */
export function overloadRows(report: OverloadReport): Record<string, string | number>[] {
  const percent = (x: number | null) => (x === null ? '–' : `${(x * 100).toFixed(1)} %`);
  const budget = report.setup?.budgetMs ?? 1_000;
  if (report.setup?.bottleneck === 'cpu') {
    return report.variants.flatMap((variant) =>
      variant.levels.map((level) => ({
        variant: variant.variant,
        load: `${level.multiplier}×`,
        'offered/s': level.rate,
        'goodput/s': level.goodput,
        'ok/refused/shed/gave up': `${level.ok}/${level.refused}/${level.shed - level.refused}/${level.gaveUp}`,
        'refused edge/any hop': `${percent(level.refusedShare)} / ${percent(level.refusedAnywhereShare)}`,
        'p99 ok ms': level.okP99Ms ?? '–',
        'dead work': percent(level.deadWork),
        'missed work': percent(level.missedWork),
        'dead ms handlers/DB': `${level.handlerCpu.deadMs}/${level.databaseCpu?.deadMs ?? '–'}`,
        'dead ms g/o/i (arrived dead)': deadByHop(level.handlerCpu),
        recovery: recoveryCell(level),
        'loop p99 ms g/o/i': `${level.services.gateway.loopDelayP99Ms}/${level.services.orders.loopDelayP99Ms}/${level.services.inventory.loopDelayP99Ms}`,
        'CPU chain/pg/other': `${level.chainCpu.toFixed(2)}/${level.postgresCpu?.toFixed(2) ?? '–'}/${level.otherCpu?.toFixed(2) ?? '–'}`,
      })),
    );
  }
  const refusals = report.variants.some((v) => v.variant !== 'library' && v.variant !== 'baseline');
  return report.variants.flatMap((variant) =>
    variant.levels.map((level) => ({
      variant: variant.variant,
      load: `${level.multiplier}×`,
      'offered/s': level.rate,
      'goodput/s': level.goodput,
      '2nd half': level.goodputSecondHalf,
      'ok/shed/gave up': `${level.ok}/${level.shed}/${level.gaveUp}`,
      ...(refusals ? { refused: percent(level.refusedShare) } : {}),
      'p99 ms': level.gaveUp / Math.max(1, level.sent) > 0.01 ? `≥${budget} (gave up)` : level.p99Ms,
      'dead work': percent(level.database.deadWork),
      'inventory conns busy': level.database.inventoryBusyConnections,
      'to gateway p99 ms': level.arrivals.gateway.p99Ms ?? '–',
      recovery: recoveryCell(level),
      'CPU chain/pg/other': `${level.chainCpu.toFixed(2)}/${level.postgresCpu?.toFixed(2) ?? '–'}/${level.otherCpu?.toFixed(2) ?? '–'}`,
      ...(level.mariadbCpu === null ? {} : { 'CPU mariadb': level.mariadbCpu.toFixed(2) }),
    })),
  );
}
