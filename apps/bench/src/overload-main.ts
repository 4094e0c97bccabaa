/**
 * `npm run bench:overload`: the dead-work-under-overload benchmark alone (overload.ts), printed as a table and
 * written to overload-report.json, with its chart as overload-chart.svg.
 *
 *   --database postgres   inventory's stock query on Postgres (`@deadline/pg`), as `npm run bench` runs it
 *   --database mariadb    on MariaDB through mysql2 (`@deadline/mysql`)
 *   --broker rabbitmq     across a broker instead: RPC over RabbitMQ to a consumer on Postgres (broker/broker-overload.ts),
 *                         written to broker-overload-report.json
 *   --bottleneck cpu      the CPU-bound chain (each hop's handler spends a few ms of CPU per request, a one-row query,
 *                         a mix of client budgets), four variants by default: written to overload-cpu-report.json
 *                         and overload-cpu-chart.svg; `--bottleneck pool` (the default) is the pool-bound chain
 *   --variants a,b,…      which variants (library, baseline, library+under-pressure, library+admission; library
 *                         among them), in the order run each level; default library,baseline on the pool-bound
 *                         chain, all four on the CPU-bound one
 *   --quick               one short level: proves it runs, measures nothing
 *
 * A bad argument is named on stderr, with the usage, and the run exits 2.
 */

import { spawnSync } from 'node:child_process';
import { writeFile } from 'node:fs/promises';
import { canPin } from './overhead/overhead.js';
import { brokerOverloadRows, measureBrokerOverload } from './overload/broker/broker-overload.js';
import { renderOverloadChart } from './overload/chart.js';
import { measureOverload, type OverloadReport, overloadRows } from './overload/overload.js';
import {
  type Bottleneck,
  CHAIN_VARIANTS,
  type ChainVariant,
  type StockDatabase,
} from './overload/overload-protocol.js';

const USAGE =
  'usage: npm run bench:overload -- [--database postgres|mariadb | --broker rabbitmq] [--bottleneck pool|cpu] [--variants library,baseline,library+under-pressure,library+admission] [--quick]';

interface Arguments {
  database: StockDatabase;
  broker: boolean;
  quick: boolean;
  bottleneck: Bottleneck;
  variants: ChainVariant[] | undefined;
}

/** The stock database the arguments ask for, or the reason they cannot be read. */
function readArguments(args: string[]): Arguments | string {
  let database: StockDatabase = 'postgres';
  let broker = false;
  let quick = false;
  let bottleneck: Bottleneck = 'pool';
  let variants: ChainVariant[] | undefined;
  for (let i = 0; i < args.length; i++) {
    const arg = args[i];
    if (arg === '--quick') quick = true;
    else if (arg === '--bottleneck') {
      const value = args[++i];
      if (value !== 'pool' && value !== 'cpu') return `--bottleneck takes pool or cpu, not ${value}`;
      bottleneck = value;
    } else if (arg === '--variants') {
      const names = (args[++i] ?? '').split(',').filter((name) => name !== '');
      const unknown = names.find((name) => !(CHAIN_VARIANTS as readonly string[]).includes(name));
      if (unknown !== undefined) return `--variants takes ${CHAIN_VARIANTS.join(', ')}, not ${unknown}`;
      if (!names.includes('library')) return '--variants must include library (the capacity is its)';
      variants = [...new Set(names)] as ChainVariant[];
    } else if (arg === '--database') {
      const value = args[++i];
      if (value !== 'postgres' && value !== 'mariadb') return `--database takes postgres or mariadb, not ${value}`;
      database = value;
    } else if (arg === '--broker') {
      const value = args[++i];
      if (value !== 'rabbitmq') return `--broker takes rabbitmq, not ${value}`;
      broker = true;
    } else return `unknown argument ${arg}`;
  }
  if (broker && (bottleneck !== 'pool' || variants !== undefined)) {
    return '--broker rabbitmq takes neither --bottleneck nor --variants';
  }
  return { database, broker, quick, bottleneck, variants };
}

const parsed = readArguments(process.argv.slice(2));
if (typeof parsed === 'string') {
  process.stderr.write(`bench:overload: ${parsed}\n${USAGE}\n`);
  process.exit(2);
}

// The load generator runs here; pin it to one core, as `npm run bench` does (the chain's processes widen again).
// Not in a quick run, as there: it measures nothing, and the pinned second start would load every module again.
if (!parsed.quick && process.env.DEADLINE_BENCH_PINNED === undefined && canPin()) {
  const child = spawnSync('taskset', ['-c', '1', process.execPath, ...process.argv.slice(1)], {
    stdio: 'inherit',
    env: { ...process.env, DEADLINE_BENCH_PINNED: '1' },
  });
  process.exit(child.status ?? 1);
}

if (parsed.broker) await runBroker(parsed.quick);

/** `--broker rabbitmq`: the broker's benchmark alone, its table printed and its report written. */
async function runBroker(quick: boolean): Promise<never> {
  const started = performance.now();
  const report = await measureBrokerOverload({ quick }, (line) => process.stderr.write(`\r${line.padEnd(70)}`));
  process.stderr.write('\n');
  const seconds = Math.round((performance.now() - started) / 1000);
  console.log(
    '\nDead work under overload across RabbitMQ (RPC to a consumer on Postgres, 1 s caller budget; library vs plain):',
  );
  if (report.skipped !== null) console.log(`skipped: ${report.skipped}`);
  else {
    console.log(`capacity ${report.capacity} answers/s (closed loop, library)`);
    console.table(brokerOverloadRows(report));
    const { deadWork, goodputAt2x } = report.goals;
    console.log(
      `goals: dead work with the library ≤ 2 % at every level (worst ${deadWork.worst === null ? '–' : `${(deadWork.worst * 100).toFixed(1)} %`}: ${deadWork.met ? 'met' : 'not met'}); goodput at 2× ≥ 2× plain's (${goodputAt2x.library ?? '–'}/s against ${goodputAt2x.plain ?? '–'}/s, ratio ${goodputAt2x.ratio ?? '–'}: ${goodputAt2x.met ? 'met' : 'not met'})`,
    );
  }
  console.log(`${seconds} s in all`);
  await writeFile('broker-overload-report.json', `${JSON.stringify({ seconds, ...report }, null, 2)}\n`);
  process.exit(report.skipped === null ? 0 : 1);
}

const started = performance.now();
const report = await measureOverload(
  { quick: parsed.quick, stockDatabase: parsed.database, bottleneck: parsed.bottleneck, variants: parsed.variants },
  (line) => process.stderr.write(`\r${line.padEnd(70)}`),
);
process.stderr.write('\n');
const seconds = Math.round((performance.now() - started) / 1000);
const cpuBound = parsed.bottleneck === 'cpu';
const variantNames = (report.setup?.variants ?? parsed.variants ?? ['library', 'baseline']).join(', ');
console.log(
  cpuBound
    ? `\nDead work under overload, CPU-bound (three-hop chain, ${report.setup?.cpuMsPerHop ?? '–'} ms of CPU per request on each hop, a one-row query on ${parsed.database}; client budgets ${(report.setup?.budgetMix ?? []).map((b) => `${Math.round(b.share * 100)} % ${b.ms} ms`).join(', ')}; ${variantNames}):`
    : `\nDead work under overload (three-hop chain, stock query on ${parsed.database}, 1 s client budget; ${parsed.variants === undefined ? 'library vs fixed per-hop timeouts' : variantNames}):`,
);
if (report.skipped !== null) {
  console.log(`skipped: ${report.skipped}`);
} else {
  if (cpuBound) console.log(`capacity ${report.capacity} answers/s (closed loop, library)`);
  console.table(overloadRows(report));
  const { libraryDeadWork, goodputAt2x } = report.goals;
  console.log(
    `goals: dead work with the library ≤ 2 % at every level (worst ${libraryDeadWork.worst === null ? '–' : `${(libraryDeadWork.worst * 100).toFixed(1)} %`}: ${libraryDeadWork.met ? 'met' : 'not met'}); goodput at 2× ≥ 2× the baseline's (${goodputAt2x.library ?? '–'}/s against ${goodputAt2x.baseline ?? '–'}/s, ratio ${goodputAt2x.ratio ?? '–'}: ${goodputAt2x.met ? 'met' : 'not met'})`,
  );
  for (const line of extraGoals(report)) console.log(line);
}
console.log(`${seconds} s in all`);
const [reportFile, chartFile] = cpuBound
  ? ['overload-cpu-report.json', 'overload-cpu-chart.svg']
  : ['overload-report.json', 'overload-chart.svg'];
await writeFile(reportFile, `${JSON.stringify({ seconds, ...report }, null, 2)}\n`);
await writeFile(chartFile, renderOverloadChart(report));
console.log(`written: ${reportFile}, ${chartFile}`);
// A skipped run wrote why; it is no measurement.
process.exit(report.skipped === null ? 0 : 1);

/** The CPU-bound chain's goals and admission's cost, one line each, when they were measured. */
function extraGoals(report: OverloadReport): string[] {
  const lines: string[] = [];
  const verdict = (met: boolean | null) => (met === null ? 'not measured' : met ? 'met' : 'not met');
  const percent = (x: number | null) => (x === null ? '–' : `${(x * 100).toFixed(2)} %`);
  const cpu = report.goals.cpu;
  if (cpu !== null) {
    const at3x = Object.entries(cpu.goodputAt3x)
      .map(([variant, goodput]) => `${variant} ${goodput}/s`)
      .join(', ');
    lines.push(
      `goals at 3× (${at3x}): admission ≥ 1.5× under-pressure's (${cpu.admissionOverUnderPressure.value ?? '–'}: ${verdict(cpu.admissionOverUnderPressure.met)}), ≥ 1.2× the library's (${cpu.admissionOverLibrary.value ?? '–'}: ${verdict(cpu.admissionOverLibrary.met)}), dead work ≤ 2 % (${percent(cpu.admissionDeadWorkAt3x.value)}: ${verdict(cpu.admissionDeadWorkAt3x.met)}), recovery ≤ 1 s (${cpu.admissionRecoveryAt3x.value === null ? '–' : `${cpu.admissionRecoveryAt3x.value} s`}: ${verdict(cpu.admissionRecoveryAt3x.met)})`,
      `false sheds at 0.8× ≤ 0.1 % (admission refused ${percent(cpu.falseShedsAt08x.value)}: ${verdict(cpu.falseShedsAt08x.met)})`,
    );
  }
  const cost = report.goals.admissionCost;
  if (cost !== null) {
    lines.push(
      `admission's goodput ≥ 0.95× the library's at every level (${cost.levels.map((l) => `${l.multiplier}× ${l.ratio ?? '–'}`).join(', ')}; worst ${cost.worst ?? '–'}: ${verdict(cost.met)})`,
    );
  }
  return lines;
}
