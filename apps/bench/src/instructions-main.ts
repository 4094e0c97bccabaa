/**
 * `npm run bench:instructions`: the overhead in instructions per request (callgrind), alone, on this machine's
 * Node and on the pinned newer ones (scripts/node-versions.json: 22, 24 and 26) — for fastify, express and
 * fetch: bare, the floor of any AsyncLocalStorage adapter (or of any undici interceptor), the peer that does
 * less (`@fastify/request-context`), and the library. Printed as one table, written to instructions-report.json.
 *
 * Two counts run at a time (one per core: a count does not move with the load beside it, only the wall time
 * does). `--quick`: a short warm-up and window, a smoke test of the harness, not a measurement. `--node 24,26`:
 * those majors only. `--only fastify,express`: those frameworks' rows only.
 */
import { writeFile } from 'node:fs/promises';
import { cpus } from 'node:os';
import { startDownstream } from './fetch-overhead.js';
import type { FetchVariant } from './fetch-variants.js';
import { type CountOptions, canCountInstructions, countInstructions, type Target } from './instructions.js';
import { findNewerNodes, type NodeBinary } from './node-versions.js';
import type { Variant } from './servers.js';

/** What a row is to its framework's bare row. */
type Role = 'bare' | 'floor' | 'peer' | 'library';

interface Row {
  framework: 'fastify' | 'express' | 'fetch';
  role: Role;
  target: Target;
}

const server = (variant: Variant): Target => ({ kind: 'server', variant });
const client = (variant: FetchVariant): Target => ({ kind: 'client', variant });

const ROWS: Row[] = [
  { framework: 'fastify', role: 'bare', target: server('fastify') },
  { framework: 'fastify', role: 'floor', target: server('fastify + als.run only') },
  { framework: 'fastify', role: 'peer', target: server('fastify + @fastify/request-context') },
  { framework: 'fastify', role: 'library', target: server('fastify + @deadline/fastify') },
  { framework: 'express', role: 'bare', target: server('express') },
  { framework: 'express', role: 'floor', target: server('express + als.run only') },
  { framework: 'express', role: 'library', target: server('express + @deadline/express') },
  { framework: 'fetch', role: 'bare', target: client('fetch, bare Agent') },
  { framework: 'fetch', role: 'floor', target: client('fetch + a dispatcher that only forwards') },
  { framework: 'fetch', role: 'library', target: client('fetch + DeadlineDispatcher') },
];

const quick = process.argv.includes('--quick');
/** `--only fastify,fetch`: those frameworks' rows only. */
const onlyFrameworks = process.argv.includes('--only')
  ? process.argv[process.argv.indexOf('--only') + 1]?.split(',')
  : undefined;
const rows = ROWS.filter((row) => onlyFrameworks === undefined || onlyFrameworks.includes(row.framework));
const onlyMajors = process.argv[process.argv.indexOf('--node') + 1]?.split(',').map(Number);
const wantMajor = (version: string) =>
  !process.argv.includes('--node') || (onlyMajors ?? []).includes(Number(version.replace(/^v/, '').split('.')[0]));
/**
 * Server counts after 30,000 responses repeat within 0.5k (Node 22 and 24 are still optimising hot code after
 * 8,000; after 12,000 Node 26's floor and peer rows came out 3–9k apart from run to run). A client needs 10,000
 * fetches (after 6,000 its counts on Node 24 were a third lower and unstable); each client window is framed by full
 * collections (fetch-client-process.ts). A count then takes ~40 s (server) and ~65 s (client) here, most of it
 * valgrind starting Node and running the warm-up.
 */
const COUNTS: Record<Target['kind'], CountOptions> = quick
  ? { server: { warmUp: 1_000, requests: 200 }, client: { warmUp: 500, requests: 100 } }
  : { server: { warmUp: 30_000, requests: 5_000 }, client: { warmUp: 10_000, requests: 2_000 } };
const AT_ONCE = Math.max(1, Math.min(2, cpus().length));

const progress = (line: string) => process.stderr.write(`\r${line.padEnd(90)}`);

/** Each Node's count for each row, and the time the whole run took. */
interface Report {
  machine: { node: string; cpus: number; cpu: string };
  options: typeof COUNTS;
  nodes: string[];
  skipped: { version: string; reason: string }[];
  rows: {
    framework: Row['framework'];
    role: Role;
    variant: string;
    counts: Record<string, { instructionsPerRequest: number; ratioToBare: number }>;
  }[];
  seconds: number;
}

/** Runs `jobs`, `limit` at a time. */
async function pooled(jobs: (() => Promise<void>)[], limit: number): Promise<void> {
  let next = 0;
  const worker = async () => {
    while (next < jobs.length) await (jobs[next++] as () => Promise<void>)();
  };
  await Promise.all(Array.from({ length: limit }, worker));
}

const kilo = (n: number) => `${(n / 1000).toFixed(1)}k`;

if (!canCountInstructions()) {
  console.error('bench:instructions needs valgrind (callgrind): apt-get install valgrind');
  process.exit(1);
}
const started = performance.now();
const newer = await findNewerNodes(progress);
const nodes: NodeBinary[] = [{ version: process.version, path: process.execPath }, ...newer.found].filter((node) =>
  wantMajor(node.version),
);
const downstream = await startDownstream();
let done = 0;
const total = nodes.length * rows.length;
const counts = new Map<string, number>();
try {
  await pooled(
    nodes.flatMap((node) =>
      rows.map((row) => async () => {
        const count = await countInstructions(node.path, row.target, COUNTS[row.target.kind], downstream.url);
        counts.set(`${node.version} ${row.target.variant}`, count);
        progress(`instructions: ${++done}/${total} (${node.version} ${row.target.variant}: ${kilo(count)})`);
      }),
    ),
    AT_ONCE,
  );
} finally {
  downstream.child.kill();
}
process.stderr.write('\n');

const countOf = (node: NodeBinary, row: Row) => counts.get(`${node.version} ${row.target.variant}`) as number;
const bareOf = (row: Row) => ROWS.find((other) => other.framework === row.framework && other.role === 'bare') as Row;
const report: Report = {
  machine: { node: process.version, cpus: cpus().length, cpu: cpus()[0]?.model ?? 'unknown' },
  options: COUNTS,
  nodes: nodes.map((node) => node.version),
  skipped: newer.skipped,
  rows: rows.map((row) => ({
    framework: row.framework,
    role: row.role,
    variant: row.target.variant,
    counts: Object.fromEntries(
      nodes.map((node) => [
        node.version,
        {
          instructionsPerRequest: Math.round(countOf(node, row)),
          ratioToBare: Math.round((countOf(node, bareOf(row)) / countOf(node, row)) * 1000) / 1000,
        },
      ]),
    ),
  })),
  seconds: Math.round((performance.now() - started) / 1000),
};

console.log(
  `\nInstructions per request (callgrind; in brackets: bare ÷ this, 1 = no overhead)${quick ? ' — quick: smoke only' : ''}:`,
);
console.table(
  report.rows.map((row) => ({
    variant: row.variant,
    ...Object.fromEntries(
      Object.entries(row.counts).map(([version, c]) => [
        version,
        `${kilo(c.instructionsPerRequest)} (${c.ratioToBare.toFixed(3)})`,
      ]),
    ),
  })),
);
for (const skip of newer.skipped) console.log(`not measured: Node ${skip.version} (${skip.reason})`);
console.log(`${report.seconds} s in all`);
await writeFile('instructions-report.json', `${JSON.stringify(report, null, 2)}\n`);
