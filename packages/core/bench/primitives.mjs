// The costs the core's design rests on (see src/scope.ts): what Node itself charges for the pieces a context
// could use. Absolute figures vary with the machine; their order of magnitude is the point.
// Run: node bench/primitives.mjs
import { AsyncLocalStorage } from 'node:async_hooks';

const als = new AsyncLocalStorage();
const reason = new Error('reason');
const listener = () => {};
const store = {};

function measure(name, fn, n = 200_000) {
  for (let i = 0; i < n / 10; i++) fn();
  const start = performance.now();
  for (let i = 0; i < n; i++) fn();
  return { primitive: name, 'ns/op': Math.round(((performance.now() - start) * 1e6) / n) };
}

console.log(`primitive costs — Node ${process.version}`);
console.table([
  measure('als.run(store, fn)', () => als.run(store, () => als.getStore())),
  measure('performance.now()', () => performance.now()),
  measure('setTimeout + unref + clearTimeout', () => clearTimeout(setTimeout(listener, 1_000).unref())),
  measure('new AbortController().signal', () => new AbortController().signal),
  measure('AbortController + abort(reason)', () => {
    const c = new AbortController();
    c.signal;
    c.abort(reason);
  }),
  measure('signal.addEventListener(abort)', () => new AbortController().signal.addEventListener('abort', listener)),
  measure('new Error() (stack captured)', () => new Error('x')),
  measure('new Error() (stackTraceLimit 0)', () => {
    const limit = Error.stackTraceLimit;
    Error.stackTraceLimit = 0;
    const error = new Error('x');
    Error.stackTraceLimit = limit;
    return error;
  }),
]);
