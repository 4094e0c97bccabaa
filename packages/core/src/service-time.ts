/**
 * How long a route's (or an RPC method's) requests take: a streaming estimate of a high percentile, for admission to
 * ask whether a request's remaining budget can cover it. Samples go into a log-bucketed histogram (each bucket 10 %
 * wider than the one below, 0.05 ms to 60 s: 148 buckets, fixed memory), weighted so that a sample counts half as
 * much after `halfLife` more samples: the estimate follows a route whose cost changes, and forgets a burst of outliers
 * (a stall, a run of errors) within a few half-lives. The decay costs nothing per sample: instead of shrinking every
 * old count, each new sample weighs more than the last, and the counts are scaled down together once the weights grow
 * large. Time is the caller's (monotonic) clock: there is no wall clock here for a jump to poison.
 */

/**
 * Options of {@link ServiceTime}.
 *
 * @example
 * ```ts
 * const options: ServiceTimeOptions = { quantile: 0.95, halfLife: 500 };
 * ```
 * @internal
 */
export interface ServiceTimeOptions {
  /** The percentile estimated, 0 < quantile < 1. Default 0.9. */
  quantile?: number | undefined;
  /** After this many samples a sample counts half as much (`Infinity`: never). Default 200. */
  halfLife?: number | undefined;
  /** Samples before the estimate is given (before: `undefined`, nothing known yet). Default 20. */
  warmup?: number | undefined;
}

const LOWEST_MS = 0.05;
const HIGHEST_MS = 60_000;
const GROWTH = 1.1;
const LOG_GROWTH = Math.log(GROWTH);
const BUCKETS = Math.ceil(Math.log(HIGHEST_MS / LOWEST_MS) / LOG_GROWTH) + 1;
/** Once a sample's weight passes this, every count (and the weight) is scaled back down. */
const RESCALE_AT = 2 ** 64;

/**
 * A streaming estimate of a route's service time (see the file's comment).
 *
 * @example
 * ```ts
 * const time = new ServiceTime({ quantile: 0.9 });
 * time.record(performance.now() - startedAt); // as each request ends
 * const expectedMs = time.estimate(); // undefined until 20 samples
 * ```
 * @internal
 */
export class ServiceTime {
  readonly #counts = new Float64Array(BUCKETS);
  readonly #quantile: number;
  readonly #growth: number;
  readonly #warmup: number;
  /** The weight of the next sample. */
  #weight = 1;
  /** The sum of the counts. */
  #total = 0;
  #samples = 0;
  /** The estimate, while no sample came since it was made. */
  #cached: number | undefined;
  /**
   * The last other percentile asked for, and its estimate while no sample came since: admission asks for its floor on
   * every request, and a route answers far fewer than it is asked about under load.
   */
  #otherQuantile = Number.NaN;
  #otherCached: number | undefined;

  constructor(options: ServiceTimeOptions = {}) {
    const quantile = options.quantile ?? 0.9;
    const halfLife = options.halfLife ?? 200;
    this.#quantile = quantile > 0 && quantile < 1 ? quantile : 0.9;
    this.#growth = 2 ** (1 / (halfLife >= 1 ? halfLife : 200));
    this.#warmup = Math.max(1, options.warmup ?? 20);
  }

  /** Samples recorded so far. */
  get samples(): number {
    return this.#samples;
  }

  /** Records one request's time, in ms. Anything but a finite number ≥ 0 is ignored; beyond 60 s counts as 60 s. */
  record(ms: number): void {
    if (!(ms >= 0) || ms === Number.POSITIVE_INFINITY) return;
    const bucket = ms <= LOWEST_MS ? 0 : Math.min(BUCKETS - 1, Math.ceil(Math.log(ms / LOWEST_MS) / LOG_GROWTH));
    const counts = this.#counts;
    counts[bucket] = (counts[bucket] as number) + this.#weight;
    this.#total += this.#weight;
    this.#samples++;
    this.#cached = undefined;
    this.#otherCached = undefined;
    this.#weight *= this.#growth;
    if (this.#weight > RESCALE_AT) this.#rescale();
  }

  /**
   * The estimated percentile, in ms (the top of its bucket: at most 10 % above the true value, never below it), or
   * `undefined` before `warmup` samples. `quantile` asks for another percentile than the one set at construction
   * (admission asks for a low one too: the least time a request of the route needs); the default and the last other
   * one asked for are cached until the next sample.
   */
  estimate(quantile?: number): number | undefined {
    if (this.#samples < this.#warmup) return undefined;
    if (quantile !== undefined && quantile !== this.#quantile) {
      if (quantile !== this.#otherQuantile) {
        this.#otherQuantile = quantile;
        this.#otherCached = undefined;
      }
      this.#otherCached ??= this.#percentile(quantile);
      return this.#otherCached;
    }
    this.#cached ??= this.#percentile(this.#quantile);
    return this.#cached;
  }

  /**
   * Weighs every sample so far `factor` times less (0 < factor < 1): as if `log2(1 / factor)` half-lives had passed.
   * For evidence that the past no longer holds: admission fades a route's history when a request it let through
   * despite the estimate (its probe) finished well under it, so that an estimate poisoned by a burst stops
   * refusing after a few probes instead of a few half-lives of samples that it refuses to let come.
   */
  fade(factor: number): void {
    if (!(factor > 0 && factor < 1)) return;
    // The next samples weigh 1 / factor more than they would have: the same as scaling down every count.
    this.#weight /= factor;
    this.#cached = undefined;
    this.#otherCached = undefined;
    if (this.#weight > RESCALE_AT) this.#rescale();
  }

  #percentile(quantile: number): number {
    const wanted = quantile * this.#total;
    const counts = this.#counts;
    let sum = 0;
    let bucket = 0;
    for (; bucket < BUCKETS - 1; bucket++) {
      sum += counts[bucket] as number;
      if (sum >= wanted) break;
    }
    return LOWEST_MS * GROWTH ** bucket;
  }

  #rescale(): void {
    const scale = 1 / this.#weight;
    const counts = this.#counts;
    for (let i = 0; i < BUCKETS; i++) counts[i] = (counts[i] as number) * scale;
    this.#total *= scale;
    this.#weight = 1;
  }
}
