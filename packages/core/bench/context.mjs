// What a request pays for the core: runWithDeadline + remainingMs() (+ currentSignal()) around an async
// handler, against a bare AsyncLocalStorage run of the same handler. Rounds alternate between variants and the
// median of each is reported as a ratio, because on a shared machine only a ratio measured in the same run is
// stable. Run: npm run bench -w @deadline/core (after npm run build).
import { AsyncLocalStorage } from 'node:async_hooks';
import { performance } from 'node:perf_hooks';
import { createContext, currentContext, currentSignal, remainingMs, runWithDeadline } from '../dist/index.js';

const ROUNDS = Number(process.env.BENCH_ROUNDS ?? 15);
const PER_ROUND = Number(process.env.BENCH_ITERATIONS ?? 50_000);
const als = new AsyncLocalStorage();
const noop = () => {};

const variants = {
  'bare als.run': async () => {
    for (let i = 0; i < PER_ROUND; i++) {
      await als.run({ i }, async () => {
        als.getStore();
        await null;
      });
    }
  },
  'runWithDeadline + remainingMs()': async () => {
    for (let i = 0; i < PER_ROUND; i++) {
      await runWithDeadline(1_000, async () => {
        remainingMs();
        await null;
      });
    }
  },
  // What a server adapter does per request: create, run the handler inside, end when the response is done.
  'createContext + run + end (server pattern)': async () => {
    for (let i = 0; i < PER_ROUND; i++) {
      const ctx = createContext({ deadline: 1_000, root: true });
      await ctx.run(async () => {
        remainingMs();
        await null;
      });
      ctx.end();
    }
  },
  // What a transport adapter does per call: be told when to stop (arms the timer), then unsubscribe.
  'runWithDeadline + onStop() per call (adapter pattern)': async () => {
    for (let i = 0; i < PER_ROUND; i++) {
      await runWithDeadline(1_000, async () => {
        const off = currentContext().onStop(noop);
        await null;
        off();
      });
    }
  },
  'runWithDeadline + remainingMs() + currentSignal()': async () => {
    for (let i = 0; i < PER_ROUND; i++) {
      await runWithDeadline(1_000, async () => {
        remainingMs();
        currentSignal();
        await null;
      });
    }
  },
};

const median = (xs) => [...xs].sort((a, b) => a - b)[Math.floor(xs.length / 2)];
const samples = Object.fromEntries(Object.keys(variants).map((name) => [name, []]));
for (const run of Object.values(variants)) await run(); // warm-up
for (let round = 0; round < ROUNDS; round++) {
  for (const [name, run] of Object.entries(variants)) {
    const start = performance.now();
    await run();
    samples[name].push(((performance.now() - start) * 1e6) / PER_ROUND);
  }
}

const base = median(samples['bare als.run']);
const rows = Object.entries(samples).map(([name, ns]) => ({
  variant: name,
  'ns/request (median)': Math.round(median(ns)),
  'min–max': `${Math.round(Math.min(...ns))}–${Math.round(Math.max(...ns))}`,
  'throughput vs bare': (base / median(ns)).toFixed(2),
  'added ns': Math.round(median(ns) - base),
}));
console.log(`core context cost — Node ${process.version}, ${ROUNDS} alternating rounds of ${PER_ROUND}`);
console.table(rows);
if (process.env.BENCH_JSON) console.log(JSON.stringify(rows));
