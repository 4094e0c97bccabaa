/**
 * How many `'abort'` listeners are attached to AbortSignals that are still alive in this process. A library that
 * links a request's signal to a long-lived one and forgets to unlink it leaves one listener per request on the
 * long-lived signal (the Node 20 `AbortSignal.any()` trap): this count grows with the requests served. Listeners
 * on a signal that has been collected are gone with it and not counted.
 *
 * Counted by watching `addEventListener` on every EventTarget from the moment {@link trackAbortListeners} runs:
 * each signal given an `'abort'` listener is remembered weakly, and counted with `getEventListeners()` when
 * asked. Call it before anything else is loaded.
 */
import { getEventListeners } from 'node:events';

/** What {@link liveAbortListeners} found. */
export interface AbortListenerCount {
  /** Live signals that have, or once had, an `'abort'` listener. */
  signals: number;
  /** Their `'abort'` listeners now. */
  listeners: number;
}

const watched = new Set<WeakRef<AbortSignal>>();
const seen = new WeakSet<AbortSignal>();
let tracking = false;

/**
 * Starts counting (idempotent). Every `addEventListener('abort', …)` on an AbortSignal from now on is seen,
 * including those Node and undici make on the application's behalf.
 *
 * @example
 * ```ts
 * trackAbortListeners();
 * await import('./server.js');
 * ```
 */
export function trackAbortListeners(): void {
  if (tracking) return;
  tracking = true;
  const add = EventTarget.prototype.addEventListener;
  EventTarget.prototype.addEventListener = function addEventListener(
    this: EventTarget,
    ...args: Parameters<EventTarget['addEventListener']>
  ) {
    if (args[0] === 'abort' && this instanceof AbortSignal && !seen.has(this)) {
      seen.add(this);
      watched.add(new WeakRef(this));
    }
    return add.apply(this, args);
  };
}

/**
 * The `'abort'` listeners on live signals now; forgets the signals that have been collected. Take it after a full
 * collection (see `sampleProcess()`), or signals nobody holds any more are still counted.
 *
 * @example
 * ```ts
 * const { listeners } = liveAbortListeners();
 * ```
 */
export function liveAbortListeners(): AbortListenerCount {
  let signals = 0;
  let listeners = 0;
  for (const ref of watched) {
    const signal = ref.deref();
    if (signal === undefined) {
      watched.delete(ref);
      continue;
    }
    signals++;
    listeners += getEventListeners(signal, 'abort').length;
  }
  return { signals, listeners };
}
