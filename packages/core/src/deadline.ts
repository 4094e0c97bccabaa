/**
 * The deadline value: an instant on this process's monotonic clock, plus the instant it was set (so that
 * logs and errors can say "after 812 ms of an 800 ms budget"). Immutable; deriving only ever shrinks it.
 */
import { monotonicNow } from './clock.js';
import { InvalidArgumentError } from './errors.js';

const kDeadline = Symbol.for('@deadline/core/deadline@1');

/**
 * An immutable point in time by which work must be done, on the monotonic clock.
 * `Deadline.NONE` means "no deadline": it never expires and has `Infinity` remaining.
 *
 * Remaining time is computed whenever asked, never stored, so a `Deadline` can be shared freely.
 *
 * @example
 * ```ts
 * import { Deadline } from '@deadline/core';
 * const d = Deadline.fromNow(800);
 * d.remainingMs();          // ≈ 800, never negative
 * d.child(2000) === d;      // true: deriving never extends
 * d.child(100).budgetMs;    // 100
 * Deadline.NONE.remainingMs(); // Infinity
 * ```
 */
export class Deadline {
  /** No deadline: never expires. The default wherever nothing set one. */
  static readonly NONE: Deadline = new Deadline(Number.NEGATIVE_INFINITY, Number.POSITIVE_INFINITY);

  // Private fields behind getters: immutable at run time without the cost of Object.freeze per request.
  readonly #startedAt: number;
  readonly #expiresAt: number;

  private constructor(startedAt: number, expiresAt: number) {
    this.#startedAt = startedAt;
    this.#expiresAt = expiresAt;
  }

  /** Monotonic instant (ms, see `performance.now()`) at which the deadline was set. */
  get startedAt(): number {
    return this.#startedAt;
  }

  /** Monotonic instant (ms) at which it expires; `Infinity` for {@link Deadline.NONE}. */
  get expiresAt(): number {
    return this.#expiresAt;
  }

  /**
   * A deadline `ms` milliseconds from now. `Infinity` gives {@link Deadline.NONE}; zero or a negative number
   * gives one that has already expired (as Go's `WithTimeout` does). Throws `InvalidArgumentError` for NaN
   * or a non-number.
   *
   * @example
   * ```ts
   * const d = Deadline.fromNow(250);
   * ```
   */
  static fromNow(ms: number): Deadline {
    if (typeof ms !== 'number' || Number.isNaN(ms)) {
      throw new InvalidArgumentError('ms', 'a number of milliseconds', ms);
    }
    if (ms === Number.POSITIVE_INFINITY) return Deadline.NONE;
    const now = monotonicNow();
    return new Deadline(now, now + Math.max(ms, 0));
  }

  /**
   * A deadline at a given monotonic instant (`performance.now()` time base), e.g. one anchored when a
   * request's first byte arrived. `startedAt` defaults to now.
   *
   * @example
   * ```ts
   * const arrivedAt = performance.now();
   * // … parse headers …
   * const d = Deadline.at(arrivedAt + 500, arrivedAt);
   * ```
   */
  static at(expiresAt: number, startedAt: number = monotonicNow()): Deadline {
    if (typeof expiresAt !== 'number' || Number.isNaN(expiresAt)) {
      throw new InvalidArgumentError('expiresAt', 'a monotonic instant in milliseconds', expiresAt);
    }
    if (typeof startedAt !== 'number' || !Number.isFinite(startedAt)) {
      throw new InvalidArgumentError('startedAt', 'a finite monotonic instant in milliseconds', startedAt);
    }
    if (expiresAt === Number.POSITIVE_INFINITY) return Deadline.NONE;
    return new Deadline(startedAt, Math.max(expiresAt, startedAt));
  }

  /**
   * @internal {@link Deadline.at} without its argument checks, for a request's arrival: the instant comes from
   * the monotonic clock and the budget was validated when it was parsed. Small enough for V8 to inline.
   */
  static _anchored(startedAt: number, budgetMs: number): Deadline {
    return budgetMs === Number.POSITIVE_INFINITY ? Deadline.NONE : new Deadline(startedAt, startedAt + budgetMs);
  }

  /** Whether `value` is a `Deadline` from any copy of this package. */
  static [Symbol.hasInstance](value: unknown): boolean {
    return typeof value === 'object' && value !== null && (value as { [kDeadline]?: unknown })[kDeadline] === true;
  }

  /** True for {@link Deadline.NONE} (or any deadline that never expires). */
  get isNone(): boolean {
    return this.#expiresAt === Number.POSITIVE_INFINITY;
  }

  /** The budget this deadline was set with, in ms to the microsecond (`Infinity` for none). */
  get budgetMs(): number {
    if (this.#expiresAt === Number.POSITIVE_INFINITY) return Number.POSITIVE_INFINITY;
    // Both instants are large floats: their difference carries rounding noise (a 250 ms budget read back as
    // 250.00000000000045). Microseconds are finer than any budget and coarser than that noise for years of uptime.
    return Math.round((this.#expiresAt - this.#startedAt) * 1000) / 1000;
  }

  /** Milliseconds left (fractional); 0 once expired, never negative; `Infinity` for none. */
  remainingMs(): number {
    if (this.#expiresAt === Number.POSITIVE_INFINITY) return Number.POSITIVE_INFINITY;
    const left = this.#expiresAt - monotonicNow();
    return Math.max(left, 0);
  }

  /** Milliseconds since the deadline was set (0 for none). */
  elapsedMs(): number {
    return this.#startedAt === Number.NEGATIVE_INFINITY ? 0 : monotonicNow() - this.#startedAt;
  }

  /** Whether the deadline has passed. Never true for none. */
  isExpired(): boolean {
    return this.#expiresAt !== Number.POSITIVE_INFINITY && this.#expiresAt <= monotonicNow();
  }

  /**
   * The earlier of this deadline and one `ms` from now: deriving a deadline never extends it.
   * Returns `this` when it is already the earlier one (no allocation).
   *
   * @example
   * ```ts
   * const call = currentDeadline().child(300); // at most 300 ms, less if the request has less
   * ```
   */
  child(ms: number): Deadline {
    return this.earlier(Deadline.fromNow(ms));
  }

  /** The earlier of two deadlines (`this` on a tie). `other` may come from another copy of this package. */
  earlier(other: Deadline): Deadline {
    return other.expiresAt < this.#expiresAt ? other : this;
  }

  /** `{ budgetMs, remainingMs }` rounded to whole ms, for logs. */
  toJSON(): { budgetMs: number | null; remainingMs: number | null } {
    if (this.isNone) return { budgetMs: null, remainingMs: null };
    return { budgetMs: Math.round(this.budgetMs), remainingMs: Math.floor(this.remainingMs()) };
  }

  /** E.g. `Deadline(412 ms left of 800 ms)` or `Deadline(none)`. */
  toString(): string {
    if (this.isNone) return 'Deadline(none)';
    return `Deadline(${Math.floor(this.remainingMs())} ms left of ${Math.round(this.budgetMs)} ms)`;
  }
}
Object.defineProperty(Deadline.prototype, kDeadline, { value: true });
