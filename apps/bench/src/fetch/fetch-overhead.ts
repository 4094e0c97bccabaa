/**
 * Overhead of the HTTP client side: loopback `fetch()` throughput through the deadline interceptor ÷ through
 * the same undici Agent bare, both inside a request's deadline context (where the interceptor does its work:
 * a budget computed, headers written, the call watched). Variants alternate round after round in this
 * process; the downstream is a bare node:http server in its own process on the other core.
 */
import { type ChildProcess, spawn } from 'node:child_process';
import { once } from 'node:events';
import { fileURLToPath } from 'node:url';
import { runWithDeadline } from '@deadline/core';
import type { Dispatcher } from 'undici';
import { canPin } from '../overhead/overhead.js';
import { readyUrl } from '../shared/ready-url.js';
import { FETCH_VARIANTS } from './fetch-variants.js';

export interface FetchOverheadOptions {
  rounds: number;
  seconds: number;
  /** Requests in flight at once. */
  concurrency: number;
  /** Load per variant before the rounds, not measured (s). Default 1; 0 skips it (the quick run measures nothing). */
  warmupSeconds?: number;
}

export interface FetchOverheadRow {
  variant: string;
  baseline: string;
  /** Median requests per second over the rounds. */
  requestsPerSecond: number;
  /** Per-round ratio to the baseline run next to it, median (1 = no overhead). */
  ratio: number;
  ratioSpread: [number, number];
  /** This process's CPU time per request (µs), median: the client's own cost, less moved by other tenants. */
  cpuMicrosPerRequest: number;
  /** The baseline's CPU per request ÷ this one's, per round, median. */
  cpuRatio: number;
}

const DOWNSTREAM_CPU = 0;
const median = (xs: number[]) => [...xs].sort((a, b) => a - b)[Math.floor(xs.length / 2)] as number;
const round3 = (x: number) => Math.round(x * 1000) / 1000;

/** The bare node:http downstream of the fetch benchmarks, in its own process (pinned to CPU 0 where it can be). */
export async function startDownstream(): Promise<{ url: string; child: ChildProcess }> {
  const script = fileURLToPath(new URL('../shared/hello-server.js', import.meta.url));
  const command = canPin()
    ? ['taskset', ['-c', String(DOWNSTREAM_CPU), process.execPath, script]]
    : [process.execPath, [script]];
  const child = spawn(command[0] as string, command[1] as string[], { stdio: ['ignore', 'pipe', 'inherit'] });
  return { url: await readyUrl(child, 'the downstream exited before listening'), child };
}

interface Variant {
  name: string;
  baseline: string;
  dispatcher: Dispatcher;
  inContext: boolean;
}

/** `concurrency` loops of fetch-and-read for `seconds`; returns completed requests per second, and CPU per request. */
async function load(
  url: string,
  variant: Variant,
  seconds: number,
  concurrency: number,
): Promise<{ rps: number; cpuMicros: number }> {
  const init = { dispatcher: variant.dispatcher } as unknown as RequestInit;
  const until = performance.now() + seconds * 1000;
  let done = 0;
  const worker = async () => {
    while (performance.now() < until) {
      const res = await fetch(url, init);
      await res.arrayBuffer();
      if (res.status !== 200) throw new Error(`${variant.name}: status ${res.status}`);
      done++;
    }
  };
  const started = performance.now();
  const cpuBefore = process.cpuUsage();
  const run = () => Promise.all(Array.from({ length: concurrency }, worker));
  // Ten minutes: the deadline never fires during a round; what is measured is the interceptor's work per call.
  await (variant.inContext ? runWithDeadline(600_000, run) : run());
  const cpu = process.cpuUsage(cpuBefore);
  return { rps: done / ((performance.now() - started) / 1000), cpuMicros: (cpu.user + cpu.system) / done };
}

export async function measureFetchOverhead(
  options: FetchOverheadOptions,
  progress: (line: string) => void,
): Promise<FetchOverheadRow[]> {
  const bare = FETCH_VARIANTS['fetch, bare Agent']();
  const dispatcher = FETCH_VARIANTS['fetch + DeadlineDispatcher']();
  const intercepted = FETCH_VARIANTS['fetch + deadlineInterceptor']();
  // The floor: an interceptor that does nothing (see fetch-variants.ts).
  const composed = FETCH_VARIANTS['fetch + an interceptor that does nothing']();
  const variants: Variant[] = [
    { name: 'fetch, bare Agent (in a deadline context)', baseline: '', dispatcher: bare, inContext: true },
    { name: 'fetch + DeadlineDispatcher', baseline: '', dispatcher, inContext: true },
    { name: 'fetch + deadlineInterceptor', baseline: '', dispatcher: intercepted, inContext: true },
    { name: 'fetch + an interceptor that does nothing', baseline: '', dispatcher: composed, inContext: true },
    { name: 'fetch, bare Agent (no context)', baseline: '', dispatcher: bare, inContext: false },
    { name: 'fetch + DeadlineDispatcher (no context)', baseline: '', dispatcher, inContext: false },
  ];
  for (const v of variants) v.baseline = v.inContext ? (variants[0] as Variant).name : (variants[4] as Variant).name;
  const samples = new Map<string, { rps: number; cpuMicros: number }[]>(variants.map((v) => [v.name, []]));
  const downstream = await startDownstream();
  try {
    const warmupSeconds = options.warmupSeconds ?? 1;
    if (warmupSeconds > 0) {
      for (const variant of variants) await load(downstream.url, variant, warmupSeconds, options.concurrency);
    }
    for (let round = 1; round <= options.rounds; round++) {
      const order = round % 2 === 0 ? [...variants].reverse() : variants;
      for (const variant of order) {
        progress(`fetch: round ${round}/${options.rounds}, ${variant.name}`);
        samples.get(variant.name)?.push(await load(downstream.url, variant, options.seconds, options.concurrency));
      }
    }
  } finally {
    downstream.child.kill();
    if (downstream.child.exitCode === null) await once(downstream.child, 'exit');
    await Promise.all([bare, dispatcher, intercepted, composed].map((dispatcher) => dispatcher.close()));
  }
  return variants.map((variant) => {
    const own = samples.get(variant.name) as { rps: number; cpuMicros: number }[];
    const base = samples.get(variant.baseline) as typeof own;
    const ratios = own.map((s, i) => s.rps / (base[i]?.rps as number));
    return {
      variant: variant.name,
      baseline: variant.baseline,
      requestsPerSecond: Math.round(median(own.map((s) => s.rps))),
      ratio: round3(median(ratios)),
      ratioSpread: [round3(Math.min(...ratios)), round3(Math.max(...ratios))],
      cpuMicrosPerRequest: Math.round(median(own.map((s) => s.cpuMicros)) * 10) / 10,
      cpuRatio: round3(median(own.map((s, i) => (base[i]?.cpuMicros as number) / s.cpuMicros))),
    };
  });
}
