/**
 * A retry budget per downstream (Finagle's, which Envoy's and the SRE book's advice match): retries may be at
 * most `ratio` of the requests of the last `ttlMs`, plus a small floor per second so a quiet service can still
 * retry. When a downstream fails everything, retries stop at that ratio instead of multiplying its load.
 */
import { checkFunction, checkNumber, checkObject, monotonicNow } from '@deadline/core/internal';

/**
 * Options of {@link RetryBudget}.
 *
 * @example
 * ```ts
 * const options: RetryBudgetOptions = { ratio: 0.1, minRetriesPerSecond: 5 };
 * ```
 */
export interface RetryBudgetOptions {
  /** Retries allowed per request, over the window (0.2: one retry per five requests). Default 0.2. */
  ratio?: number | undefined;
  /** Retries allowed per second whatever the traffic (the floor for quiet services). Default 10. */
  minRetriesPerSecond?: number | undefined;
  /** The window requests and retries are counted over (ms, whole seconds). Default 10 000. */
  ttlMs?: number | undefined;
  /** The clock (monotonic ms); for tests. */
  now?: (() => number) | undefined;
}

/**
 * Counts requests and retries per second over a sliding window and says whether one more retry fits.
 * One per downstream; share it between every `retry()` to that downstream.
 *
 * @example
 * ```ts
 * import { RetryBudget, retry } from '@deadline/resilience';
 * const inventoryRetries = new RetryBudget({ ratio: 0.1 });
 * const stock = await retry((attempt, signal) => fetch('http://inventory/stock', { signal }), {
 *   attempts: 3,
 *   retryBudget: inventoryRetries,
 * });
 * ```
 */
export class RetryBudget {
  readonly #ratio: number;
  readonly #floorPerSecond: number;
  readonly #seconds: number;
  readonly #now: () => number;
  /** Per second of the window, a ring: requests seen and retries spent. */
  readonly #requests: Float64Array;
  readonly #retries: Float64Array;
  /** The second (since the clock's origin) the ring's newest slot stands for. */
  #second = Number.NEGATIVE_INFINITY;

  constructor(options: RetryBudgetOptions = {}) {
    checkObject('options', options);
    this.#ratio = checkNumber('ratio', options.ratio, { min: 0, max: 1000 }) ?? 0.2;
    this.#floorPerSecond = checkNumber('minRetriesPerSecond', options.minRetriesPerSecond, { max: 1e6 }) ?? 10;
    const ttlMs = checkNumber('ttlMs', options.ttlMs, { min: 1000, max: 3_600_000 }) ?? 10_000;
    this.#seconds = Math.round(ttlMs / 1000);
    this.#now = checkFunction<() => number>('now', options.now) ?? monotonicNow;
    this.#requests = new Float64Array(this.#seconds);
    this.#retries = new Float64Array(this.#seconds);
  }

  /** Counts one request (a first attempt): it earns `ratio` of a retry. */
  recordRequest(): void {
    const slot = this.#slot();
    this.#requests[slot] = (this.#requests[slot] ?? 0) + 1;
  }

  /** Spends one retry if the budget has one; false means "do not retry, fail with the error you have". */
  tryRetry(): boolean {
    const slot = this.#slot();
    if (this.available < 1) return false;
    this.#retries[slot] = (this.#retries[slot] ?? 0) + 1;
    return true;
  }

  /** Retries the budget allows right now (may be fractional). */
  get available(): number {
    this.#slot();
    let requests = 0;
    let retries = 0;
    for (let i = 0; i < this.#seconds; i++) {
      requests += this.#requests[i] ?? 0;
      retries += this.#retries[i] ?? 0;
    }
    return requests * this.#ratio + this.#floorPerSecond * this.#seconds - retries;
  }

  /** The ring slot of the current second, clearing the seconds that went by (lazily: no timer). */
  #slot(): number {
    const second = Math.floor(this.#now() / 1000);
    if (second !== this.#second) {
      const gone = second - this.#second;
      if (gone >= this.#seconds || gone < 0) {
        // Idle for a whole window (or first use): nothing in it counts any more.
        this.#requests.fill(0);
        this.#retries.fill(0);
      } else {
        for (let i = 1; i <= gone; i++) {
          const slot = (this.#second + i) % this.#seconds;
          this.#requests[slot] = 0;
          this.#retries[slot] = 0;
        }
      }
      this.#second = second;
    }
    return second % this.#seconds;
  }
}
