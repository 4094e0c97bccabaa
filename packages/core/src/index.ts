/**
 * `@deadline/core` — one request budget, honoured end to end: the deadline value, its AsyncLocalStorage
 * context, the wire codec, the errors and the diagnostics events. Zero runtime dependencies.
 *
 * Every export is named here; nothing is re-exported wholesale.
 * @packageDocumentation
 */

export type { CallGuard, CallOutcome, CallPermit } from './call-guard.js';
export { MAX_TIMER_DELAY_MS } from './clock.js';
export {
  bindContext,
  type ContextInit,
  createContext,
  currentContext,
  currentDeadline,
  currentSignal,
  remainingMs,
  runWithContext,
  runWithDeadline,
  throwIfExpired,
  withoutCancel,
} from './context.js';
export { Deadline } from './deadline.js';
export {
  type BreakerStateMessage,
  type CallEndMessage,
  type CallOutlivedMessage,
  type CallStartMessage,
  type CancelledMessage,
  type ContextEndMessage,
  type ContextStartMessage,
  DiagnosticsChannel,
  type ExceededMessage,
  type PropagateMessage,
} from './diagnostics.js';
export {
  CancelledError,
  type CancelReason,
  DeadlineError,
  type DeadlineExceededDetails,
  DeadlineExceededError,
  type DeadlineOwner,
  type DeadlinePhase,
  ErrorCode,
  InvalidArgumentError,
  isDeadlineError,
} from './errors.js';
export { findDeadlineError, isCancelledError, isDeadlineExceededError } from './guards.js';
export { IdempotencyKeys } from './idempotency-keys.js';
export type { CallLineLogger, IncomingCallOptions } from './incoming-options.js';
export { DeadlineAttributes, DeadlineEvents } from './opentelemetry/attributes.js';
export { type PrepareCallOptions, type PreparedCall, prepareCall } from './prepare-call.js';
export type { DeadlineContext, EndOptions, OwnedContext, StopListener, StopReason } from './scope.js';
export { type TimeoutOptions, timeoutFor } from './timeout-for.js';
export {
  formatTraceparent,
  newSpanId,
  newTraceId,
  type ParsedTraceparent,
  parseTraceparent,
  type TraceContext,
  traceFrom,
} from './trace.js';
export { parseExceededBy } from './wire/exceeded-by.js';
export { type BudgetHeaders, formatBudgetHeaders } from './wire/format-budget.js';
export { formatGrpcTimeout, parseGrpcTimeout } from './wire/grpc-timeout.js';
export {
  ALL_DIALECTS,
  type BudgetHeader,
  CONNECT_TIMEOUT_HEADER,
  DEADLINE_EXCEEDED_BY_HEADER,
  type DeadlineDialect,
  ENVOY_EXPECTED_TIMEOUT_HEADER,
  ENVOY_UPSTREAM_TIMEOUT_HEADER,
  GRPC_TIMEOUT_HEADER,
  REQUEST_DEADLINE_AT_HEADER,
  REQUEST_DEADLINE_HEADER,
} from './wire/header-names.js';
export type { HeaderSource } from './wire/headers.js';
export { formatRequestDeadline, parseRequestDeadline } from './wire/milliseconds.js';
export {
  type BudgetParser,
  type BudgetParserOptions,
  createBudgetParser,
  type IgnoredHeader,
  type ParsedBudget,
  parseBudget,
} from './wire/parse-budget.js';
