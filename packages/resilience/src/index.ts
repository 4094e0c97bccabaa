/**
 * `@deadline/resilience` — retries inside the request's budget, a retry budget, and a deadline-aware circuit
 * breaker.
 * @packageDocumentation
 */

export {
  type BreakerTransitionReason,
  CircuitBreaker,
  type CircuitBreakerStats,
  type CircuitState,
} from './breaker.js';
export type { BreakerLogger, CircuitBreakerOptions } from './breaker-options.js';
export type { BreakerPermit } from './breaker-permit.js';
export { BREAKER_STATE_CHANNEL, type BreakerStateEvent } from './breaker-state.js';
export { type Breakers, type BreakersOptions, createBreakers } from './breakers.js';
export { CircuitOpenError, isCircuitOpenError } from './circuit-open-error.js';
export { classifyError, neverSent, statusOf, type Verdict } from './classify.js';
export { type RetryEvent, type RetryOptions, retry } from './retry.js';
export { parseRetryAfter } from './retry-after.js';
export { RetryBudget, type RetryBudgetOptions } from './retry-budget.js';
