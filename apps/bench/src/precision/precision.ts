/**
 * How precisely a budget is honoured, seen from outside the library:
 *
 * - expiry: a client inside `runWithDeadline(budget)` calls, through `createFetch()`, a loopback server that
 *   accepts and never answers; how late after the budget the fetch rejects (the goal: p99 ≤ +3 ms;
 *   for scale, gRPC-Go was measured at +4.2 ms at 300 ms). Next to it, two floors, each a bare `fetch()` on its own
 *   Agent: with `AbortSignal.timeout(budget)`, the platform's own timeout, which may fire early; and aborted by a
 *   `setTimeout` re-armed when it fires early (`neverEarlyTimeout`), the least a timeout that may not fire early
 *   costs. Budgets and the three variants alternate batch after batch, so a noisy machine moves all of them alike.
 *   The silent server runs in a process of its own (on the other core when it can be pinned), so the client's
 *   loop does nothing but the measured calls; a full GC runs before each batch. Beside the figures, what else
 *   went on: the client's own event-loop delay (a 1 ms timer probe), GC pauses inside batches, preemptions, load
 *   average, and per row the calls late beyond the goal during a GC pause or while the loop was stalled. On a
 *   shared machine the tail is the machine's: a late call comes with a stalled loop, for the floor as for the
 *   library.
 *   `AbortSignal.timeout()` fires early now and then (Node's timers run on a cached whole-ms clock); the library
 *   never does, which costs it about half a millisecond at the median, as it costs the never-early floor:
 *   `early` and `min` say so.
 * - budget lost per hop: a chain fastify → express → fastify, each hop forwarding with `createFetch({ marginMs:
 *   0 })`; each hop records the budget it received, and the difference between neighbours is what the hop and
 *   the wire cost the request (goal: p99 ≤ 2 ms).
 *
 * One monotonic clock; nothing is printed (progress goes to the callback).
 */
import { spawn } from 'node:child_process';
import { once } from 'node:events';
import { readFileSync } from 'node:fs';
import type { Server } from 'node:http';
import { loadavg } from 'node:os';
import { monitorEventLoopDelay, PerformanceObserver } from 'node:perf_hooks';
import { setTimeout as sleep } from 'node:timers/promises';
import { fileURLToPath } from 'node:url';
import { setFlagsFromString } from 'node:v8';
import { runInNewContext } from 'node:vm';
import { DeadlineExceededError, runWithDeadline } from '@deadline/core';
import { deadline as expressDeadline } from '@deadline/express';
import { fastifyDeadline, type RequestDeadline } from '@deadline/fastify';
import { createFetch } from '@deadline/http';
import express from 'express';
import Fastify, { type FastifyInstance } from 'fastify';
import { Agent, request } from 'undici';
import { canPin } from '../overhead/overhead.js';
import { type LatencyRow, latencyRow, round2 } from '../shared/precision-stats.js';
import { readyUrl } from '../shared/ready-url.js';

export interface PrecisionOptions {
  /** Requests per budget for the expiry rows, and runs of the three-hop chain. */
  requests: number;
  /** Budgets (ms) whose expiry is measured. */
  budgets: number[];
  /**
   * Warm up before measuring: a batch per variant, and `CHAIN_WARMUP` runs of the chain. Default true; the quick
   * run skips it (it measures nothing).
   */
  warmUp?: boolean;
}

/** Client-observed expiry − budget, for one budget (ms). */
export interface ExpiryRow extends LatencyRow {
  budgetMs: number;
  /** The earliest rejection relative to the budget: negative means a call cut before its deadline. */
  min: number | null;
  /** Calls that rejected before their budget had passed (the platform's timers may fire early; ours must not). */
  early: number;
  /**
   * Calls later than the goal (+3 ms), and of those: during a GC pause; while the client's event loop was stalled
   * ≥ 3 ms (a 1 ms timer in the same process fired that late, between the call's deadline and its rejection).
   */
  late: number;
  lateDuringGc: number;
  lateDuringStall: number;
  /**
   * The same figures over the calls during which the client's loop never stalled ≥ 3 ms: what the library and the
   * platform give when the machine lets the process run. Beside p99, never instead.
   */
  undisturbed: { n: number; p50: number | null; p99: number | null };
}

/**
 * What else was going on while the expiry rows were measured, so that a reader can tell the machine's noise from
 * the library's cost: any timer in the client process was as late as `eventLoopDelay` says, library or not.
 */
export interface ExpiryConditions {
  /** Where the silent server ran (never in the client's process). */
  server: string;
  /** The CPUs the client (this process) may run on. */
  clientCpus: string;
  /** 1-minute load average of the machine when the measured batches started and when they ended. */
  loadAverage: [number, number];
  /**
   * How late a 1 ms timer in the client process fired, sampled all through the measured batches
   * (monitorEventLoopDelay, its 1 ms interval taken off; ms).
   */
  eventLoopDelay: { p50: number; p99: number; max: number };
  /** Whether a full GC was forced before each batch (no batch inherits the previous one's garbage). */
  gcBeforeEachBatch: boolean;
  /** GC pauses that fell inside a measured batch (PerformanceObserver 'gc'), and the longest (ms). */
  gcPausesInBatches: number;
  gcLongestMs: number;
  /** Times the kernel took the CPU away from the client while a batch ran (getrusage): other work preempting it. */
  involuntaryContextSwitches: number;
  /** CPU time the hypervisor gave elsewhere during the batches (/proc/stat steal, ms, all CPUs); null off Linux. */
  stealMs: number | null;
}

/** Budget lost between two neighbouring hops: what `from` received − what `to` received (ms). */
export interface HopRow extends LatencyRow {
  from: string;
  to: string;
  /**
   * How much later `to`'s deadline falls than `from`'s on this process's clock (p50, p99; ms): time in transit
   * that a relative budget header does not charge, less the rounding down to whole ms. Informative, no goal.
   */
  expiryShiftP50: number;
  expiryShiftP99: number;
}

export interface PrecisionReport {
  expiry: {
    /** Requests in flight at once. */
    batchSize: number;
    /** Starts within a batch are this far apart (ms), so their deadlines do not all fall on one tick. */
    staggerMs: number;
    /** Through the library: `runWithDeadline(budget)` around `createFetch()`. */
    rows: ExpiryRow[];
    /**
     * The floor, measured alternately with `rows`: bare `fetch()` with `AbortSignal.timeout(budget)`. What the
     * platform and this machine give at best; its goal and `met` are for comparison only.
     */
    floor: ExpiryRow[];
    /**
     * The floor for a timeout that may not fire early, measured alternately with the others: bare `fetch()` aborted
     * by a timer re-armed for the rest when it fires before the budget (`neverEarlyTimeout`). For comparison only.
     */
    neverEarlyFloor: ExpiryRow[];
    conditions: ExpiryConditions;
    /** For scale. */
    reference: string;
  };
  hops: {
    /** The X-Request-Deadline the client sends to the first hop (ms). */
    sentBudgetMs: number;
    runs: number;
    perHop: HopRow[];
  };
}

const BATCH_SIZE = 20;
const STAGGER_MS = 2;
/** The silent server's core; main.ts runs this process (the client) on the other one. */
const SERVER_CPU = 0;
/** The event-loop delay probe's interval (ms): a timer like the ones measured, firing every ms. */
const LOOP_PROBE_MS = 1;
const EXPIRY_GOAL_MS = 3;
const HOP_GOAL_MS = 2;
const CHAIN_BUDGET_MS = 2_000;
const CHAIN_WARMUP = 20;

export async function measurePrecision(
  options: PrecisionOptions,
  progress: (line: string) => void,
): Promise<PrecisionReport> {
  const expiry = await measureExpiry(options, progress);
  const hops = await measureHops(options.requests, options.warmUp === false ? 0 : CHAIN_WARMUP, progress);
  return { expiry, hops };
}

/** The hop that never answers, in its own process (pinned to the core the client does not run on, when it can be). */
async function silentServer(): Promise<{ url: string; pinned: boolean; close: () => Promise<void> }> {
  const script = fileURLToPath(new URL('./precision-silent-server.js', import.meta.url));
  const pinned = canPin();
  const command = [process.execPath, script];
  const child = pinned
    ? spawn('taskset', ['-c', String(SERVER_CPU), ...command], { stdio: ['ignore', 'pipe', 'inherit'] })
    : spawn(process.execPath, [script], { stdio: ['ignore', 'pipe', 'inherit'] });
  const close = async () => {
    if (child.exitCode !== null || child.signalCode !== null) return;
    const exited = once(child, 'exit');
    child.kill();
    await exited;
  };
  try {
    return { url: await readyUrl(child, 'precision: the silent server exited before listening'), pinned, close };
  } catch (error) {
    await close();
    throw error;
  }
}

/** A full, synchronous GC: `global.gc` when node runs with --expose-gc, else exposed at run time; undefined if neither works. */
function fullGc(): (() => void) | undefined {
  const exposed = (globalThis as { gc?: () => void }).gc;
  if (typeof exposed === 'function') return exposed;
  try {
    setFlagsFromString('--expose-gc');
    const gc = runInNewContext('gc') as unknown;
    return typeof gc === 'function' ? (gc as () => void) : undefined;
  } catch {
    return undefined;
  }
}

/** The CPUs this process may run on (Linux: `Cpus_allowed_list`), else 'any'. */
function allowedCpus(): string {
  try {
    return /Cpus_allowed_list:\s*(\S+)/.exec(readFileSync('/proc/self/status', 'utf8'))?.[1] ?? 'any';
  } catch {
    return 'any';
  }
}

/** CPU time stolen from this virtual machine by the hypervisor so far, ms (Linux /proc/stat); undefined elsewhere. */
function stealMs(): number | undefined {
  try {
    const fields = readFileSync('/proc/stat', 'utf8').split('\n')[0]?.trim().split(/\s+/) ?? [];
    const ticks = Number(fields[8]);
    return Number.isFinite(ticks) ? ticks * 10 : undefined;
  } catch {
    return undefined;
  }
}

type ExpiryVariant = 'library' | 'floor' | 'never-early floor';

/**
 * The platform's own timer, made never early the simplest way: armed for the budget at the call's start, and when it
 * fires before the deadline (Node runs timers on the loop's cached whole-ms clock), armed again for the rest, at
 * least 1 ms. What any never-early timeout built on Node's timers costs, with no queue and no context: the
 * library's floor once it may not fire early.
 */
function neverEarlyTimeout(budget: number): AbortSignal {
  const controller = new AbortController();
  const due = performance.now() + budget;
  const check = () => {
    const left = due - performance.now();
    if (left > 0) setTimeout(check, Math.max(1, Math.round(left)));
    else controller.abort(new DOMException('the budget ran out', 'TimeoutError'));
  };
  setTimeout(check, budget);
  return controller.signal;
}

/** One call's outcome: when its deadline fell and when the client saw the rejection (performance.now()). */
interface ExpirySample {
  due: number;
  rejectedAt: number;
  /** rejectedAt − due (ms). */
  late: number;
}

/**
 * When the client's loop was held up: a 1 ms interval notes each gap of at least `thresholdMs` beyond its period,
 * as the stretch [when it was due, when it ran] on performance.now().
 */
class StallRecorder {
  readonly stalls: { from: number; to: number }[] = [];
  #timer: NodeJS.Timeout | undefined;
  #last = 0;
  constructor(readonly thresholdMs: number) {}

  start(): void {
    this.#last = performance.now();
    this.#timer = setInterval(() => this.#tick(), LOOP_PROBE_MS);
  }

  /**
   * Stops probing, noting first a stall still under way: a batch ends with its last rejection, which may come
   * out of a stall before the probe has had its turn again, and that stall (over the batch's last calls, by
   * construction the late ones) would otherwise go unrecorded and those calls count as undisturbed.
   */
  stop(): void {
    clearInterval(this.#timer);
    this.#tick();
  }

  #tick(): void {
    const now = performance.now();
    const due = this.#last + LOOP_PROBE_MS;
    if (now - due >= this.thresholdMs) this.stalls.push({ from: due, to: now });
    this.#last = now;
  }

  /** Whether a stall overlapped [from, to]. */
  during(from: number, to: number): boolean {
    return this.stalls.some((s) => s.to > from && s.from < to);
  }
}

async function measureExpiry(options: PrecisionOptions, progress: (line: string) => void) {
  const batchSize = Math.max(1, Math.min(BATCH_SIZE, options.requests));
  const agent = new Agent();
  const bareAgent = new Agent();
  const deadlineFetch = createFetch({ dispatcher: agent });
  const silent = await silentServer();
  const gc = fullGc();
  const variants: ExpiryVariant[] = ['library', 'floor', 'never-early floor'];
  const samples = new Map<string, ExpirySample[]>(
    options.budgets.flatMap((b) => variants.map((v): [string, ExpirySample[]] => [`${v} ${b}`, []])),
  );

  /** One call: its rejection, measured from just before the deadline context starts. */
  const expireOnce = async (variant: ExpiryVariant, budget: number): Promise<ExpirySample> => {
    const started = performance.now();
    let error: unknown;
    try {
      const res =
        variant === 'library'
          ? await runWithDeadline(budget, () => deadlineFetch(silent.url))
          : await fetch(silent.url, {
              dispatcher: bareAgent,
              signal: variant === 'floor' ? AbortSignal.timeout(budget) : neverEarlyTimeout(budget),
            } as unknown as RequestInit);
      await res.arrayBuffer();
    } catch (e) {
      error = e;
    }
    const rejectedAt = performance.now();
    const expected = variant === 'library' ? error instanceof DeadlineExceededError : isTimeout(error);
    if (!expected) throw new Error(`precision: a call to a silent server (${variant}) ended with ${String(error)}`);
    return { due: started + budget, rejectedAt, late: rejectedAt - started - budget };
  };

  // What else was going on: the client loop's own delay (a 1 ms timer, all batches), GC pauses, preemptions.
  const loopDelay = monitorEventLoopDelay({ resolution: LOOP_PROBE_MS });
  const gcPauses: { start: number; end: number }[] = [];
  const gcObserver = new PerformanceObserver((list) => {
    for (const entry of list.getEntries())
      gcPauses.push({ start: entry.startTime, end: entry.startTime + entry.duration });
  });
  let batchWindows: { start: number; end: number }[] = [];
  const stalls = new StallRecorder(EXPIRY_GOAL_MS);
  let switches = 0;

  const batch = async (variant: ExpiryVariant, budget: number, size: number): Promise<ExpirySample[]> => {
    // Each batch starts from a collected heap: a major GC owed to the previous batch's garbage does not land here.
    gc?.();
    const usage = process.resourceUsage();
    const start = performance.now();
    loopDelay.enable();
    stalls.start();
    const out = await Promise.all(
      Array.from({ length: size }, async (_, i) => {
        if (i > 0) await sleep(i * STAGGER_MS);
        return expireOnce(variant, budget);
      }),
    );
    stalls.stop();
    loopDelay.disable();
    batchWindows.push({ start, end: performance.now() });
    switches += process.resourceUsage().involuntaryContextSwitches - usage.involuntaryContextSwitches;
    return out;
  };

  let conditions: ExpiryConditions;
  try {
    // Warm-up: JIT, the interceptor's paths, connection setup. Not measured.
    if (options.warmUp !== false) {
      for (const variant of variants) await batch(variant, Math.min(...options.budgets), batchSize);
    }
    loopDelay.reset();
    batchWindows = [];
    switches = 0;
    gcObserver.observe({ entryTypes: ['gc'] });
    const loadAtStart = loadavg()[0] ?? 0;
    const stealAtStart = stealMs();
    const rounds = Math.ceil(options.requests / batchSize);
    for (let round = 1; round <= rounds; round++) {
      const size = Math.min(batchSize, options.requests - (round - 1) * batchSize);
      // Alternate the order each round so no batch always runs right after the same neighbour.
      const order = options.budgets.flatMap((b) => variants.map((v) => [v, b] as const));
      for (const [variant, budget] of round % 2 === 0 ? order.reverse() : order) {
        progress(`precision: expiry round ${round}/${rounds}, ${budget} ms budget, ${variant}`);
        samples.get(`${variant} ${budget}`)?.push(...(await batch(variant, budget, size)));
      }
    }
    const stealAtEnd = stealMs();
    // The observer delivers its entries asynchronously: let the last ones in.
    await sleep(10);
    gcObserver.disconnect();
    const inBatches = gcPauses.filter((p) => batchWindows.some((w) => p.end > w.start && p.start < w.end));
    const delay = (ns: number) => round2(Math.max(0, ns / 1e6 - LOOP_PROBE_MS));
    conditions = {
      server: silent.pinned ? `own process, CPU ${SERVER_CPU}` : 'own process, any CPU',
      clientCpus: allowedCpus(),
      loadAverage: [round2(loadAtStart), round2(loadavg()[0] ?? 0)],
      eventLoopDelay: {
        p50: delay(loopDelay.percentile(50)),
        p99: delay(loopDelay.percentile(99)),
        max: delay(loopDelay.max),
      },
      gcBeforeEachBatch: gc !== undefined,
      gcPausesInBatches: inBatches.length,
      gcLongestMs: round2(Math.max(0, ...inBatches.map((p) => p.end - p.start))),
      involuntaryContextSwitches: switches,
      stealMs: stealAtStart === undefined || stealAtEnd === undefined ? null : stealAtEnd - stealAtStart,
    };
  } finally {
    gcObserver.disconnect();
    loopDelay.disable();
    await silent.close();
    await Promise.all([agent.destroy(), bareAgent.destroy()]);
  }
  const duringGc = (s: ExpirySample) => gcPauses.some((p) => p.end > s.due && p.start < s.rejectedAt);
  const rowsOf = (variant: ExpiryVariant, label: string): ExpiryRow[] =>
    options.budgets.map((budget) => {
      const own = samples.get(`${variant} ${budget}`) as ExpirySample[];
      const late = own.filter((s) => s.late > EXPIRY_GOAL_MS);
      const quiet = own.filter((s) => !stalls.during(s.due, s.rejectedAt));
      const quietRow = latencyRow(
        '',
        quiet.map((s) => s.late),
        EXPIRY_GOAL_MS,
        '',
      );
      return {
        ...latencyRow(
          `${label}, ${budget} ms budget`,
          own.map((s) => s.late),
          EXPIRY_GOAL_MS,
          `p99 ≤ +${EXPIRY_GOAL_MS} ms late`,
        ),
        budgetMs: budget,
        min: own.length === 0 ? null : round2(Math.min(...own.map((s) => s.late))),
        early: own.filter((s) => s.late < 0).length,
        late: late.length,
        lateDuringGc: late.filter(duringGc).length,
        lateDuringStall: late.filter((s) => stalls.during(s.due, s.rejectedAt)).length,
        undisturbed: { n: quiet.length, p50: quietRow.p50, p99: quietRow.p99 },
      };
    });
  return {
    batchSize,
    staggerMs: STAGGER_MS,
    rows: rowsOf('library', 'createFetch() in runWithDeadline: expiry − budget'),
    floor: rowsOf('floor', 'bare fetch + AbortSignal.timeout (floor): expiry − budget'),
    neverEarlyFloor: rowsOf('never-early floor', 'bare fetch + a timer re-armed when early (floor): expiry − budget'),
    conditions,
    reference: 'gRPC-Go, measured: +4.2 ms at a 300 ms budget',
  };
}

/** `AbortSignal.timeout()` fired: fetch rejects with its `TimeoutError` DOMException. */
const isTimeout = (error: unknown) => (error as { name?: unknown } | undefined)?.name === 'TimeoutError';

/** What a hop saw of its request: the budget it received and its deadline on this process's clock. */
interface HopView {
  hop: string;
  budgetMs: number;
  expiresAt: number;
}

const viewOf = (hop: string, deadline: RequestDeadline | null | undefined): HopView => {
  if (deadline == null) throw new Error(`precision: hop ${hop} has no request deadline`);
  return { hop, budgetMs: deadline.budget.budgetMs, expiresAt: deadline.deadline.expiresAt };
};

async function listenFastify(app: FastifyInstance): Promise<string> {
  await app.listen({ port: 0, host: '127.0.0.1' });
  const { port } = app.server.address() as { port: number };
  return `http://127.0.0.1:${port}/`;
}

async function measureHops(runs: number, warmupRuns: number, progress: (line: string) => void) {
  const agents = [new Agent(), new Agent()];
  const client = new Agent();
  const [agentA, agentB] = agents as [Agent, Agent];
  const fetchFromA = createFetch({ marginMs: 0, dispatcher: agentA });
  const fetchFromB = createFetch({ marginMs: 0, dispatcher: agentB });
  const apps: FastifyInstance[] = [];
  let expressServer: Server | undefined;
  const names = ['fastify (1st hop)', 'express (2nd hop)', 'fastify (3rd hop)'] as const;
  const views: HopView[][] = [];
  try {
    // The last hop: records what it received.
    const last = Fastify({ logger: false });
    apps.push(last);
    await last.register(fastifyDeadline, { serviceName: 'hop-3' });
    last.get('/', async (req) => ({ hops: [viewOf('hop-3', req.deadline)] }));
    const lastUrl = await listenFastify(last);

    // The middle hop: express, forwarding to the last.
    const middle = express();
    middle.use(expressDeadline({ serviceName: 'hop-2' }));
    middle.get('/', async (req, res) => {
      const own = viewOf('hop-2', req.deadline);
      const down = (await (await fetchFromB(lastUrl)).json()) as { hops: HopView[] };
      res.json({ hops: [own, ...down.hops] });
    });
    expressServer = await new Promise<Server>((resolve) => {
      const server = middle.listen(0, '127.0.0.1', () => resolve(server));
    });
    const middleUrl = `http://127.0.0.1:${(expressServer.address() as { port: number }).port}/`;

    // The first hop: fastify, forwarding to the middle.
    const first = Fastify({ logger: false });
    apps.push(first);
    await first.register(fastifyDeadline, { serviceName: 'hop-1' });
    first.get('/', async (req) => {
      const own = viewOf('hop-1', req.deadline);
      const down = (await (await fetchFromA(middleUrl)).json()) as { hops: HopView[] };
      return { hops: [own, ...down.hops] };
    });
    const firstUrl = await listenFastify(first);

    const throughChain = async (): Promise<HopView[]> => {
      const res = await request(firstUrl, {
        dispatcher: client,
        headers: { 'x-request-deadline': String(CHAIN_BUDGET_MS) },
      });
      const body = (await res.body.json()) as { hops: HopView[] };
      if (res.statusCode !== 200 || body.hops.length !== 3) {
        throw new Error(`precision: the chain answered ${res.statusCode} ${JSON.stringify(body)}`);
      }
      return body.hops;
    };
    for (let i = 0; i < warmupRuns; i++) await throughChain();
    for (let run = 1; run <= runs; run++) {
      if (run % 20 === 1) progress(`precision: three-hop chain, run ${run}/${runs}`);
      views.push(await throughChain());
    }
  } finally {
    await Promise.all(apps.map((app) => app.close()));
    if (expressServer !== undefined) {
      expressServer.closeAllConnections();
      await new Promise((resolve) => expressServer?.close(resolve));
    }
    await Promise.all([...agents, client].map((agent) => agent.destroy()));
  }
  const perHop: HopRow[] = [0, 1].map((i) => {
    const losses = views.map((v) => (v[i] as HopView).budgetMs - (v[i + 1] as HopView).budgetMs);
    const shifts = views.map((v) => (v[i + 1] as HopView).expiresAt - (v[i] as HopView).expiresAt);
    const from = names[i] as string;
    const to = names[i + 1] as string;
    const shift = latencyRow('', shifts, 0, '');
    return {
      ...latencyRow(`budget lost, ${from} → ${to}`, losses, HOP_GOAL_MS, `p99 ≤ ${HOP_GOAL_MS} ms lost per hop`),
      from,
      to,
      expiryShiftP50: shift.p50 ?? 0,
      expiryShiftP99: shift.p99 ?? 0,
    };
  });
  return { sentBudgetMs: CHAIN_BUDGET_MS, runs, perHop };
}
