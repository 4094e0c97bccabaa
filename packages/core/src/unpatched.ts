/**
 * Driver calls made by a wrapper that already bounds them (`withDeadline(pool)`), which a driver patch of ours
 * (`instrumentPg`, `instrumentMysql`) must pass straight through: bounded twice, a statement would get two
 * belts, two calls and two cancels. The wrapper makes the call inside `unpatched()`; the patch, entered
 * synchronously by that call, asks `isUnpatched()` first. One flag for every copy of this package.
 */
const key = Symbol.for('@deadline/core.unpatched@1');
const shared = ((globalThis as Record<symbol, unknown>)[key] ??= { depth: 0 }) as { depth: number };

/** @internal Runs `send` (a driver call) so that a driver patch of ours passes it through. */
export function unpatched<T>(send: () => T): T {
  shared.depth++;
  try {
    return send();
  } finally {
    shared.depth--;
  }
}

/** @internal Whether the driver call being made comes from inside {@link unpatched}. */
export function isUnpatched(): boolean {
  return shared.depth > 0;
}
