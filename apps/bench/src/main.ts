/**
 * `npm run bench`: the benchmarks, printed as a table and written to bench-report.json.
 * `--quick` runs each once, briefly: a smoke test that they run, not a measurement.
 * `--instructions` adds the overhead counted in instructions per request (valgrind; slow, steady).
 */

import { spawnSync } from 'node:child_process';
import { writeFile } from 'node:fs/promises';
import { cpus } from 'node:os';
import { measureFetchOverhead } from './fetch-overhead.js';
import { canCountInstructions, countInstructions } from './instructions.js';
import { canPin, measureOverhead } from './overhead.js';

// The load generator runs here; pin it to the core the servers do not use (see overhead.ts).
if (process.env.DEADLINE_BENCH_PINNED === undefined && canPin()) {
  const child = spawnSync('taskset', ['-c', '1', process.execPath, ...process.argv.slice(1)], {
    stdio: 'inherit',
    env: { ...process.env, DEADLINE_BENCH_PINNED: '1' },
  });
  process.exit(child.status ?? 1);
}

const quick = process.argv.includes('--quick');
const options = quick ? { rounds: 1, seconds: 1, connections: 10 } : { rounds: 11, seconds: 2, connections: 50 };
const machine = {
  node: process.version,
  cpus: cpus().length,
  cpu: cpus()[0]?.model ?? 'unknown',
  pinned: process.env.DEADLINE_BENCH_PINNED === '1' ? 'server on CPU 0, load generator on CPU 1' : 'no',
};

console.log(`deadline benchmarks — Node ${machine.node}, ${machine.cpus} cores${quick ? ' (quick: smoke only)' : ''}`);
const overhead = await measureOverhead(options, (line) => process.stderr.write(`\r${line.padEnd(70)}`));
process.stderr.write('\n');
console.log('\nServer overhead (hello world, throughput ÷ the same framework bare; alternated rounds, medians):');
console.table(
  overhead.map((row) => ({
    variant: row.variant,
    'req/s': row.requestsPerSecond,
    'min–max': row.spread.join('–'),
    'vs bare': row.ratio.toFixed(3),
    'ratio min–max': row.ratioSpread.map((r) => r.toFixed(2)).join('–'),
    'p99 vs bare': row.p99Ratio?.toFixed(3) ?? '–',
    'CPU µs/req': row.cpuMicrosPerRequest ?? '–',
    'CPU vs bare': row.cpuRatio?.toFixed(3) ?? '–',
  })),
);
const fetchOverhead = await measureFetchOverhead(
  quick ? { rounds: 1, seconds: 1, concurrency: 4 } : { rounds: 11, seconds: 2, concurrency: 16 },
  (line) => process.stderr.write(`\r${line.padEnd(70)}`),
);
process.stderr.write('\n');
console.log('\nClient overhead (loopback fetch, throughput ÷ the same Agent bare; alternated rounds, medians):');
console.table(
  fetchOverhead.map((row) => ({
    variant: row.variant,
    'req/s': row.requestsPerSecond,
    'vs bare': row.ratio.toFixed(3),
    'ratio min–max': row.ratioSpread.map((r) => r.toFixed(2)).join('–'),
    'CPU µs/req': row.cpuMicrosPerRequest,
    'CPU vs bare': row.cpuRatio.toFixed(3),
  })),
);
let instructions: Awaited<ReturnType<typeof countInstructions>> | undefined;
if (process.argv.includes('--instructions')) {
  if (!canCountInstructions()) {
    console.log('\n--instructions: valgrind (callgrind) is not installed here; skipped.');
  } else {
    instructions = await countInstructions(quick ? 500 : 5_000, (line) => process.stderr.write(`\r${line.padEnd(70)}`));
    process.stderr.write('\n');
    console.log('\nServer overhead in instructions per request (callgrind; bare count ÷ this count):');
    console.table(
      instructions.map((row) => ({
        variant: row.variant,
        'instructions/req': row.instructionsPerRequest,
        'vs bare': row.ratio.toFixed(3),
      })),
    );
  }
}
await writeFile(
  'bench-report.json',
  `${JSON.stringify({ machine, options, overhead, fetchOverhead, instructions }, null, 2)}\n`,
);
console.log('written: bench-report.json');
