/**
 * `npm run bench:overload`: the dead-work-under-overload benchmark alone (overload.ts), printed as a table and
 * written to overload-report.json, with its chart as overload-chart.svg.
 *
 *   --database postgres   inventory's stock query on Postgres (`@deadline/pg`), as `npm run bench` runs it
 *   --database mariadb    on MariaDB through mysql2 (`@deadline/mysql`)
 *   --broker rabbitmq     across a broker instead: RPC over RabbitMQ to a consumer on Postgres (broker/broker-overload.ts),
 *                         written to broker-overload-report.json
 *   --quick               one short level: proves it runs, measures nothing
 *
 * A bad argument is named on stderr, with the usage, and the run exits 2.
 */

import { spawnSync } from 'node:child_process';
import { writeFile } from 'node:fs/promises';
import { canPin } from './overhead/overhead.js';
import { brokerOverloadRows, measureBrokerOverload } from './overload/broker/broker-overload.js';
import { renderOverloadChart } from './overload/chart.js';
import { measureOverload, overloadRows } from './overload/overload.js';
import type { StockDatabase } from './overload/overload-protocol.js';

const USAGE = 'usage: npm run bench:overload -- [--database postgres|mariadb | --broker rabbitmq] [--quick]';

/** The stock database the arguments ask for, or the reason they cannot be read. */
function readArguments(args: string[]): { database: StockDatabase; broker: boolean; quick: boolean } | string {
  let database: StockDatabase = 'postgres';
  let broker = false;
  let quick = false;
  for (let i = 0; i < args.length; i++) {
    const arg = args[i];
    if (arg === '--quick') quick = true;
    else if (arg === '--database') {
      const value = args[++i];
      if (value !== 'postgres' && value !== 'mariadb') return `--database takes postgres or mariadb, not ${value}`;
      database = value;
    } else if (arg === '--broker') {
      const value = args[++i];
      if (value !== 'rabbitmq') return `--broker takes rabbitmq, not ${value}`;
      broker = true;
    } else return `unknown argument ${arg}`;
  }
  return { database, broker, quick };
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
const report = await measureOverload({ quick: parsed.quick, stockDatabase: parsed.database }, (line) =>
  process.stderr.write(`\r${line.padEnd(70)}`),
);
process.stderr.write('\n');
const seconds = Math.round((performance.now() - started) / 1000);
console.log(
  `\nDead work under overload (three-hop chain, stock query on ${parsed.database}, 1 s client budget; library vs fixed per-hop timeouts):`,
);
if (report.skipped !== null) {
  console.log(`skipped: ${report.skipped}`);
} else {
  console.table(overloadRows(report));
  const { libraryDeadWork, goodputAt2x } = report.goals;
  console.log(
    `goals: dead work with the library ≤ 2 % at every level (worst ${libraryDeadWork.worst === null ? '–' : `${(libraryDeadWork.worst * 100).toFixed(1)} %`}: ${libraryDeadWork.met ? 'met' : 'not met'}); goodput at 2× ≥ 2× the baseline's (${goodputAt2x.library ?? '–'}/s against ${goodputAt2x.baseline ?? '–'}/s, ratio ${goodputAt2x.ratio ?? '–'}: ${goodputAt2x.met ? 'met' : 'not met'})`,
  );
}
console.log(`${seconds} s in all`);
await writeFile('overload-report.json', `${JSON.stringify({ seconds, ...report }, null, 2)}\n`);
await writeFile('overload-chart.svg', renderOverloadChart(report));
// A skipped run wrote why; it is no measurement.
process.exit(report.skipped === null ? 0 : 1);
