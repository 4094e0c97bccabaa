// Leak check: N contexts (default 1,000,000), each reading remainingMs() and its signal and then finishing,
// all under one long-lived parent context whose signal is read too (the Node 20 AbortSignal.any() trap).
// Prints one JSON line: heap growth after GC, and what is left listening on the long-lived parent.
// Run: node --expose-gc bench/memory.mjs [N]   (after npm run build)
import { getEventListeners } from 'node:events';
import { createContext, currentSignal, remainingMs, runWithDeadline } from '../dist/index.js';

if (typeof globalThis.gc !== 'function') {
  console.error('run with --expose-gc');
  process.exit(2);
}
const total = Number(process.argv[2] ?? 1_000_000);
const BATCH = 1_000;

function settle() {
  for (let i = 0; i < 4; i++) globalThis.gc();
  return process.memoryUsage();
}

function request() {
  return runWithDeadline(3_600_000, async () => {
    remainingMs();
    currentSignal();
    await null;
  });
}

async function run(count) {
  for (let done = 0; done < count; done += BATCH) {
    const batch = [];
    for (let i = 0; i < BATCH; i++) batch.push(request());
    await Promise.all(batch);
  }
}

const parent = createContext({ deadline: 24 * 3_600_000 });
const parentSignal = parent.signal;
const started = performance.now();
await parent.run(async () => {
  await run(20_000); // warm-up: JIT, pools, lazily created internals
  const before = settle();
  const listenersBefore = getEventListeners(parentSignal, 'abort').length;
  await run(total);
  const after = settle();
  console.log(
    JSON.stringify({
      contexts: total,
      heapGrowthBytes: after.heapUsed - before.heapUsed,
      rssBytes: after.rss,
      parentSignalListeners: getEventListeners(parentSignal, 'abort').length - listenersBefore,
      parentLinks: parent._listeners?.length ?? 0,
      seconds: Math.round((performance.now() - started) / 100) / 10,
    }),
  );
});
parent.end();
