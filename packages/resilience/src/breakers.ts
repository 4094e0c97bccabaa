/**
 * One breaker per downstream, made on first use: `breakers(new URL(url).origin)`.
 *
 * The map grows with each distinct target and never shrinks, so targets must be few and stable — an origin, a
 * service name, a database — never a URL with a path or an id in it. `maxTargets` turns a mistake there into a
 * clear error instead of an unbounded map. Why not evict (LRU)? A breaker is only useful if it remembers:
 * with more live targets than slots, each would be evicted before reaching `minimumCalls` and none would ever
 * open, silently; an evicted open breaker would come back closed and let the load through. A loud error names
 * the bad target at the first request that shows the mistake.
 */
import { InvalidArgumentError } from '@deadline/core';
import { checkName, checkNumber, checkObject } from '@deadline/core/internal';
import { CircuitBreaker } from './breaker.js';
import { type CircuitBreakerOptions, resolveBreakerOptions } from './breaker-options.js';

/**
 * Options of {@link createBreakers}: every breaker option but `target`, shared by all the breakers, and a cap on
 * how many targets the registry holds.
 *
 * @example
 * ```ts
 * const options: BreakersOptions = { failureThreshold: 10, logger: app.log, maxTargets: 50 };
 * const breakerFor = createBreakers(options);
 * ```
 */
export interface BreakersOptions extends Omit<CircuitBreakerOptions, 'target'> {
  /** The most distinct targets (an integer ≥ 1); one more throws `InvalidArgumentError` naming it. Default 1 000. */
  maxTargets?: number | undefined;
}

/**
 * The registry {@link createBreakers} returns: call it with a target to get that target's breaker.
 *
 * @example
 * ```ts
 * const breakerFor: Breakers = createBreakers({ logger: app.log });
 * await breakerFor('inventory').execute(() => inventory.get(sku));
 * for (const [target, breaker] of breakerFor.entries()) gauge.set({ target }, breaker.stats.failureRate);
 * ```
 */
export interface Breakers {
  /** The breaker for `target`, made (with the shared options) on first use. */
  (target: string): CircuitBreaker;
  /** How many targets have a breaker. */
  readonly size: number;
  /** Every target and its breaker, in the order they were first used. */
  entries(): IterableIterator<[string, CircuitBreaker]>;
}

/**
 * Makes a registry of breakers, one per target, all with the same options (checked now, once). Breakers live as
 * long as the registry; see {@link BreakersOptions.maxTargets} for why the registry is capped, not evicting.
 *
 * @example
 * ```ts
 * import { createBreakers } from '@deadline/resilience';
 * const breakerFor = createBreakers({ cooldownMs: 5_000, logger: app.log });
 *
 * async function get(url: string) {
 *   return breakerFor(new URL(url).origin).execute((signal) => fetch(url, { signal }));
 * }
 * ```
 */
export function createBreakers(options: BreakersOptions = {}): Breakers {
  const { maxTargets: max, ...shared } = (checkObject('options', options) ?? {}) as BreakersOptions;
  const maxTargets = checkNumber('maxTargets', max, { min: 1 }) ?? 1_000;
  if (!Number.isInteger(maxTargets)) throw new InvalidArgumentError('maxTargets', 'an integer ≥ 1', maxTargets);
  // Fail at startup on a bad option, not on the first request to some target.
  resolveBreakerOptions({ ...shared, target: 'breakers' });
  const breakers = new Map<string, CircuitBreaker>();

  const breakerFor = (target: string): CircuitBreaker => {
    const known = breakers.get(target);
    if (known !== undefined) return known;
    checkName('target', target, false);
    if (breakers.size >= maxTargets) {
      throw new InvalidArgumentError(
        'target',
        `one of the ${maxTargets} targets this registry already holds (maxTargets): name breakers by origin or service, not by URL`,
        target,
      );
    }
    const breaker = new CircuitBreaker({ ...shared, target });
    breakers.set(target, breaker);
    return breaker;
  };
  Object.defineProperty(breakerFor, 'size', { get: () => breakers.size, enumerable: true });
  return Object.assign(breakerFor, { entries: () => breakers.entries() }) as Breakers;
}
