/**
 * The breaker's sliding time window: counted calls, failures and slow calls over the last `windowMs`, kept in a
 * ring of equal time buckets. Nothing runs on a timer: buckets are rotated when the window is next touched, so
 * a breaker nobody calls costs nothing, and after a long idle the whole ring is cleared in one step (no loop
 * over the missed buckets).
 *
 * Granularity: an outcome counts for at most `windowMs` and at least `windowMs − windowMs / buckets` — it
 * leaves the window when its bucket is reused, exactly `windowMs` after that bucket began.
 */

/** @internal */
export class SlidingWindow {
  readonly #bucketMs: number;
  readonly #origin: number;
  // Preallocated once: recording an outcome allocates nothing.
  readonly #calls: Uint32Array;
  readonly #failures: Uint32Array;
  readonly #slow: Uint32Array;
  /** The absolute index (time / bucketMs since origin) of the newest bucket. */
  #epoch = 0;
  #totalCalls = 0;
  #totalFailures = 0;
  #totalSlow = 0;

  constructor(windowMs: number, buckets: number, origin: number) {
    this.#bucketMs = windowMs / buckets;
    this.#origin = origin;
    this.#calls = new Uint32Array(buckets);
    this.#failures = new Uint32Array(buckets);
    this.#slow = new Uint32Array(buckets);
  }

  /** Counted calls (successes and failures) in the window, as of the last {@link advance}. */
  get calls(): number {
    return this.#totalCalls;
  }

  get failures(): number {
    return this.#totalFailures;
  }

  get slowCalls(): number {
    return this.#totalSlow;
  }

  /** Drops the buckets that fell out of the window by `now`. */
  advance(now: number): void {
    const epoch = Math.floor((now - this.#origin) / this.#bucketMs);
    // A clock that stands still (or a fake one stepped back) keeps recording into the newest bucket.
    if (!(epoch > this.#epoch)) return;
    const size = this.#calls.length;
    if (epoch - this.#epoch >= size) {
      // Idle for a whole window or more: everything expired.
      this.#zero();
    } else {
      for (let e = this.#epoch + 1; e <= epoch; e++) {
        const i = e % size;
        this.#totalCalls -= this.#calls[i] as number;
        this.#totalFailures -= this.#failures[i] as number;
        this.#totalSlow -= this.#slow[i] as number;
        this.#calls[i] = 0;
        this.#failures[i] = 0;
        this.#slow[i] = 0;
      }
    }
    this.#epoch = epoch;
  }

  /** Counts one call (a success unless `failed`) at `now`. */
  record(now: number, failed: boolean, slow: boolean): void {
    this.advance(now);
    const i = this.#epoch % this.#calls.length;
    this.#calls[i] = (this.#calls[i] as number) + 1;
    this.#totalCalls++;
    if (failed) {
      this.#failures[i] = (this.#failures[i] as number) + 1;
      this.#totalFailures++;
    }
    if (slow) {
      this.#slow[i] = (this.#slow[i] as number) + 1;
      this.#totalSlow++;
    }
  }

  /** Forgets every outcome (the circuit closed, or was reset). */
  clear(): void {
    this.#zero();
  }

  #zero(): void {
    this.#calls.fill(0);
    this.#failures.fill(0);
    this.#slow.fill(0);
    this.#totalCalls = 0;
    this.#totalFailures = 0;
    this.#totalSlow = 0;
  }
}
