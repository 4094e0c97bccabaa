/**
 * `npm run bench:instructions`: the overhead in instructions per request (callgrind), alone, on this machine's
 * Node and on the pinned newer ones (scripts/node-versions.json: 22, 24 and 26) — for fastify, express and
 * fetch: bare, the floor of any AsyncLocalStorage adapter (or of any undici interceptor), the peer that does
 * less (`@fastify/request-context`), and the library; for Koa, Hono and NestJS (on express and on fastify): bare, the
 * floor and the library; for the RPC clients (grpc-js, Connect): bare, with a deadline of their own per call (the
 * floor: what a deadline costs the library underneath), and the library.
 * Printed as one table, written to instructions-report.json.
 *
 * Two counts run at a time (one per core: a count does not move with the load beside it, only the wall time
 * does). `--quick`: a short warm-up and window, a smoke test of the harness, not a measurement. `--node 24,26`:
 * those majors only. `--only fastify,express` (or `grpc,connect`, `koa,hono`): those frameworks' rows only. `--rpc`:
 * the RPC clients' rows too, `--frameworks` Koa's, Hono's and NestJS's (each left out by default: they would take the
 * run past 10 minutes). `--minimum`: the hand-written complete minima too (fastify's, express's, Koa's and Hono's).
 */
import { writeFile } from 'node:fs/promises';
import { cpus } from 'node:os';
import { startDownstream } from './fetch/fetch-overhead.js';
import type { FetchVariant } from './fetch/fetch-variants.js';
import {
  type Count,
  type CountOptions,
  canCountInstructions,
  countInstructions,
  type Target,
} from './instructions/instructions.js';
import { findNewerNodes, type NodeBinary } from './node-versions/node-versions.js';
import type { Variant } from './overhead/servers.js';
import type { RpcClientVariant } from './rpc/rpc-client-process.js';
import { startEchoServerProcess } from './rpc/rpc-overhead.js';

/** What a row is to its framework's bare row. */
type Role = 'bare' | 'floor' | 'peer' | 'minimum' | 'library';

interface Row {
  framework: 'fastify' | 'express' | 'koa' | 'hono' | 'nest-express' | 'nest-fastify' | 'fetch' | 'grpc' | 'connect';
  role: Role;
  target: Target;
}

const server = (variant: Variant): Target => ({ kind: 'server', variant });
const client = (variant: FetchVariant): Target => ({ kind: 'client', variant });
const rpcClient = (variant: RpcClientVariant): Target => ({ kind: 'rpc-client', variant });

const ROWS: Row[] = [
  { framework: 'fastify', role: 'bare', target: server('fastify') },
  { framework: 'fastify', role: 'floor', target: server('fastify + als.run only') },
  { framework: 'fastify', role: 'peer', target: server('fastify + @fastify/request-context') },
  { framework: 'fastify', role: 'minimum', target: server('fastify + complete deadline minimum') },
  { framework: 'fastify', role: 'library', target: server('fastify + @deadline/fastify') },
  { framework: 'express', role: 'bare', target: server('express') },
  { framework: 'express', role: 'floor', target: server('express + als.run only') },
  { framework: 'express', role: 'minimum', target: server('express + complete deadline minimum') },
  { framework: 'express', role: 'library', target: server('express + @deadline/express') },
  { framework: 'koa', role: 'bare', target: server('koa') },
  { framework: 'koa', role: 'floor', target: server('koa + als.run only') },
  { framework: 'koa', role: 'minimum', target: server('koa + complete deadline minimum') },
  { framework: 'koa', role: 'library', target: server('koa + @deadline/koa') },
  { framework: 'hono', role: 'bare', target: server('hono') },
  { framework: 'hono', role: 'floor', target: server('hono + als.run only') },
  { framework: 'hono', role: 'minimum', target: server('hono + complete deadline minimum') },
  { framework: 'hono', role: 'library', target: server('hono + @deadline/hono') },
  { framework: 'nest-express', role: 'bare', target: server('nest (express)') },
  { framework: 'nest-express', role: 'floor', target: server('nest (express) + als.run only') },
  {
    framework: 'nest-express',
    role: 'minimum',
    target: server('nest (express) + als.run and a pass-through interceptor'),
  },
  { framework: 'nest-express', role: 'library', target: server('nest (express) + @deadline/nestjs') },
  { framework: 'nest-fastify', role: 'bare', target: server('nest (fastify)') },
  { framework: 'nest-fastify', role: 'floor', target: server('nest (fastify) + als.run only') },
  {
    framework: 'nest-fastify',
    role: 'minimum',
    target: server('nest (fastify) + als.run and a pass-through interceptor'),
  },
  { framework: 'nest-fastify', role: 'library', target: server('nest (fastify) + @deadline/nestjs') },
  { framework: 'fetch', role: 'bare', target: client('fetch, bare Agent') },
  { framework: 'fetch', role: 'floor', target: client('fetch + a dispatcher that only forwards') },
  { framework: 'fetch', role: 'library', target: client('fetch + DeadlineDispatcher') },
  { framework: 'grpc', role: 'bare', target: rpcClient('grpc-js client, bare') },
  { framework: 'grpc', role: 'floor', target: rpcClient('grpc-js client, a deadline per call') },
  { framework: 'grpc', role: 'library', target: rpcClient('grpc-js client + @deadline/grpc') },
  { framework: 'connect', role: 'bare', target: rpcClient('Connect client, bare') },
  { framework: 'connect', role: 'floor', target: rpcClient('Connect client, a timeoutMs per call') },
  { framework: 'connect', role: 'library', target: rpcClient('Connect client + @deadline/connect') },
];

const quick = process.argv.includes('--quick');
/** `--only fastify,fetch`: those frameworks' rows only. */
const onlyFrameworks = process.argv.includes('--only')
  ? process.argv[process.argv.indexOf('--only') + 1]?.split(',')
  : undefined;
/**
 * `--minimum`: also the least an adapter can do per request while keeping the library's promises, written by hand
 * (deadline-minimum-complete.ts and one per framework: express-, koa-, hono-minimum-complete.ts) — the floor under the library's own work. Left out by
 * default: a count more per framework and Node.
 */
const withMinimum = process.argv.includes('--minimum');
/**
 * The RPC clients' rows (grpc-js, Connect) run when asked for (`--rpc`, or by name in `--only`): 24 counts, ~13 min
 * here, which would take the default run past its 10 minutes.
 */
const withRpc = process.argv.includes('--rpc');
const RPC_FRAMEWORKS: Row['framework'][] = ['grpc', 'connect'];
/** Koa's, Hono's and NestJS's rows run when asked for (`--frameworks`, or by name in `--only`): 60 counts more. */
const withFrameworks = process.argv.includes('--frameworks');
const MORE_FRAMEWORKS: Row['framework'][] = ['koa', 'hono', 'nest-express', 'nest-fastify'];
const byDefault = (framework: Row['framework']) =>
  (withRpc || !RPC_FRAMEWORKS.includes(framework)) && (withFrameworks || !MORE_FRAMEWORKS.includes(framework));
const rows = ROWS.filter(
  (row) =>
    (onlyFrameworks === undefined ? byDefault(row.framework) : onlyFrameworks.includes(row.framework)) &&
    (row.role !== 'minimum' || withMinimum),
);
const onlyMajors = process.argv[process.argv.indexOf('--node') + 1]?.split(',').map(Number);
/** `v24.22.3` → 24. */
const majorOf = (version: string) => Number(version.replace(/^v/, '').split('.')[0]);
const wantMajor = (version: string) =>
  !process.argv.includes('--node') || (onlyMajors ?? []).includes(majorOf(version));
/**
 * How long each count warms up and how many requests it counts. V8's compilers' work is left out of every count
 * (callgrind-dump.ts), and the young generation's collections are taken at their rate (instructions.ts), so a
 * window need only hold one collection or more (~1 per 1,300 fastify requests, ~1 per 1,000–1,400 express requests
 * from Node 24: windows of 2,000), while the warm-up must bring the code to the shape it keeps: express on Node 24
 * deoptimizes and recompiles its path ~25,000 requests in (10k instructions per request more, measured at 25,000),
 * so express warms up 30,000 from Node 24 on, where a request costs a quarter of what it does on Node 20 and 22 —
 * there 15,000 (as optimised as 30,000, and within their ±5 % noise). A fetch client warms up 20,000 fetches: V8
 * (Node 24) compiles a function called once a fetch — the dispatcher's, most of undici's own — with TurboFan only
 * after 10,000–20,000 calls (`--trace-opt`); after 4,000 a window ran them in Maglev's code, and V8's compilers
 * still did 220k instructions a fetch in it (60k after 20,000). On Node 20 and 22 the compiling never settles (V8
 * deoptimizes and recompiles undici's path throughout, 190k–430k instructions a fetch in a window after 20,000,
 * all left out of the count): there a client warms up 8,000 (bare and library counted as after 20,000, within
 * the counts' own spread, 2026-12-05), which spares ~15 s of each of six counts. A client's window opens after a full
 * collection (fetch-client-process.ts). A count takes ~15–35 s (fastify), ~25–60 s (express) and ~30–60 s (fetch)
 * here (2026-12-05), most of it valgrind starting Node and running the warm-up: 40 counts, two at a time.
 */
const COUNTS: Record<Row['framework'], CountOptions> = quick
  ? {
      fastify: { warmUp: 1_000, requests: 200 },
      express: { warmUp: 1_000, requests: 200 },
      koa: { warmUp: 1_000, requests: 200 },
      hono: { warmUp: 1_000, requests: 200 },
      'nest-express': { warmUp: 1_000, requests: 200 },
      'nest-fastify': { warmUp: 1_000, requests: 200 },
      fetch: { warmUp: 500, requests: 100 },
      grpc: { warmUp: 500, requests: 100 },
      connect: { warmUp: 500, requests: 100 },
    }
  : {
      fastify: { warmUp: 25_000, requests: 2_000 },
      express: { warmUp: 30_000, requests: 2_000 },
      koa: { warmUp: 30_000, requests: 2_000 },
      hono: { warmUp: 30_000, requests: 2_000 },
      'nest-express': { warmUp: 30_000, requests: 2_000 },
      'nest-fastify': { warmUp: 30_000, requests: 2_000 },
      fetch: { warmUp: 20_000, requests: 600 },
      grpc: { warmUp: 10_000, requests: 600 },
      connect: { warmUp: 10_000, requests: 600 },
    };
/** Node 20 and 22 (V8 11 and 12): express's and the fetch clients' shorter warm-ups (above). */
const WARM_UP_BEFORE_24: Partial<Record<Row['framework'], number>> = {
  express: 15_000,
  koa: 15_000,
  hono: 15_000,
  'nest-express': 15_000,
  'nest-fastify': 15_000,
  fetch: 8_000,
};

function countsFor(row: Row, node: NodeBinary): CountOptions {
  const options = COUNTS[row.framework];
  const warmUp = WARM_UP_BEFORE_24[row.framework];
  return warmUp !== undefined && !quick && majorOf(node.version) < 24 ? { ...options, warmUp } : options;
}
const AT_ONCE = Math.max(1, Math.min(2, cpus().length));

const progress = (line: string) => process.stderr.write(`\r${line.padEnd(90)}`);

/** Each Node's count for each row, and the time the whole run took. */
interface Report {
  machine: { node: string; cpus: number; cpu: string };
  options: typeof COUNTS & { warmUpBeforeNode24: typeof WARM_UP_BEFORE_24 };
  nodes: string[];
  skipped: { version: string; reason: string }[];
  rows: {
    framework: Row['framework'];
    role: Role;
    variant: string;
    /**
     * Per Node: the count without the JIT's work, its ratio to bare, the JIT's work left out, the young generation's
     * collections in the count (at their rate) and in the window itself, and the count's wall time (valgrind
     * starting Node, the warm-up, the window).
     */
    counts: Record<
      string,
      {
        instructionsPerRequest: number;
        ratioToBare: number;
        jitPerRequest: number;
        gcPerRequest: number;
        gcInWindowPerRequest: number;
        seconds: number;
      }
    >;
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
// The RPC clients' downstreams: the bare echo servers (rpc-server-process.ts), when an RPC row is counted.
const echoServers = rows.some((row) => row.target.kind === 'rpc-client') ? await startEchoServerProcess() : undefined;
const rpcPorts = echoServers && {
  grpc: echoServers.ports['grpc bare'] as number,
  connect: echoServers.ports['connect bare'] as number,
};
let done = 0;
const total = nodes.length * rows.length;
/** A count, and its wall time in seconds (where the run's time goes). */
type Timed = Count & { seconds: number };
const counts = new Map<string, Timed>();
const job = (node: NodeBinary, row: Row) => async () => {
  const began = performance.now();
  const count = await countInstructions(node.path, row.target, countsFor(row, node), { url: downstream.url, rpcPorts });
  const seconds = Math.round((performance.now() - began) / 100) / 10;
  counts.set(`${node.version} ${row.target.variant}`, { ...count, seconds });
  progress(
    `instructions: ${++done}/${total} (${node.version} ${row.target.variant}: ${kilo(count.instructionsPerRequest)})`,
  );
};
/** The longest first (express's counts take the longest of the servers'): the last to end is a short one. */
const LONGEST_FIRST: Row['framework'][] = [
  'nest-express',
  'express',
  'nest-fastify',
  'koa',
  'hono',
  'fastify',
  'fetch',
  'grpc',
  'connect',
];
const jobsOf = (kind: Target['kind']) =>
  LONGEST_FIRST.flatMap((framework) =>
    nodes.flatMap((node) =>
      rows.filter((row) => row.target.kind === kind && row.framework === framework).map((row) => job(node, row)),
    ),
  );
try {
  // The servers first, then the clients: a client's count moves with how its downstream's answers arrive (loop
  // turns, reads, microtask checkpoints per fetch), so clients run beside each other, not beside autocannon
  // driving a server from this process. (Not shown to matter: a run that mixed them agreed within 2 %.)
  await pooled(jobsOf('server'), AT_ONCE);
  await pooled(jobsOf('client'), AT_ONCE);
  await pooled(jobsOf('rpc-client'), AT_ONCE);
} finally {
  downstream.child.kill();
  echoServers?.child.kill();
}
process.stderr.write('\n');

const countOf = (node: NodeBinary, row: Row) => counts.get(`${node.version} ${row.target.variant}`) as Timed;
const bareOf = (row: Row) => ROWS.find((other) => other.framework === row.framework && other.role === 'bare') as Row;
const report: Report = {
  machine: { node: process.version, cpus: cpus().length, cpu: cpus()[0]?.model ?? 'unknown' },
  options: { ...COUNTS, warmUpBeforeNode24: WARM_UP_BEFORE_24 },
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
          instructionsPerRequest: Math.round(countOf(node, row).instructionsPerRequest),
          ratioToBare:
            Math.round(
              (countOf(node, bareOf(row)).instructionsPerRequest / countOf(node, row).instructionsPerRequest) * 1000,
            ) / 1000,
          jitPerRequest: Math.round(countOf(node, row).jitPerRequest),
          gcPerRequest: Math.round(countOf(node, row).gcPerRequest),
          gcInWindowPerRequest: Math.round(countOf(node, row).gcInWindowPerRequest),
          seconds: countOf(node, row).seconds,
        },
      ]),
    ),
  })),
  seconds: Math.round((performance.now() - started) / 1000),
};

console.log(
  `\nInstructions per request (callgrind, V8's compilers left out, young-generation collections at their rate; in brackets: bare ÷ this, 1 = no overhead)${quick ? ' — quick: smoke only' : ''}:`,
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
