/** Waiting for the first of several things, with every listener and timer taken off afterwards. */
import type { EventEmitter } from 'node:events';

/**
 * Resolves when the first of these happens: `emitter` emits one of `events`, `settled` settles, or `ms` pass
 * (each when given). Never rejects. The timer is unref'd: a wait never keeps the process alive.
 * @internal
 */
export function firstOf(
  emitter: EventEmitter,
  events: readonly string[],
  settled?: Promise<unknown>,
  ms?: number,
): Promise<void> {
  return new Promise<void>((resolve) => {
    let timer: NodeJS.Timeout | undefined;
    const done = () => {
      for (const event of events) emitter.off(event, done);
      if (timer !== undefined) clearTimeout(timer);
      resolve();
    };
    for (const event of events) emitter.once(event, done);
    settled?.then(done, done);
    if (ms !== undefined) {
      timer = setTimeout(done, ms);
      timer.unref();
    }
  });
}
