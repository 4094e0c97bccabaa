/**
 * In-process wake-ups for requests waiting on a key held by another request of this process: they hear the
 * moment it completes or gives the key up, instead of at their next look at the store. Requests held by another
 * process are seen by looking again (see admission.ts).
 */
import type { DeadlineContext } from '@deadline/core';

const waiting = new Map<string, Set<() => void>>();

/** @internal Wakes whoever waits on `scope` in this process. */
export function wake(scope: string): void {
  const set = waiting.get(scope);
  if (set === undefined) return;
  waiting.delete(scope);
  for (const resolve of set) resolve();
}

/**
 * @internal Resolves after `ms`, when `scope` is woken, or when `context` stops, whichever comes first; leaves no
 * timer or listener behind.
 */
export function changeOrTimeout(scope: string, ms: number, context: DeadlineContext | undefined): Promise<void> {
  return new Promise((resolve) => {
    let set = waiting.get(scope);
    if (set === undefined) {
      set = new Set();
      waiting.set(scope, set);
    }
    const done = () => {
      clearTimeout(timer);
      off();
      const current = waiting.get(scope);
      current?.delete(done);
      if (current?.size === 0) waiting.delete(scope);
      resolve();
    };
    set.add(done);
    const timer = setTimeout(done, Math.max(1, Math.ceil(ms)));
    const off = context?.onStop(done) ?? (() => {});
  });
}
