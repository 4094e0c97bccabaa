import { once } from 'node:events';

/** Resolves with the signal's reason once it aborts (at once if it already has). */
export async function aborted(signal: AbortSignal): Promise<unknown> {
  if (!signal.aborted) await once(signal, 'abort');
  return signal.reason;
}

/**
 * Counts live timers (set, not yet fired or cleared), including unref'd ones, which
 * `process.getActiveResourcesInfo()` leaves out. Call `restore()` when done.
 */
export function trackTimers(): { readonly live: number; restore(): void } {
  const live = new Set<unknown>();
  const realSet = globalThis.setTimeout;
  const realClear = globalThis.clearTimeout;
  globalThis.setTimeout = ((fn: (...args: unknown[]) => void, ms?: number, ...args: unknown[]) => {
    const timer = realSet(
      (...a: unknown[]) => {
        live.delete(timer);
        fn(...a);
      },
      ms,
      ...args,
    );
    live.add(timer);
    return timer;
  }) as typeof setTimeout;
  globalThis.clearTimeout = ((timer: NodeJS.Timeout | undefined) => {
    live.delete(timer);
    realClear(timer);
  }) as typeof clearTimeout;
  return {
    get live() {
      return live.size;
    },
    restore() {
      globalThis.setTimeout = realSet;
      globalThis.clearTimeout = realClear;
    },
  };
}
