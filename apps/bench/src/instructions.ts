/**
 * Overhead as instructions per request, counted by valgrind's callgrind: unlike throughput or CPU time, a
 * count does not move when other tenants of a shared machine take the CPU. Each server runs single-threaded
 * (V8's background compiler and GC threads would otherwise add work that varies run to run); counting is
 * switched on only after a warm-up. Slow (valgrind runs the server ~50× slower): opt in with --instructions.
 */
import { type ChildProcess, execFileSync, spawn, spawnSync } from 'node:child_process';
import { once } from 'node:events';
import { mkdtemp, readdir, readFile, rm } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { fileURLToPath } from 'node:url';
import autocannon from 'autocannon';
import { readyUrl } from './ready-url.js';
import { BASELINE, VARIANTS, type Variant } from './servers.js';

export interface InstructionsRow {
  variant: Variant;
  baseline: Variant;
  instructionsPerRequest: number;
  /** The baseline's count ÷ this one's (1 = no overhead). */
  ratio: number;
}

/** Responses before counting starts: Node 22 and 24 are still compiling hot code (tier-up) at 8,000. */
const WARM_UP = 30_000;

export function canCountInstructions(): boolean {
  return spawnSync('valgrind', ['--version']).status === 0 && spawnSync('callgrind_control', ['-h']).status !== null;
}

async function count(variant: Variant, requests: number, dir: string): Promise<number> {
  const script = fileURLToPath(new URL('./server-process.js', import.meta.url));
  const child: ChildProcess = spawn(
    'valgrind',
    [
      '--tool=callgrind',
      '--smc-check=all',
      '--instr-atstart=no',
      `--callgrind-out-file=${join(dir, 'callgrind.%p')}`,
      process.execPath,
      '--single-threaded',
      script,
      variant,
    ],
    { stdio: ['ignore', 'pipe', 'ignore'] },
  );
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
    const toggle = (on: boolean) =>
      execFileSync('callgrind_control', ['-i', on ? 'on' : 'off', String(child.pid)], { stdio: 'ignore' });
    let seen = 0;
    let countedFrom = -1;
    await new Promise<void>((resolve) => {
      load.on('response', () => {
        seen++;
        if (seen === WARM_UP) {
          toggle(true);
          countedFrom = seen;
        } else if (countedFrom >= 0 && seen === countedFrom + requests) {
          toggle(false);
          load.stop();
          resolve();
        }
      });
    });
    execFileSync('callgrind_control', ['-d', String(child.pid)], { stdio: 'ignore' });
  } finally {
    child.kill('SIGTERM');
    if (child.exitCode === null) await once(child, 'exit');
  }
  // The dump taken on request is `callgrind.<pid>.1`; its `totals:` line is the count for the window.
  const dump = (await readdir(dir)).find((name) => name.endsWith('.1'));
  if (dump === undefined) throw new Error(`${variant}: no callgrind dump`);
  const totals = /^totals:\s+(\d+)/m.exec(await readFile(join(dir, dump), 'utf8'))?.[1];
  return Number(totals) / requests;
}

export async function countInstructions(
  requests: number,
  progress: (line: string) => void,
): Promise<InstructionsRow[]> {
  const counts = new Map<Variant, number>();
  for (const variant of Object.keys(VARIANTS) as Variant[]) {
    progress(`instructions: ${variant} (valgrind, slow)`);
    const dir = await mkdtemp(join(tmpdir(), 'deadline-callgrind-'));
    try {
      counts.set(variant, await count(variant, requests, dir));
    } finally {
      await rm(dir, { recursive: true, force: true });
    }
  }
  return [...counts].map(([variant, instructions]) => ({
    variant,
    baseline: BASELINE[variant],
    instructionsPerRequest: Math.round(instructions),
    ratio: Math.round(((counts.get(BASELINE[variant]) as number) / instructions) * 1000) / 1000,
  }));
}
