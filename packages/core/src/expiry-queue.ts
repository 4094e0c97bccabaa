/**
 * Every scope that waits for its deadline, in one queue ordered by deadline, behind one timer.
 *
 * Why not a timer per scope: a `setTimeout` is an async resource (on Node 20 AsyncLocalStorage's hook runs for
 * each), its `unref()` toggles the event loop's reference and `clearTimeout` unlinks it again — about 2k
 * instructions per request (callgrind, docs/benchmarks.md), the largest part of starting a request's deadline.
 * Here a scope joins a binary heap (a request that arrived after the others has the latest deadline: one
 * comparison), leaves it when nobody listens any more, and the one timer is armed again only when the earliest
 * deadline moves earlier, or when it fires — not when a request that ended in time leaves.
 *
 * The timer is armed in a context of its own (no request's), and each scope whose deadline passed expires
 * inside itself (`scope.run`): its stop listeners — a server's 504 among them — see the request they belong to,
 * never the one that happened to arm the timer.
 */

import { AsyncResource } from 'node:async_hooks';
import { monotonicNow, timerDelay } from './clock.js';

/** What the queue needs of what waits (a scope, a call with a timeout of its own): its place, its instant, its stop. */
export interface Expiring {
  /** @internal Index in the heap; -1 while not waiting. */
  _waiting: number;
  /** @internal When it is due, on the monotonic clock (fixed while it waits). */
  readonly _dueAt: number;
  /** @internal Its instant passed: stop, inside its own context. */
  _due(): void;
}

const heap: Expiring[] = [];
let timer: NodeJS.Timeout | undefined;
/** The instant the timer fires for; +∞ while none is armed. */
let timerAt = Number.POSITIVE_INFINITY;
/**
 * The timer functions it was armed with: test fake timers swap the globals, and a timer armed with one set never
 * fires under the other (their clocks differ too), so a change of globals re-arms.
 */
let armedWith: typeof setTimeout | undefined;
let clearWith: typeof clearTimeout | undefined;

/** Where the timer is armed from: a context that belongs to no request (made when this module loads). */
const OWN_CONTEXT = new AsyncResource('DeadlineExpiryQueue', { requireManualDestroy: true });

/** Adds `scope` (or a call) to the queue; it must not be waiting already. */
export function waitForExpiry(scope: Expiring): void {
  const at = heap.length;
  heap.push(scope);
  scope._waiting = at;
  siftUp(at);
  if (armedWith !== globalThis.setTimeout || (scope._waiting === 0 && scope._dueAt < timerAt)) arm();
}

/** Takes `scope` out of the queue, if it waits. The timer stays: it fires once for nothing, or for the next. */
export function stopWaiting(scope: Expiring): void {
  const at = scope._waiting;
  if (at < 0) return;
  scope._waiting = -1;
  const last = heap.pop() as Expiring;
  if (at === heap.length) return;
  place(last, at);
  siftDown(at);
  siftUp(last._waiting);
}

/** How many scopes wait for their deadline (for tests: nothing kept once a request ended). @internal */
export function waitingForExpiry(): number {
  return heap.length;
}

function arm(): void {
  if (timer !== undefined) (clearWith as typeof clearTimeout)(timer);
  const first = heap[0] as Expiring;
  timerAt = first._dueAt;
  armedWith = globalThis.setTimeout;
  clearWith = globalThis.clearTimeout;
  // Rounded, not rounded up: Node fires a timer on the loop's clock, in whole ms from the loop's last tick, and
  // a delay rounded up made every deadline the timer was re-armed for (inside its own callback) ~1 ms late at
  // the median (0.9 ms here, 0.2 ms with a timer per scope; rounded: 0.3 ms). One that fires early is re-armed
  // for the rest: never early.
  timer = OWN_CONTEXT.runInAsyncScope(setTimer, undefined, timerDelay(Math.round(timerAt - monotonicNow())));
}

function setTimer(delay: number): NodeJS.Timeout {
  const armed = setTimeout(onTimer, delay);
  armed.unref();
  return armed;
}

function onTimer(): void {
  timer = undefined;
  timerAt = Number.POSITIVE_INFINITY;
  armedWith = undefined;
  let now = monotonicNow();
  // Node's timers run on the loop's cached clock and may fire a fraction of a millisecond early, and delays
  // beyond 2^31−1 ms are clamped: what is still ahead waits for the next round, never stopped early. (Not with
  // setImmediate re-checks: tried, they gained ~0.1 ms at the median, but spinning on a shared CPU got the
  // process preempted and the precision benchmark's p99 got worse, 3.5 vs 2.5 ms.)
  for (let first = heap[0]; first !== undefined; first = heap[0]) {
    // Stopping one takes time (an abort, a 504): the next may have come due meanwhile, and waiting a whole
    // timer round (≥ 1 ms) for it would make it late.
    if (first._dueAt > now && first._dueAt > (now = monotonicNow())) break;
    stopWaiting(first);
    // A listener may add scopes (and arm the timer for them) or take others out: the heap is read afresh.
    first._due();
  }
  if (timer === undefined && heap.length > 0) arm();
}

function siftUp(from: number): void {
  const scope = heap[from] as Expiring;
  const at = scope._dueAt;
  let index = from;
  while (index > 0) {
    const parentIndex = (index - 1) >> 1;
    const parent = heap[parentIndex] as Expiring;
    if (parent._dueAt <= at) break;
    place(parent, index);
    index = parentIndex;
  }
  if (index !== from) place(scope, index);
}

function siftDown(from: number): void {
  const scope = heap[from] as Expiring;
  const at = scope._dueAt;
  const size = heap.length;
  let index = from;
  for (;;) {
    let child = 2 * index + 1;
    if (child >= size) break;
    const right = child + 1;
    if (right < size && (heap[right] as Expiring)._dueAt < (heap[child] as Expiring)._dueAt) {
      child = right;
    }
    const smaller = heap[child] as Expiring;
    if (smaller._dueAt >= at) break;
    place(smaller, index);
    index = child;
  }
  if (index !== from) place(scope, index);
}

function place(waiting: Expiring, index: number): void {
  heap[index] = waiting;
  waiting._waiting = index;
}
