#!/usr/bin/env node
/**
 * Writes scripts/test-durations.json, the expected time of each test file that takes a second or more, from a
 * vitest JSON report: `npx vitest run --reporter=default --reporter=json --outputFile=/tmp/report.json`, then
 * `node scripts/test-durations.mjs /tmp/report.json`. The sequencer (test-sequencer.ts) starts the longest first.
 */
import { readFileSync, writeFileSync } from 'node:fs';
import { relative } from 'node:path';
import { fileURLToPath } from 'node:url';

const [reportPath] = process.argv.slice(2);
if (!reportPath) {
  console.error('usage: node scripts/test-durations.mjs <vitest json report>');
  process.exit(2);
}
const repo = fileURLToPath(new URL('..', import.meta.url));
const report = JSON.parse(readFileSync(reportPath, 'utf8'));
const seconds = report.testResults
  .map((file) => [relative(repo, file.name), Math.round((file.endTime - file.startTime) / 100) / 10])
  .filter(([, s]) => s >= 1)
  .sort((a, b) => b[1] - a[1]);
const out = new URL('./test-durations.json', import.meta.url);
writeFileSync(out, `${JSON.stringify(Object.fromEntries(seconds), null, 2)}\n`);
console.log(`${fileURLToPath(out)}: ${seconds.length} files`);
