/**
 * Overhead of the server adapters: hello-world throughput with the library ÷ the same framework bare, with
 * @fastify/request-context ÷ bare fastify as the peer reference. Variants run alternately, round after round,
 * and each figure is a median, so that a shared, noisy machine moves all of them alike.
 */
import { type ChildProcess, spawn, spawnSync } from 'node:child_process';
import { once } from 'node:events';
import { readFileSync } from 'node:fs';
import { cpus } from 'node:os';
import { fileURLToPath } from 'node:url';
import autocannon from 'autocannon';
import { readyUrl } from '../shared/ready-url.js';
import { BASELINE, COUNT_ONLY, VARIANTS, type Variant } from './servers.js';

export interface OverheadOptions {
  rounds: number;
  /** Length of each variant's round (s); under a second (the quick run) is sampled once, over the whole round. */
  seconds: number;
  connections: number;
  /**
   * Load per variant before the rounds, not measured (s). Default 1. Node 22 and 24 keep optimising hot code
   * for tens of thousands of requests (tier-up): rounds measured inside it are mostly compilation, which
   * shrinks every ratio towards 1 and penalises the variant with more code. 0 (the quick run, which measures
   * nothing): one request per server instead, awaited however long it takes, so that no round (a short one)
   * opens on a server that has never answered — its first answer can take longer than the round on a busy machine.
   */
  warmupSeconds?: number;
}

export interface OverheadRow {
  variant: Variant;
  baseline: Variant;
  /** Median requests per second over the rounds. */
  requestsPerSecond: number;
  /** Lowest and highest round. */
  spread: [number, number];
  /** Median p99 latency, ms. */
  p99Ms: number;
  /**
   * Throughput ÷ the baseline's, computed per round against the baseline run next to it, then the median
   * (1 = no overhead). Pairing adjacent runs cancels most of a shared machine's drift.
   */
  ratio: number;
  /** Lowest and highest per-round ratio. */
  ratioSpread: [number, number];
  /** The baseline's p99 ÷ this p99, per round, median (1 = no added tail latency). */
  p99Ratio: number | null;
  /**
   * Server CPU time per request (user + system, from /proc; µs), median. Time stolen by other tenants is not
   * charged to the process, so this moves less than throughput on a shared machine. `null` where /proc is absent.
   */
  cpuMicrosPerRequest: number | null;
  /** The baseline's CPU per request ÷ this one's, per round, median. */
  cpuRatio: number | null;
}

/** The server gets one core and the load generator the other, so they do not steal each other's time. */
const SERVER_CPU = 0;

function pinned(cpu: number, command: string[]): [string, string[]] {
  if (canPin()) return ['taskset', ['-c', String(cpu), ...command]];
  return [command[0] as string, command.slice(1)];
}

export function canPin(): boolean {
  return process.platform === 'linux' && cpus().length >= 2 && spawnSync('taskset', ['-V']).status === 0;
}

const median = (xs: number[]) => [...xs].sort((a, b) => a - b)[Math.floor(xs.length / 2)] as number;

async function startServer(variant: Variant): Promise<{ url: string; child: ChildProcess }> {
  const script = fileURLToPath(new URL('./server-process.js', import.meta.url));
  const child = spawn(...pinned(SERVER_CPU, [process.execPath, script, variant]), {
    stdio: ['ignore', 'pipe', 'inherit'],
  });
  return { url: await readyUrl(child, `server for ${variant} exited before listening`), child };
}

/** User + system CPU time of a process so far, in µs (Linux /proc); undefined elsewhere. */
function cpuMicros(pid: number | undefined): number | undefined {
  if (pid === undefined) return undefined;
  try {
    const fields = readFileSync(`/proc/${pid}/stat`, 'utf8').split(') ')[1]?.split(' ') ?? [];
    const ticks = Number(fields[11]) + Number(fields[12]);
    return Number.isFinite(ticks) ? (ticks * 1_000_000) / CLOCK_TICKS : undefined;
  } catch {
    return undefined;
  }
}
/** USER_HZ: 100 on every Linux this runs on. */
const CLOCK_TICKS = 100;
/**
 * autocannon's sample (ms): it counts requests per sample and stops only at a sample's end. A round shorter than
 * this (the quick run) is sampled once over its own length, so that it ends when asked, not a second later.
 */
const SAMPLE_MS = 1_000;

async function load(url: string, seconds: number, connections: number, pid: number | undefined) {
  const sampleMs = Math.min(SAMPLE_MS, seconds * 1000);
  const cpuBefore = cpuMicros(pid);
  const result = await autocannon({
    url,
    connections,
    duration: seconds,
    sampleInt: sampleMs,
    // The propagated case: every request carries a budget the server has to parse.
    headers: { 'x-request-deadline': '5000' },
  });
  const cpuAfter = cpuMicros(pid);
  if (result.non2xx > 0 || result.errors > 0) {
    throw new Error(`${url}: ${result.non2xx} non-2xx, ${result.errors} errors`);
  }
  const cpu =
    cpuBefore === undefined || cpuAfter === undefined ? undefined : (cpuAfter - cpuBefore) / result.requests.total;
  // Requests per sample, averaged over the samples, per second of sample.
  return { rps: result.requests.average / (sampleMs / 1000), p99: result.latency.p99, cpu };
}

/** One request, awaited however long a cold server takes to answer it. */
async function firstAnswer(url: string): Promise<void> {
  const res = await fetch(url, { headers: { 'x-request-deadline': '5000' } });
  await res.arrayBuffer();
  if (res.status !== 200) throw new Error(`${url}: status ${res.status}`);
}

export async function measureOverhead(
  options: OverheadOptions,
  progress: (line: string) => void,
): Promise<OverheadRow[]> {
  const variants = (Object.keys(VARIANTS) as Variant[]).filter((variant) => !COUNT_ONLY.has(variant));
  const servers = new Map<Variant, { url: string; child: ChildProcess }>();
  const samples = new Map<Variant, { rps: number; p99: number; cpu: number | undefined }[]>(
    variants.map((v) => [v, []]),
  );
  const run = async (variant: Variant, seconds: number) => {
    const server = servers.get(variant) as { url: string; child: ChildProcess };
    return load(server.url, seconds, options.connections, server.child.pid);
  };
  try {
    for (const variant of variants) servers.set(variant, await startServer(variant));
    // Warm-up: JIT and connection pools, not measured.
    const warmupSeconds = options.warmupSeconds ?? 1;
    for (const variant of variants) {
      if (warmupSeconds > 0) await run(variant, warmupSeconds);
      else await firstAnswer((servers.get(variant) as { url: string }).url);
    }
    for (let round = 1; round <= options.rounds; round++) {
      // Alternate the order each round so no variant always runs right after the same neighbour.
      const order = round % 2 === 0 ? [...variants].reverse() : variants;
      for (const variant of order) {
        progress(`overhead: round ${round}/${options.rounds}, ${variant}`);
        samples.get(variant)?.push(await run(variant, options.seconds));
      }
    }
  } finally {
    for (const { child } of servers.values()) {
      child.kill();
      if (child.exitCode === null) await once(child, 'exit');
    }
  }
  const round3 = (x: number) => Math.round(x * 1000) / 1000;
  return variants.map((variant) => {
    const baseline = BASELINE[variant];
    const own = samples.get(variant) as { rps: number; p99: number; cpu: number | undefined }[];
    const base = samples.get(baseline) as typeof own;
    const ratios = own.map((s, i) => s.rps / (base[i]?.rps as number));
    const cpus = own.map((s) => s.cpu).filter((c): c is number => c !== undefined);
    const cpuRatios = own.flatMap((s, i) => (s.cpu && base[i]?.cpu ? [(base[i]?.cpu as number) / s.cpu] : []));
    const rps = own.map((s) => s.rps);
    return {
      variant,
      baseline,
      requestsPerSecond: Math.round(median(rps)),
      spread: [Math.round(Math.min(...rps)), Math.round(Math.max(...rps))],
      p99Ms: median(own.map((s) => s.p99)),
      ratio: round3(median(ratios)),
      ratioSpread: [round3(Math.min(...ratios)), round3(Math.max(...ratios))],
      // autocannon reports whole ms: a p99 of 0 (sub-millisecond) has no meaningful ratio.
      p99Ratio: own.every((s, i) => s.p99 > 0 && (base[i]?.p99 ?? 0) > 0)
        ? round3(median(own.map((s, i) => (base[i]?.p99 as number) / s.p99)))
        : null,
      cpuMicrosPerRequest: cpus.length === 0 ? null : Math.round(median(cpus) * 10) / 10,
      cpuRatio: cpuRatios.length === 0 ? null : round3(median(cpuRatios)),
    };
  });
}
