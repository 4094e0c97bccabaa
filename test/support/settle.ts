/** How a call settled, for tests that time it: never rejects. */

/** When `work` settled, in ms since `start` (a `performance.now()` reading), and with what error (or none). */
export async function settle(start: number, work: Promise<unknown>): Promise<{ error: unknown; elapsed: number }> {
  try {
    await work;
    return { error: undefined, elapsed: performance.now() - start };
  } catch (error) {
    return { error, elapsed: performance.now() - start };
  }
}
