/**
 * `npm run demo`: what deadline propagation changes, measured on this machine.
 * (A small core-only example for now; the three-hop service chain replaces it.)
 */
import { runScenario } from './scenario.js';

console.log('A client gives up after 300 ms; the service it calls needs ~1 s. Measuring…\n');
const rows = await runScenario();
console.table(
  rows.map((row) => ({
    mode: row.mode,
    'client waited (ms)': row.clientWaitedMs,
    'client saw': row.clientOutcome,
    'downstream budget (ms)': row.downstreamBudgetMs ?? '(none)',
    downstream: row.downstreamOutcome,
    'dead work (ms)': row.deadWorkMs,
  })),
);
console.log(
  '\nDead work: time the downstream kept working after the client had given up. With the propagated deadline it',
);
console.log('received the remaining budget on the wire (X-Request-Deadline) and stopped when it ran out.');
