/**
 * Overhead of a unary RPC through the library: loopback echo calls per second, and CPU per call at both ends, with
 * `@deadline/grpc` (grpc-js) or `@deadline/connect` (Connect over HTTP/2) on the client, the server or both ÷ the
 * same call bare. Every call is made inside a request's deadline context (where the client side does its work: a
 * deadline computed, the call watched); the server side builds a context per call. Variants alternate round after
 * round; the servers run in their own process, on the other core where it can be pinned.
 */
import { type ChildProcess, spawn } from 'node:child_process';
import { once } from 'node:events';
import { createInterface, type Interface } from 'node:readline';
import { fileURLToPath } from 'node:url';
import { runWithDeadline } from '@deadline/core';
import { canPin } from '../overhead/overhead.js';
import { connectEcho, type EchoCall, grpcEcho, type Side } from './rpc-services.js';

export interface RpcOverheadOptions {
  rounds: number;
  seconds: number;
  /** Calls in flight at once. */
  concurrency: number;
  /**
   * Calls per variant before the rounds, not measured (s). Default: 1, or a round's length when that is shorter;
   * 0 skips it (the quick run measures nothing).
   */
  warmupSeconds?: number;
}

export interface RpcOverheadRow {
  variant: string;
  baseline: string;
  /** Median calls per second over the rounds. */
  callsPerSecond: number;
  /** Per-round throughput ratio to the baseline run next to it, median (1 = no overhead). */
  ratio: number;
  ratioSpread: [number, number];
  /** CPU time per call, client and server processes together (µs), median. */
  cpuMicrosPerCall: number;
  /** The baseline's CPU per call ÷ this one's, per round, median (1 = no overhead). */
  cpuRatio: number;
}

interface Variant {
  name: string;
  baseline: string;
  stack: 'grpc' | 'connect';
  client: Side;
  server: Side;
}

const VARIANTS: Variant[] = (['grpc', 'connect'] as const).flatMap((stack) => {
  const label = stack === 'grpc' ? 'grpc-js' : 'Connect (gRPC over HTTP/2)';
  const library = stack === 'grpc' ? '@deadline/grpc' : '@deadline/connect';
  const baseline = `${label}, bare`;
  return [
    { name: baseline, baseline, stack, client: 'bare', server: 'bare' },
    { name: `${label} + ${library} (client and server)`, baseline, stack, client: 'library', server: 'library' },
    { name: `${label} + ${library} (client only)`, baseline, stack, client: 'library', server: 'bare' },
    { name: `${label} + ${library} (server only)`, baseline, stack, client: 'bare', server: 'library' },
  ] satisfies Variant[];
});

const SERVER_CPU = 0;
const median = (xs: number[]) => [...xs].sort((a, b) => a - b)[Math.floor(xs.length / 2)] as number;
const round3 = (x: number) => Math.round(x * 1000) / 1000;

/** The echo servers' process: their ports by name (`grpc bare`, …), and its output's lines. */
export interface EchoServers {
  ports: Record<string, number>;
  child: ChildProcess;
  lines: Interface;
}
type Servers = EchoServers;

/** Starts rpc-server-process.js (pinned to the other core where it can be) and waits for its servers' ports. */
export async function startEchoServerProcess(): Promise<EchoServers> {
  const script = fileURLToPath(new URL('./rpc-server-process.js', import.meta.url));
  const command = canPin()
    ? ['taskset', ['-c', String(SERVER_CPU), process.execPath, script]]
    : [process.execPath, [script]];
  const child = spawn(command[0] as string, command[1] as string[], { stdio: ['pipe', 'pipe', 'inherit'] });
  const lines = createInterface({ input: child.stdout as NodeJS.ReadableStream });
  const ports: Record<string, number> = {};
  for await (const line of lines) {
    const match = /^RPC (\w+ \w+) (\d+)$/.exec(line);
    if (match !== null) ports[match[1] as string] = Number(match[2]);
    if (line === 'READY') return { ports, child, lines };
  }
  throw new Error('the RPC servers exited before listening');
}

/** The server process's CPU time so far (µs). */
async function serverCpu(servers: Servers): Promise<number> {
  const answer = new Promise<number>((resolve) => {
    const onLine = (line: string) => {
      if (!line.startsWith('CPU ')) return;
      servers.lines.off('line', onLine);
      resolve(Number(line.slice(4)));
    };
    servers.lines.on('line', onLine);
  });
  servers.child.stdin?.write('CPU\n');
  return answer;
}

/** `concurrency` loops of calls for `seconds`; calls per second, and CPU per call at both ends. */
async function load(call: EchoCall, servers: Servers, seconds: number, concurrency: number) {
  const until = performance.now() + seconds * 1000;
  let done = 0;
  const worker = async () => {
    while (performance.now() < until) {
      await call();
      done++;
    }
  };
  const serverBefore = await serverCpu(servers);
  const started = performance.now();
  const cpuBefore = process.cpuUsage();
  // Ten minutes: the deadline never fires during a round; what is measured is the library's work per call.
  await runWithDeadline(600_000, () => Promise.all(Array.from({ length: concurrency }, worker)));
  const cpu = process.cpuUsage(cpuBefore);
  const elapsed = (performance.now() - started) / 1000;
  const server = (await serverCpu(servers)) - serverBefore;
  return { rps: done / elapsed, cpuMicros: (cpu.user + cpu.system + server) / done };
}

export async function measureRpcOverhead(
  options: RpcOverheadOptions,
  progress: (line: string) => void,
): Promise<RpcOverheadRow[]> {
  const servers = await startEchoServerProcess();
  const clients = VARIANTS.map((variant) => {
    const port = servers.ports[`${variant.stack} ${variant.server}`] as number;
    return variant.stack === 'grpc' ? grpcEcho(port, variant.client) : connectEcho(port, variant.client);
  });
  const samples = VARIANTS.map(() => [] as { rps: number; cpuMicros: number }[]);
  try {
    // Warm-up: 1 s per variant, or a round's length when that is shorter.
    const warmUp = options.warmupSeconds ?? Math.min(1, options.seconds);
    if (warmUp > 0) for (const client of clients) await load(client.call, servers, warmUp, options.concurrency);
    for (let round = 1; round <= options.rounds; round++) {
      const order = VARIANTS.map((_, i) => i);
      if (round % 2 === 0) order.reverse();
      for (const i of order) {
        progress(`rpc: round ${round}/${options.rounds}, ${VARIANTS[i]?.name}`);
        samples[i]?.push(
          await load((clients[i] as { call: EchoCall }).call, servers, options.seconds, options.concurrency),
        );
      }
    }
  } finally {
    for (const client of clients) client.close();
    servers.child.stdin?.end();
    if (servers.child.exitCode === null) {
      servers.child.kill();
      await once(servers.child, 'exit');
    }
  }
  return VARIANTS.map((variant, i) => {
    const own = samples[i] as { rps: number; cpuMicros: number }[];
    const base = samples[VARIANTS.findIndex((v) => v.name === variant.baseline)] as typeof own;
    const ratios = own.map((s, round) => s.rps / (base[round]?.rps as number));
    return {
      variant: variant.name,
      baseline: variant.baseline,
      callsPerSecond: Math.round(median(own.map((s) => s.rps))),
      ratio: round3(median(ratios)),
      ratioSpread: [round3(Math.min(...ratios)), round3(Math.max(...ratios))],
      cpuMicrosPerCall: Math.round(median(own.map((s) => s.cpuMicros)) * 10) / 10,
      cpuRatio: round3(median(own.map((s, round) => (base[round]?.cpuMicros as number) / s.cpuMicros))),
    };
  });
}
