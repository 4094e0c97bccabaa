/**
 * `@deadline/core/internal` — helpers for this project's own adapters (`@deadline/fastify`, `@deadline/http`, …).
 * Not part of the public API: no semver promise. Applications should not import it.
 * @packageDocumentation
 */

export { type CallStopListener, OutgoingCall, type OutgoingCallOptions } from './call.js';
export type { CallGuard, CallOutcome, CallPermit } from './call-guard.js';
export { MAX_TIMER_DELAY_MS, monotonicNow, timerDelay } from './clock.js';
export { describeValue } from './describe-value.js';
export {
  hasCallSubscribers,
  hasPropagateSubscribers,
  publishBreakerState,
  publishCallEnd,
  publishCallStart,
  publishCancelled,
  publishExceeded,
  publishPropagate,
} from './diagnostics.js';
export { type CircuitRefusal, findCircuitRefusal, markCausedBy } from './guards.js';
export { nextReady, type ReadyEmitter } from './next-ready.js';
export { type OutlivedReporter, Scope } from './scope.js';
export { storage } from './storage.js';
export { checkBoolean, checkFunction, checkGuard, checkHop, checkName, checkNumber, checkObject } from './validate.js';
export { WaitQueue } from './wait-queue.js';
export { type HeaderSource, readHeader } from './wire/headers.js';
