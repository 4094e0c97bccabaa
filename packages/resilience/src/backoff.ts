/**
 * Exponential backoff with full jitter (AWS architecture blog, "Exponential Backoff and Jitter"): the wait
 * before retry n is uniform in [0, min(cap, base · 2^(n−1))]. Full jitter spreads the retries of many callers
 * that failed together, so they do not come back together.
 */

/** The wait (ms) before the retry that follows attempt `attempt` (1-based). @internal */
export function fullJitter(attempt: number, baseMs: number, capMs: number, random: () => number): number {
  const ceiling = Math.min(capMs, baseMs * 2 ** Math.min(attempt - 1, 52));
  return Math.floor(random() * ceiling);
}
