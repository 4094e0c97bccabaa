/**
 * `@deadline/core/internal` — the adapter kit: what this project's adapters (`@deadline/fastify`,
 * `@deadline/http`, …) are built from. Not covered by semver: it changes with the adapters, in any release.
 * Applications import `@deadline/core`; proxies and codec users `@deadline/core/wire`.
 * @packageDocumentation
 */

export {
  Admission,
  type AdmissionPass,
  type AdmissionReason,
  type AdmissionRefusal,
  AdmissionRoute,
  type AdmissionVerdict,
  LOADED_MS,
  shedMessage,
} from './admission.js';
export { isExempt, type ResolvedAdmission, resolveAdmission } from './admission-options.js';
export { type CallStopListener, OutgoingCall, type OutgoingCallOptions } from './call.js';
export type { CallGuard, CallOutcome, CallPermit } from './call-guard.js';
export { CheckoutQueue } from './checkout-queue.js';
export { MAX_TIMER_DELAY_MS, monotonicNow, timerDelay } from './clock.js';
export { describeValue } from './describe-value.js';
export {
  hasCallSubscribers,
  hasPropagateSubscribers,
  publishAdmissionRefused,
  publishCallEnd,
  publishCallStart,
  publishCancelled,
  publishExceeded,
  publishMessageDropped,
  publishPropagate,
} from './diagnostics.js';
export { type DriverPatch, type PatchHooks, patchOnce, replaceMethods } from './driver-patch.js';
export { type ErrorRecognizer, recognizeErrors } from './error-recognizers.js';
export { defineErrorClass } from './errors.js';
export { waitingForExpiry } from './expiry-queue.js';
export { findErrorWithCode, findInCauses, markCausedBy } from './guards.js';
export { IncomingCall, type IncomingCallInit } from './incoming-call.js';
export {
  type CallLineLogger,
  type IncomingCallOptions,
  type ResolvedIncomingOptions,
  type RpcServerOptions,
  resolveIncomingOptions,
} from './incoming-options.js';
export { loopDelayMs } from './loop-delay.js';
export { nextReady, type ReadyEmitter } from './next-ready.js';
export { activeRequestSpan, activeSpan, openTelemetryPropagates } from './opentelemetry/active.js';
export {
  type OtelApi,
  type OtelAttributes,
  type OtelContext,
  type OtelSpan,
  type OtelSpanContext,
  type OtelTracer,
  openTelemetry,
  openTelemetryRegistry,
  registeredOpenTelemetry,
} from './opentelemetry/api.js';
export { DeadlineAttributes, DeadlineEvents } from './opentelemetry/attributes.js';
export {
  callSpansWanted,
  OUTGOING_CALL_KEY,
  registerCallSpans,
  runWithCall,
} from './opentelemetry/call-span.js';
export { runInSpanOf, spanOfTrace, traceOfSpan } from './opentelemetry/span-trace.js';
export { type OutgoingLimits, type ResolvedOutgoingLimits, resolveOutgoingLimits } from './outgoing-options.js';
export { addTraceHeaders } from './prepare-call.js';
export { type OutlivedReporter, releasedScope, Scope, type StopOwner } from './scope.js';
export { ServiceTime, type ServiceTimeOptions } from './service-time.js';
export { outsideContext, storage } from './storage.js';
export { NEW_TRACE } from './trace.js';
export { isUnpatched, unpatched } from './unpatched.js';
export { untilStopped } from './until-stopped.js';
export { checkBoolean, checkFunction, checkGuard, checkHop, checkName, checkNumber, checkObject } from './validate.js';
export { WaitQueue } from './wait-queue.js';
export { readHeader, tableHeaders } from './wire/headers.js';
export { ourBudgetAlone } from './wire/parse-budget.js';
