/**
 * `@deadline/core` — one request budget, honoured end to end: the application API. A deadline, the
 * AsyncLocalStorage context that carries it, the timeout of each outgoing call derived from it, the errors
 * that say whose deadline fired, and the diagnostics channels to watch it all. Zero runtime dependencies.
 *
 * Two more entry points, each for its own audience:
 * - `@deadline/core/wire` — the header codec (`X-Request-Deadline`, `grpc-timeout`, `Connect-Timeout-Ms`,
 *   Envoy's), for proxies, gateways and adapter authors;
 * - `@deadline/core/internal` — the kit this project's adapters are built from; not covered by semver.
 *
 * Every export is named here; nothing is re-exported wholesale.
 * @packageDocumentation
 */

export type { AdmissionOptions } from './admission-options.js';
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
export {
  type ContextKey,
  type ContextKeyOptions,
  type ContextValue,
  createContextKey,
} from './context-key.js';
export { Deadline } from './deadline.js';
export {
  type AdmissionRefusedMessage,
  type CallCancelMessage,
  type CallEndMessage,
  type CallOutlivedMessage,
  type CallStartMessage,
  type CancelledMessage,
  type ContextEndMessage,
  type ContextStartMessage,
  DiagnosticsChannel,
  type ExceededMessage,
  type IncomingStartMessage,
  type MessageDroppedMessage,
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
export { type PrepareCallOptions, type PreparedCall, prepareCall } from './prepare-call.js';
export type { DeadlineContext, EndOptions, OwnedContext, StopListener, StopReason } from './scope.js';
export { type TimeoutOptions, timeoutFor } from './timeout-for.js';
export { type TraceContext, traceFrom } from './trace.js';
