/**
 * Waiting for a condition that code under test makes true on its own turn: checked once per turn of the event
 * loop, never by sleeping a guessed time.
 */

/**
 * Resolves once `condition` holds, checked once per turn of the event loop; rejects after `limitMs`.
 *
 * @example
 * ```ts
 * await untilTrue(() => pool.waitingCount === 1);
 * ```
 */
export async function untilTrue(condition: () => boolean, limitMs = 10_000): Promise<void> {
  const limit = performance.now() + limitMs;
  while (!condition()) {
    if (performance.now() > limit) throw new Error(`condition not reached in ${limitMs} ms`);
    await new Promise((resolve) => setImmediate(resolve));
  }
}
