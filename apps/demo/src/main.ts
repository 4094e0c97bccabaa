/**
 * `npm run demo`: a real three-hop service chain on this machine — gateway (fastify) → orders (express) →
 * inventory (fastify) on Postgres, Redis and BullMQ — and what the one request budget changes, measured now:
 * nine tables, one trace's waterfall, and `demo-report.html` with the same as SVG.
 */
import { writeFileSync } from 'node:fs';
import { writeFile } from 'node:fs/promises';
import { cpus } from 'node:os';
import { join } from 'node:path';
import { type DemoResult, runDemo } from './demo.js';
import { describeFailure, failureDetails } from './failure.js';
import { renderHtmlReport } from './report/html.js';
import { renderTableText } from './report/table.js';
import { renderWaterfallText, waterfallFor } from './report/waterfall.js';
import { SetupError } from './setup-error.js';

const quick = process.argv.includes('--quick');
const tty = process.stderr.isTTY === true;
/** The step the demo is at (its last progress line): a failure names it. */
let step = 'starting';
const progress = (line: string) => {
  step = line.replace(/…$/, '');
  // One line, rewritten in place on a terminal; plain lines otherwise (CI logs).
  if (tty) process.stderr.write(`\r\x1b[2K${line}`);
  else process.stderr.write(`${line}\n`);
};
// npm sets INIT_CWD to where `npm run demo` was typed: the report (and a failure's details) land there.
const outputDir = process.env.INIT_CWD ?? process.cwd();

/**
 * Any failure ends the demo with one line saying why, exit code 1: a SetupError's own message (the machine's
 * problem, no stack), else the step it was at and the error with its causes; the stack goes to demo-error.log.
 */
function fail(error: unknown): never {
  if (tty) process.stderr.write('\r\x1b[2K');
  if (error instanceof SetupError) {
    console.error(`demo: ${error.message}`);
  } else {
    const details = join(outputDir, 'demo-error.log');
    let where = ` (stack: ${details})`;
    try {
      writeFileSync(details, failureDetails(error));
    } catch {
      where = '';
    }
    console.error(`demo: failed at "${step}": ${describeFailure(error)}${where}`);
  }
  process.exit(1);
}
// An error no step caught (a service's socket, a timer) ends the demo the same way, not with Node's stack dump.
process.on('uncaughtException', fail);
process.on('unhandledRejection', fail);

// Ctrl-C or a kill: exit through 'exit', whose handlers stop the embedded PostgreSQL and remove its files.
for (const [signal, code] of [
  ['SIGINT', 130],
  ['SIGTERM', 143],
] as const) {
  process.once(signal, () => process.exit(code));
}

console.log('deadline — one request budget, honoured end to end. Measuring on this machine…\n');
const started = performance.now();
let result: DemoResult;
try {
  result = await runDemo({ quick, progress });
} catch (error) {
  fail(error);
}
if (tty) process.stderr.write('\r\x1b[2K');

console.log(`PostgreSQL: ${result.postgres}\n`);
for (const table of result.tables) console.log(`${renderTableText(table)}\n`);

const spans = waterfallFor(result.lines, result.traceId);
console.log(`One request through the chain (trace ${result.traceId}), from the services' own pino logs:\n`);
console.log(
  renderWaterfallText(spans, {
    width: Math.min(process.stdout.columns ?? 120, 140),
    color: process.stdout.isTTY === true,
  }),
);

const machine = `${cpus().length} × ${cpus()[0]?.model ?? 'CPU'}, Node ${process.version}, ${process.platform}`;
const html = renderHtmlReport({
  title: 'deadline — what one request budget changes',
  generatedAt: new Date(),
  machine: `${machine}; ${result.postgres}`,
  tables: result.tables,
  waterfall: spans,
  traceId: result.traceId,
});
const reportPath = join(outputDir, 'demo-report.html');
await writeFile(reportPath, html);
console.log(`\nReport: ${reportPath}  (${((performance.now() - started) / 1000).toFixed(1)} s)`);
