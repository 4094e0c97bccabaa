/**
 * `npm run soak`: the demo chain under ten minutes of mixed load while its databases restart and its links
 * misbehave (soak.ts), judged against the conditions (verdict.ts). Prints each check with its figures,
 * writes soak-report.json (the verdict, the faults, the samples) and soak-timeline.svg, and exits 0 only if every
 * check passed.
 *
 *   --minutes N   how long the load runs (default 10; at least 0.5; growth, and goodput back to 90 % within
 *                 2 s of each fault, are judged from 4)
 *   --rate R      requests per second instead of 70 % of the capacity measured first
 *   --logs DIR    keep each service's pino lines in DIR/<service>.log
 *
 * A bad argument is named on stderr, with the usage, and the run exits 2; a setup that fails (no MariaDB, no
 * redis-server) says why in one line and exits 1.
 */
import { mkdir, writeFile } from 'node:fs/promises';
import { runSoak } from './soak.js';
import { renderTimeline, timelineOf } from './timeline-chart.js';
import { judge } from './verdict.js';

const USAGE = 'usage: npm run soak -- [--minutes N] [--rate R] [--logs DIR]';

interface Arguments {
  minutes: number;
  rate: number | undefined;
  logs: string | undefined;
}

function readArguments(args: string[]): Arguments | string {
  const parsed: Arguments = { minutes: 10, rate: undefined, logs: undefined };
  for (let i = 0; i < args.length; i++) {
    const arg = args[i];
    const value = args[i + 1];
    if (arg === '--minutes' || arg === '--rate') {
      const n = Number(value);
      if (value === undefined || !Number.isFinite(n) || n <= 0) return `${arg} takes a positive number, not ${value}`;
      if (arg === '--minutes' && n < 0.5) return `--minutes takes 0.5 or more (a fault plan needs 30 s), not ${value}`;
      if (arg === '--minutes') parsed.minutes = n;
      else parsed.rate = n;
      i++;
    } else if (arg === '--logs') {
      if (value === undefined) return '--logs takes a directory';
      parsed.logs = value;
      i++;
    } else return `unknown argument ${arg}`;
  }
  return parsed;
}

const parsed = readArguments(process.argv.slice(2));
if (typeof parsed === 'string') {
  process.stderr.write(`soak: ${parsed}\n${USAGE}\n`);
  process.exit(2);
}
if (parsed.logs !== undefined) await mkdir(parsed.logs, { recursive: true });
const started = performance.now();
let result: Awaited<ReturnType<typeof runSoak>>;
try {
  result = await runSoak({
    durationMs: parsed.minutes * 60_000,
    rate: parsed.rate,
    logDir: parsed.logs,
    progress: (line) => process.stderr.write(`soak: ${line}\n`),
  });
} catch (error) {
  process.stderr.write(`soak: failed to run: ${(error as Error).message}\n`);
  process.exit(1);
}
const verdict = judge(result);
for (const check of verdict.checks) {
  const mark = check.pass === null ? 'n/a ' : check.pass ? 'ok  ' : 'FAIL';
  console.log(`${mark} ${check.name}\n       ${check.detail}`);
}
const seconds = Math.round((performance.now() - started) / 1000);
console.log(`${verdict.pass ? 'passed' : 'FAILED'}: ${result.records.length} requests, ${seconds} s in all`);
// The records stay out (tens of thousands); the timeline keeps what the chart draws, to draw it again.
const { records: _records, ...kept } = result;
const timeline = timelineOf(result, verdict);
await writeFile('soak-report.json', `${JSON.stringify({ seconds, verdict, timeline, ...kept }, null, 2)}\n`);
await writeFile('soak-timeline.svg', renderTimeline(timeline));
process.exit(verdict.pass ? 0 : 1);
