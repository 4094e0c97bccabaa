/**
 * Overhead as instructions per request, counted by valgrind's callgrind: unlike throughput or CPU time, a
 * count does not move when other tenants of a shared machine take the CPU. Each measured process runs
 * single-threaded (V8's background compiler and GC threads would otherwise add work that varies run to run);
 * counting is switched on only after a warm-up, and only in the measured process: a server (servers.ts) under
 * autocannon's load, or a fetch client (fetch-client-process.ts) against a bare downstream. The work of V8's
 * compilers that still falls in the window is left out of the count and reported beside it (callgrind-dump.ts).
 */
import { type ChildProcess, execFileSync, spawn, spawnSync } from 'node:child_process';
import { once } from 'node:events';
import { mkdtemp, readdir, readFile, rm } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { fileURLToPath } from 'node:url';
import autocannon from 'autocannon';
import { readDump } from './callgrind-dump.js';
import type { FetchVariant } from './fetch-variants.js';
import { readyUrl } from './ready-url.js';
import type { Variant } from './servers.js';

/** What is counted: a server variant under load, or a client variant's fetches. */
export type Target = { kind: 'server'; variant: Variant } | { kind: 'client'; variant: FetchVariant };

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
      node,
      '--single-threaded',
      '--expose-gc',
      // V8's memory reducer checks the allocation rate every 8 s of wall time and collects the whole heap when it
      // looks idle. Under valgrind a process runs tens of times slower, slower still once counting is on, so a
      // check inside a window could take it for idle and put a full collection (~100M instructions) in one
      // count. A server under load never sees it.
      '--no-memory-reducer',
      script,
      ...args,
    ],
    { stdio: ['pipe', 'pipe', 'ignore'] },
  );
}

function toggle(child: ChildProcess, on: boolean): void {
  execFileSync('callgrind_control', ['-i', on ? 'on' : 'off', String(child.pid)], { stdio: 'ignore' });
}

/**
 * V8's entries from running code into its compilers and its tiering decisions (names from V8 11 to 14): lazy
 * compilation, Sparkplug, Maglev and TurboFan, on-stack replacement. None of them calls another.
 */
const JIT_ENTRIES =
  /v8::internal::Runtime_(Compile\w*|Optimize(Turbofan|Maglev)\w*|InstallBaselineCode|BytecodeBudgetInterrupt\w*)\(/;

/** A window's count, per request: without the JIT's work in it (see callgrind-dump.ts), and that work. */
export interface Count {
  instructionsPerRequest: number;
  jitPerRequest: number;
}

/** The count of the window: the dump taken on request is `callgrind.<pid>.1`. */
async function windowCount(child: ChildProcess, dir: string, what: string, requests: number): Promise<Count> {
  execFileSync('callgrind_control', ['-d', String(child.pid)], { stdio: 'ignore' });
  const dump = (await readdir(dir)).find((name) => name.endsWith('.1'));
  if (dump === undefined) throw new Error(`${what}: no callgrind dump`);
  const { total, under } = readDump(await readFile(join(dir, dump), 'utf8'), JIT_ENTRIES);
  return { instructionsPerRequest: (total - under) / requests, jitPerRequest: under / requests };
}

async function stop(child: ChildProcess): Promise<void> {
  child.kill('SIGTERM');
  if (child.exitCode === null && child.signalCode === null) await once(child, 'exit');
}

async function countServer(node: string, variant: Variant, options: CountOptions, dir: string): Promise<Count> {
  const script = fileURLToPath(new URL('./server-process.js', import.meta.url));
  const child = underCallgrind(node, dir, script, [variant]);
  try {
    const url = await readyUrl(child, `${variant}: the server did not start under valgrind`);
    // One load run, on one set of connections, counted in its middle: new connections make V8 deoptimize and
    // recompile Node's own HTTP code, a fixed cost (~460M instructions here) that would otherwise land in the
    // window and shrink every ratio towards 1.
    // With a callback autocannon returns its instance (events, stop()); the result itself is not needed.
    const load = autocannon(
      { url, connections: 4, amount: Number.MAX_SAFE_INTEGER, headers: { 'x-request-deadline': '5000' } },
      () => {},
    );
    let seen = 0;
    let countedFrom = -1;
    await new Promise<void>((resolve) => {
      load.on('response', () => {
        seen++;
        if (seen === options.warmUp) {
          toggle(child, true);
          countedFrom = seen;
        } else if (countedFrom >= 0 && seen === countedFrom + options.requests) {
          toggle(child, false);
          load.stop();
          resolve();
        }
      });
    });
    return await windowCount(child, dir, variant, options.requests);
  } finally {
    await stop(child);
  }
}

/**
 * Waits for what `child` prints: `printed(line)` resolves once its output holds `line` (rejects if it exits first).
 * One 'data' listener for the child's life: an async iterator over stdout would close the stream when left.
 */
function outputOf(child: ChildProcess, what: string): (line: string) => Promise<void> {
  let output = '';
  let exited = false;
  const waiting = new Set<() => void>();
  child.stdout?.on('data', (chunk: Buffer) => {
    output += chunk.toString();
    for (const check of waiting) check();
  });
  child.once('exit', () => {
    exited = true;
    for (const check of waiting) check();
  });
  return (line) =>
    new Promise<void>((resolve, reject) => {
      const check = () => {
        if (output.includes(line)) resolve();
        else if (exited) reject(new Error(`${what}: exited before printing ${line}`));
        else return;
        waiting.delete(check);
      };
      waiting.add(check);
      check();
    });
}

async function countClient(
  node: string,
  variant: FetchVariant,
  downstream: string,
  options: CountOptions,
  dir: string,
): Promise<Count> {
  const script = fileURLToPath(new URL('./fetch-client-process.js', import.meta.url));
  const child = underCallgrind(node, dir, script, [
    variant,
    downstream,
    String(options.warmUp),
    String(options.requests),
  ]);
  const printed = outputOf(child, variant);
  try {
    await printed('WARM');
    toggle(child, true);
    child.stdin?.write('GO\n');
    await printed('DONE');
    toggle(child, false);
    return await windowCount(child, dir, variant, options.requests);
  } finally {
    await stop(child);
  }
}

/**
 * Instructions per request of `target`, run by `node` (V8's compilers' share apart); `downstream` is the URL a
 * client fetches (a bare server of the caller's, not counted).
 */
export async function countInstructions(
  node: string,
  target: Target,
  options: CountOptions,
  downstream: string,
): Promise<Count> {
  const dir = await mkdtemp(join(tmpdir(), 'deadline-callgrind-'));
  try {
    return target.kind === 'server'
      ? await countServer(node, target.variant, options, dir)
      : await countClient(node, target.variant, downstream, options, dir);
  } finally {
    await rm(dir, { recursive: true, force: true });
  }
}
