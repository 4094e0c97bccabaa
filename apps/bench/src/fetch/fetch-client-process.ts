/**
 * One fetch client in its own process, for counting its instructions (instructions.ts): `node
 * dist/fetch/fetch-client-process.js <variant> <url> <warm-up> <requests>`. It fetches `warm-up` times (printing
 * `RATE FROM n` a quarter in and `COLLECTING n` at the end, n being the fetches so far), collects all garbage, fetches
 * 1,000 times more (see below), prints `WARM`,
 * waits for a line on stdin (the runner switches counting on meanwhile), fetches `requests` times, prints `DONE`,
 * and waits to be killed. Four fetches in flight at a time, every one inside a deadline context: that is where the
 * library's interceptor does its work (a budget computed, headers written, the call watched).
 */
import { once } from 'node:events';
import { runWithDeadline } from '@deadline/core';
import type { Dispatcher } from 'undici';
import { FETCH_VARIANTS, type FetchVariant } from './fetch-variants.js';

/** In flight at once, as the server counts use 4 connections. */
const CONCURRENCY = 4;
/** Far beyond any run: the deadline never fires; what is counted is the work each call does under it. */
const BUDGET_MS = 600_000;
/** Calls after the collection that opens the window, before it opens (see below). */
const REWARM = 1_000;

async function fetchTimes(url: string, dispatcher: Dispatcher, times: number): Promise<void> {
  const init = { dispatcher } as unknown as RequestInit;
  let left = times;
  const worker = async () => {
    while (left > 0) {
      left--;
      const res = await fetch(url, init);
      await res.arrayBuffer();
      if (res.status !== 200) throw new Error(`status ${res.status}`);
    }
  };
  await runWithDeadline(BUDGET_MS, () => Promise.all(Array.from({ length: CONCURRENCY }, worker)));
}

/** A full garbage collection, when the runner gave `--expose-gc`. */
const collect = () => (globalThis as { gc?: () => void }).gc?.();

const [variant, url, warmUp, requests] = process.argv.slice(2);
const make = FETCH_VARIANTS[variant as FetchVariant];
if (make === undefined || url === undefined) {
  console.error(
    `usage: fetch-client-process.js <${Object.keys(FETCH_VARIANTS).join(' | ')}> <url> <warm-up> <requests>`,
  );
  process.exit(2);
}
const dispatcher = make();
// Between these two lines the runner counts the young generation's collections (their rate: instructions.ts),
// from when the first quarter has warmed the code up.
const quarter = Math.floor(Number(warmUp) / 4);
await fetchTimes(url, dispatcher, quarter);
console.log(`RATE FROM ${quarter}`);
await fetchTimes(url, dispatcher, Number(warmUp) - quarter);
console.log(`COLLECTING ${warmUp}`);
// A full collection before the window: no window inherits an old generation that happens to be near its limit
// (before, one major GC more or less in a window moved a count by ±10 %). None after it: a full collection
// costs what the live heap holds (~70M instructions on Node 24), not what the window's fetches left behind.
collect();
// After a forced collection V8 optimises fetch's path again (--trace-opt shows it marking and compiling the same
// functions over the next ~1,000 calls; more than half of a window's instructions, had they fallen in it): warm
// up again. (On Node 22 the compiling never stops: see docs/benchmarks/history.md.)
await fetchTimes(url, dispatcher, REWARM);
console.log('WARM');
await once(process.stdin, 'data');
await fetchTimes(url, dispatcher, Number(requests));
console.log('DONE');
// Alive until the runner has taken its count and kills it: an exit now would count the exit too.
setInterval(() => {}, 1 << 30);
for (const signal of ['SIGTERM', 'SIGINT'] as const) process.once(signal, () => process.exit(0));
