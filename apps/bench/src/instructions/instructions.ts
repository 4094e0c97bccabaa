/**
 * Overhead as instructions per request, counted by valgrind's callgrind: unlike throughput or CPU time, a
 * count does not move when other tenants of a shared machine take the CPU. Each measured process runs
 * single-threaded (V8's background compiler and GC threads would otherwise add work that varies run to run);
 * counting is switched on only after a warm-up, and only in the measured process: a server (servers.ts) under
 * autocannon's load, or a client (fetch-client-process.ts, rpc-client-process.ts) against a bare downstream. The work of V8's
 * compilers that still falls in the window is left out of the count and reported beside it (callgrind-dump.ts).
 */
import { type ChildProcess, execFileSync, spawn, spawnSync } from 'node:child_process';
import { once } from 'node:events';
import { mkdtemp, readdir, readFile, rm } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { fileURLToPath } from 'node:url';
import autocannon from 'autocannon';
import type { FetchVariant } from '../fetch/fetch-variants.js';
import type { Variant } from '../overhead/servers.js';
import { RPC_CLIENT_VARIANTS, type RpcClientVariant } from '../rpc/rpc-client-process.js';
import { readDump } from './callgrind-dump.js';
import { ChildOutput } from './child-output.js';

/** What is counted: a server variant under load, a client variant's fetches, or an RPC client variant's calls. */
export type Target =
  | { kind: 'server'; variant: Variant }
  | { kind: 'client'; variant: FetchVariant }
  | { kind: 'rpc-client'; variant: RpcClientVariant };

/** Where the clients counted send their calls: the bare fetch downstream's URL, the bare echo servers' ports. */
export interface Downstreams {
  url: string;
  /** By stack (`grpc`, `connect`): the port of its bare echo server (rpc-server-process.ts). */
  rpcPorts?: Record<string, number> | undefined;
}

/** How long each count runs: the requests before counting starts, and those counted. */
export interface CountOptions {
  /** Responses (or fetches) before counting starts: hot code must have been optimised by then. */
  warmUp: number;
  requests: number;
}

export function canCountInstructions(): boolean {
  return spawnSync('valgrind', ['--version']).status === 0 && spawnSync('callgrind_control', ['-h']).status !== null;
}

/** `node` (any binary) running `script` under callgrind, counting off until switched on. */
function underCallgrind(node: string, dir: string, script: string, args: string[]): ChildProcess {
  return spawn(
    'valgrind',
    [
      '--tool=callgrind',
      // V8's code lives in anonymous mappings, which valgrind's default (all-non-file) already checks for
      // self-modified code; `all` also checks Node's own binary, which never changes, at a large cost in time.
      '--smc-check=all-non-file',
      '--instr-atstart=no',
      `--callgrind-out-file=${join(dir, 'callgrind.%p')}`,
      // callgrind_control reaches the process through FIFOs named by this prefix: in the count's directory, they go
      // with it (a killed process leaves its own behind, see stop).
      `--vgdb-prefix=${vgdbPrefix(dir)}`,
      node,
      '--single-threaded',
      '--expose-gc',
      // V8's memory reducer checks the allocation rate every 8 s of wall time and collects the whole heap when it
      // looks idle. Under valgrind a process runs tens of times slower, slower still once counting is on, so a
      // check inside a window could take it for idle and put a full collection (~100M instructions) in one
      // count. A server under load never sees it.
      '--no-memory-reducer',
      // The young generation collected when it is full, at one size on every Node and in every variant: V8 would
      // otherwise size it by what survives and collect it early from a task when it nears its limit, both moved by
      // timing, so one variant's windows would hold two collections where another's hold three for nothing it does
      // (0.4k a request, fastify on Node 22). 8 MB: Node 24's largest young generation under the scavenger.
      '--no-minor-gc-task',
      '--min-semi-space-size=8',
      '--max-semi-space-size=8',
      // A line per collection on stdout: the young generation's are counted for their rate (windowCount).
      '--trace-gc',
      script,
      ...args,
    ],
    { stdio: ['pipe', 'pipe', 'ignore'] },
  );
}

const vgdbPrefix = (dir: string) => join(dir, 'vgdb');

/** Runs `callgrind_control` with `args` on the count's process, whose FIFOs are in `dir`. */
function control(child: ChildProcess, dir: string, ...args: string[]): void {
  execFileSync('callgrind_control', [`--vgdb-prefix=${vgdbPrefix(dir)}`, ...args, String(child.pid)], {
    stdio: 'ignore',
  });
}

function toggle(child: ChildProcess, dir: string, on: boolean): void {
  control(child, dir, '-i', on ? 'on' : 'off');
}

/**
 * V8's entries from running code into its compilers and its tiering decisions (names from V8 11 to 14): lazy
 * compilation, Sparkplug, Maglev and TurboFan, on-stack replacement. None of them calls another.
 */
const JIT_ENTRIES =
  /v8::internal::Runtime_(Compile\w*|Optimize(Turbofan|Maglev)\w*|InstallBaselineCode|BytecodeBudgetInterrupt\w*)\(/;

/** V8's young-generation collection (V8 11 to 14), the collection a server under steady load makes. */
const SCAVENGE = /^v8::internal::Heap::Scavenge\(\)$/;

/**
 * A window's count, per request: without the JIT's work in it (see callgrind-dump.ts), and that work; with its
 * young-generation collections at their expected cost, and what they cost in the window itself.
 */
export interface Count {
  instructionsPerRequest: number;
  jitPerRequest: number;
  /** The collections' share of `instructionsPerRequest`: their mean cost in the window × their rate. */
  gcPerRequest: number;
  /** What the collections that fell in the window cost it, per request (their share before). */
  gcInWindowPerRequest: number;
}

/**
 * How often a process collects its young generation, per request, over a stretch longer than the window:
 * `collections` of them over `requests`.
 */
interface CollectionRate {
  collections: number;
  requests: number;
}

/**
 * The count of the window: the dump taken on request is `callgrind.<pid>.1`.
 *
 * Why the collections are taken at their rate: a young-generation collection costs ~1M instructions here, one
 * every ~1,300 requests (fastify), so a window of 2,000 holds one or two by where it starts, not by what a request
 * allocates: ±0.5k a request. With the `rate` (counted over a stretch five to eight times as long, from `--trace-gc`'s
 * lines) the window's collections count at their mean cost times that rate. (A collection set off inside a compile
 * would be taken out twice, with the JIT's work and with the collections': servers' windows hold no compiles after
 * their warm-up, a fetch client's do, and there this is not checked.)
 */
async function windowCount(
  child: ChildProcess,
  dir: string,
  what: string,
  requests: number,
  rate: CollectionRate,
): Promise<Count> {
  control(child, dir, '-d');
  const dump = (await readdir(dir)).find((name) => name.endsWith('.1'));
  if (dump === undefined) throw new Error(`${what}: no callgrind dump`);
  const text = await readFile(join(dir, dump), 'utf8');
  const { total, under: jit } = readDump(text, JIT_ENTRIES);
  const gc = readDump(text, SCAVENGE);
  const gcInWindowPerRequest = gc.under / requests;
  // Without a collection in the window there is no cost to take the mean of: the window's own (none) stands.
  const gcPerRequest =
    gc.calls === 0 || rate.requests === 0
      ? gcInWindowPerRequest
      : (gc.under / gc.calls) * (rate.collections / rate.requests);
  return {
    instructionsPerRequest: (total - jit - gc.under) / requests + gcPerRequest,
    jitPerRequest: jit / requests,
    gcPerRequest,
    gcInWindowPerRequest,
  };
}

/**
 * Ends a count's process. Killed, not asked to exit: its count was read from the window's dump, and on exit
 * callgrind writes one more (every symbol of the JIT's code: ~0.6 s a count here, 40 in a run).
 */
async function stop(child: ChildProcess): Promise<void> {
  child.kill('SIGKILL');
  if (child.exitCode === null && child.signalCode === null) await once(child, 'exit');
}

async function countServer(node: string, variant: Variant, options: CountOptions, dir: string): Promise<Count> {
  const script = fileURLToPath(new URL('../overhead/server-process.js', import.meta.url));
  const child = underCallgrind(node, dir, script, [variant]);
  const output = new ChildOutput(child, variant);
  try {
    const port = (await output.line(/^READY (\d+)$/)).match[1];
    // One load run, on one set of connections, counted in its middle: new connections make V8 deoptimize and
    // recompile Node's own HTTP code, a fixed cost (~460M instructions here) that would otherwise land in the
    // window and shrink every ratio towards 1.
    // With a callback autocannon returns its instance (events, stop()); the result itself is not needed.
    const load = autocannon(
      {
        url: `http://127.0.0.1:${port}/`,
        connections: 4,
        amount: Number.MAX_SAFE_INTEGER,
        headers: { 'x-request-deadline': '5000' },
      },
      () => {},
    );
    // The collections' rate: from half-way through the warm-up to the window's end.
    const rateFrom = Math.floor(options.warmUp / 2);
    let seen = 0;
    let countedFrom = -1;
    let scavengesBefore = 0;
    await new Promise<void>((resolve) => {
      load.on('response', () => {
        seen++;
        if (seen === rateFrom) scavengesBefore = output.scavenges;
        if (seen === options.warmUp) {
          toggle(child, dir, true);
          countedFrom = seen;
        } else if (countedFrom >= 0 && seen === countedFrom + options.requests) {
          toggle(child, dir, false);
          load.stop();
          resolve();
        }
      });
    });
    const rate = { collections: output.scavenges - scavengesBefore, requests: seen - rateFrom };
    return await windowCount(child, dir, variant, options.requests, rate);
  } finally {
    await stop(child);
  }
}

/** A client process (`script`: fetch-client-process.js, rpc-client-process.js) calling `downstream`, counted. */
async function countClient(
  node: string,
  script: string,
  variant: string,
  downstream: string,
  options: CountOptions,
  dir: string,
): Promise<Count> {
  const child = underCallgrind(node, dir, fileURLToPath(new URL(script, import.meta.url)), [
    variant,
    downstream,
    String(options.warmUp),
    String(options.requests),
  ]);
  const output = new ChildOutput(child, variant);
  try {
    // The collections' rate: over the last three quarters of the warm-up, up to the full collection that ends it.
    const from = await output.line(/^RATE FROM (\d+)$/);
    const collecting = await output.line(/^COLLECTING (\d+)$/);
    const rate = {
      collections: collecting.scavenges - from.scavenges,
      requests: Number(collecting.match[1]) - Number(from.match[1]),
    };
    await output.line(/^WARM$/);
    toggle(child, dir, true);
    child.stdin?.write('GO\n');
    await output.line(/^DONE$/);
    toggle(child, dir, false);
    return await windowCount(child, dir, variant, options.requests, rate);
  } finally {
    await stop(child);
  }
}

/**
 * Instructions per request of `target`, run by `node` (V8's compilers' share apart); a client calls `downstreams`
 * (bare servers of the caller's, not counted).
 */
export async function countInstructions(
  node: string,
  target: Target,
  options: CountOptions,
  downstreams: Downstreams,
): Promise<Count> {
  const dir = await mkdtemp(join(tmpdir(), 'deadline-callgrind-'));
  try {
    if (target.kind === 'server') return await countServer(node, target.variant, options, dir);
    if (target.kind === 'client') {
      return await countClient(node, '../fetch/fetch-client-process.js', target.variant, downstreams.url, options, dir);
    }
    const port = downstreams.rpcPorts?.[RPC_CLIENT_VARIANTS[target.variant].stack];
    if (port === undefined) throw new Error(`${target.variant}: no echo server to call`);
    return await countClient(node, '../rpc/rpc-client-process.js', target.variant, String(port), options, dir);
  } finally {
    await rm(dir, { recursive: true, force: true });
  }
}
