/**
 * `npm run bench`: the benchmarks, printed as a table and written to bench-report.json.
 * `--quick` runs each once, briefly, with next to no warm-up: a smoke test that every row is produced, not a
 * measurement.
 * The overhead counted in instructions per request (valgrind; slow, steady) is `npm run bench:instructions`
 * (instructions-main.ts).
 *
 * A full run must stay under 10 minutes on 2 cores (the issue's rule): the time each benchmark took, and the
 * whole run's, are printed at the end and written to the report (`seconds`). The budget, measured on 2 shared
 * cores: overhead on Node 20 (7 rounds of 2 s), client overhead (5 rounds of 2 s), precision, cancel latency,
 * dead work under overload, memory (50 s at most) with the newer Nodes' install (a download, when not cached)
 * beside it, then the overhead rows on the pinned newer Nodes — 22, 24 and 26, scripts/node-versions.json, the
 * versions CI runs the suite on — 3 rounds of 1 s each.
 */

import { spawnSync } from 'node:child_process';
import { writeFile } from 'node:fs/promises';
import { cpus } from 'node:os';
import { measureCancelLatency } from './cancel-latency/cancel-latency.js';
import { measureFetchOverhead } from './fetch/fetch-overhead.js';
import { measureIdempotencyLatency } from './idempotency/idempotency-latency.js';
import { measureMemory } from './memory/memory.js';
import { findNewerNodes, measureOverheadOn } from './node-versions/node-versions.js';
import { canPin, measureOverhead, type OverheadRow } from './overhead/overhead.js';
import { renderOverloadChart } from './overload/chart.js';
import { measureOverload, overloadRows } from './overload/overload.js';
import { CHAIN_VARIANTS } from './overload/overload-protocol.js';
import { measurePrecision } from './precision/precision.js';
import { measureRpcOverhead } from './rpc/rpc-overhead.js';
import type { LatencyRow } from './shared/precision-stats.js';

const quick = process.argv.includes('--quick');

// The load generator runs here; pin it to the core the servers do not use (see overhead.ts). Not in a quick run:
// it measures nothing, and the pinned second start would load every module again.
if (!quick && process.env.DEADLINE_BENCH_PINNED === undefined && canPin()) {
  const child = spawnSync('taskset', ['-c', '1', process.execPath, ...process.argv.slice(1)], {
    stdio: 'inherit',
    env: { ...process.env, DEADLINE_BENCH_PINNED: '1' },
  });
  process.exit(child.status ?? 1);
}

const runStarted = performance.now();
/** Wall time of each benchmark, s, in the order run; `total` is the whole run's. */
const seconds: Record<string, number> = {};
/** Runs one benchmark and records how long it took. */
async function phase<T>(name: string, run: () => Promise<T>): Promise<T> {
  const started = performance.now();
  try {
    return await run();
  } finally {
    seconds[name] = Math.round((performance.now() - started) / 100) / 10;
  }
}
/**
 * A quick run's round per variant (s), with no warm-up but one answered request before it (overhead.ts): long
 * enough for a barely warm server to answer some requests under autocannon (each row's figures must be above 0),
 * far too short to measure anything.
 */
const QUICK_ROUND_SECONDS = 0.25;
/**
 * The same for the client-side rows (fetch, RPC), with no warm-up at all: their loops finish every call they
 * started, so a round of any length counts some.
 */
const QUICK_CLIENT_ROUND_SECONDS = 0.1;
// Full: bounded so that the whole run stays under 10 minutes on 2 cores (the issue's rule).
const options = quick
  ? { rounds: 1, seconds: QUICK_ROUND_SECONDS, connections: 10, warmupSeconds: 0 }
  : { rounds: 7, seconds: 2, connections: 50 };
/** Client overhead: rounds of 2 s (5 variants). */
const FETCH_ROUNDS = 5;
/** RPC overhead: rounds of 1 s (8 variants: grpc-js and Connect, bare and the library at either end or both). */
const RPC_ROUNDS = 3;
/**
 * The overhead rows on the newer Nodes: 3 s of warm-up per variant (their optimising compiler is still at work
 * after 1 s: see overhead.ts), then 3 alternated rounds (a median) of 1 s each, 50 connections. Whole seconds
 * only: autocannon samples once a second and runs on to the next sample whatever the duration.
 */
const NEWER_NODE_OPTIONS = { rounds: 3, seconds: 1, connections: 50, warmupSeconds: 3 };
/** The memory benchmark drives up to 1M requests but stops after this long (the report says how many it made). */
const MEMORY_MAX_SECONDS = 50;
/** What else a full run is made of, for the report. */
const schedule = quick
  ? { quick: true }
  : {
      fetchOverhead: { rounds: FETCH_ROUNDS, seconds: 2 },
      rpcOverhead: { rounds: RPC_ROUNDS, seconds: 1 },
      newerNodes: NEWER_NODE_OPTIONS,
      memoryMaxSeconds: MEMORY_MAX_SECONDS,
      newerNodesInstalledDuring: 'memory',
    };
/** The issue's rule for a full run on 2 cores. */
const TIME_LIMIT_SECONDS = 600;
const machine = {
  node: process.version,
  cpus: cpus().length,
  cpu: cpus()[0]?.model ?? 'unknown',
  pinned: process.env.DEADLINE_BENCH_PINNED === '1' ? 'server on CPU 0, load generator on CPU 1' : 'no',
};

console.log(`deadline benchmarks — Node ${machine.node}, ${machine.cpus} cores${quick ? ' (quick: smoke only)' : ''}`);
const overhead = await phase('overhead', () =>
  measureOverhead(options, (line) => process.stderr.write(`\r${line.padEnd(70)}`)),
);
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
const fetchOverhead = await phase('fetchOverhead', () =>
  measureFetchOverhead(
    quick
      ? { rounds: 1, seconds: QUICK_CLIENT_ROUND_SECONDS, concurrency: 4, warmupSeconds: 0 }
      : { rounds: FETCH_ROUNDS, seconds: 2, concurrency: 16 },
    (line) => process.stderr.write(`\r${line.padEnd(70)}`),
  ),
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
const progress = (line: string) => process.stderr.write(`\r${line.padEnd(70)}`);
const done = () => process.stderr.write('\n');

const rpcOverhead = await phase('rpcOverhead', () =>
  measureRpcOverhead(
    quick
      ? { rounds: 1, seconds: QUICK_CLIENT_ROUND_SECONDS, concurrency: 4, warmupSeconds: 0 }
      : { rounds: RPC_ROUNDS, seconds: 1, concurrency: 16 },
    progress,
  ),
);
done();
console.log('\nRPC overhead (loopback unary echo, throughput ÷ the same stack bare; alternated rounds, medians):');
console.table(
  rpcOverhead.map((row) => ({
    variant: row.variant,
    'calls/s': row.callsPerSecond,
    'vs bare': row.ratio.toFixed(3),
    'ratio min–max': row.ratioSpread.map((r) => r.toFixed(2)).join('–'),
    'CPU µs/call (both ends)': row.cpuMicrosPerCall,
    'CPU vs bare': row.cpuRatio.toFixed(3),
  })),
);

const precision = await phase('precision', () =>
  measurePrecision(
    quick ? { requests: 5, budgets: [100], warmUp: false } : { requests: 200, budgets: [100, 300, 1_000] },
    progress,
  ),
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
console.log(
  '\nPrecision: client-observed expiry − budget (a hop that never answers), library, plain-fetch floor and never-early floor:',
);
latencyTable([...precision.expiry.rows, ...precision.expiry.floor, ...precision.expiry.neverEarlyFloor]);
{
  const c = precision.expiry.conditions;
  const undisturbed = [
    ...precision.expiry.rows.map((row) => `library ${row.budgetMs} ms ${row.undisturbed.p99 ?? '–'}`),
    ...precision.expiry.floor.map((row) => `floor ${row.budgetMs} ms ${row.undisturbed.p99 ?? '–'}`),
    ...precision.expiry.neverEarlyFloor.map(
      (row) => `never-early floor ${row.budgetMs} ms ${row.undisturbed.p99 ?? '–'}`,
    ),
  ].join(', ');
  console.log(
    `While measured: the client's event loop (1 ms probe) late p50 ${c.eventLoopDelay.p50} / p99 ${c.eventLoopDelay.p99} / max ${c.eventLoopDelay.max} ms; ` +
      `load average ${c.loadAverage.join(' → ')}; ${c.involuntaryContextSwitches} preemptions; GC pauses in batches ${c.gcPausesInBatches} ` +
      `(longest ${c.gcLongestMs} ms); silent server: ${c.server}, client on CPU ${c.clientCpus}.`,
  );
  console.log(`p99 over the calls during which the client's loop never stalled ≥ 3 ms: ${undisturbed}.`);
}
console.log(`\nBudget lost per hop (fastify → express → fastify, ${precision.hops.sentBudgetMs} ms sent, no margin):`);
latencyTable(precision.hops.perHop);

const cancel = await phase('cancel', () =>
  measureCancelLatency(quick ? { runs: 1, warmupRuns: 0 } : { runs: 100 }, progress),
);
done();
console.log(`\nCancel latency: from the deadline (${cancel.budgetMs} ms budget) to the work gone on the server:`);
latencyTable(cancel.rows);
console.log('Floor, measured alternately the same way: a raw CancelRequest sent at the deadline, without the library:');
latencyTable(cancel.floors);

const idempotency = await phase('idempotency', () =>
  measureIdempotencyLatency(quick ? { requests: 3, rounds: 1, warmup: 0 } : { requests: 1_500, rounds: 5 }, progress),
);
done();
console.log('\nIdempotency: latency of a POST with a fresh Idempotency-Key (fastify, sequential, loopback):');
console.table(
  idempotency.map((row) => ({
    variant: row.variant,
    n: row.n,
    'p50 ms': row.p50 ?? '–',
    'p99 ms': row.p99 ?? '–',
    'added p50 ms': row.addedP50 ?? '–',
    'added p99 ms': row.addedP99 ?? '–',
    skipped: row.skipped ?? '',
  })),
);

// Its four variants (fixed timeouts, the library, + @fastify/under-pressure, with admission), in shorter levels:
// the chart shows them all, and the run stays within its 10 minutes.
const overload = await phase('overload', () =>
  measureOverload({ quick, variants: [...CHAIN_VARIANTS], compact: true }, progress),
);
done();
console.log(
  '\nDead work under overload (three-hop chain, 1 s client budget; fixed per-hop timeouts, the library, + under-pressure, with admission):',
);
if (overload.skipped !== null) console.log(`skipped: ${overload.skipped}`);
else console.table(overloadRows(overload));
await writeFile('bench-chart.svg', renderOverloadChart(overload));

// The newer Nodes are installed (a download of ~30 MB each when not cached: ~7 s of which 5 of CPU) while the
// memory benchmark runs: it measures what the heap keeps, which a busy neighbour does not change (it only
// makes fewer requests within the cap). Full runs only: a quick run must not download anything.
const finding = quick ? undefined : findNewerNodes(() => {});
const memory = await phase('memory', () =>
  measureMemory(quick ? { requests: 100 } : { requests: 1_000_000, maxSeconds: MEMORY_MAX_SECONDS }, progress),
);
done();
console.log('\nMemory: requests through fastify + plugin + one outgoing fetch:');
console.table([memory]);

// Node 20 is past its end of life; AsyncLocalStorage is much cheaper on 22 and later. The same overhead rows on
// the pinned versions, binaries from the npm registry (full runs only: a quick run must not download anything).
const newerNodes: { node: string; overhead: OverheadRow[] }[] = [];
let newerSkipped: { version: string; reason: string }[] = [];
if (finding !== undefined) {
  // Usually done by now; if not, the wait is on the clock too.
  const found = await phase('newer Nodes install (beyond memory)', () => finding);
  newerSkipped = found.skipped;
  for (const binary of found.found) {
    // Fewer, shorter rounds than on this Node: two more full runs would not fit in the time the bench may take.
    const rows = await phase(`overhead ${binary.version}`, () =>
      measureOverheadOn(binary.path, NEWER_NODE_OPTIONS, progress),
    );
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
  for (const { version, reason } of newerSkipped) console.log(`Node ${version}: skipped (${reason})`);
}

seconds.total = Math.round((performance.now() - runStarted) / 100) / 10;
console.log(
  `\nTime: ${Object.entries(seconds)
    .map(([name, s]) => `${name} ${s} s`)
    .join(', ')}${quick ? '' : ` (the rule: ≤ ${TIME_LIMIT_SECONDS} s)`}`,
);
await writeFile(
  'bench-report.json',
  `${JSON.stringify({ machine, options, schedule, seconds, overhead, fetchOverhead, rpcOverhead, newerNodes, newerSkipped, precision, cancel, idempotency, overload, memory }, null, 2)}\n`,
);
console.log('written: bench-report.json, bench-chart.svg');
