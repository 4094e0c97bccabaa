/**
 * Options of the client side. They are checked by the core's `resolveOutgoingLimits` when the transport is wrapped:
 * a bad value fails at startup, naming it.
 */
import type { CallGuard } from '@deadline/core/internal';

/**
 * Options of {@link withDeadline}.
 *
 * @example
 * ```ts
 * const options: ConnectClientDeadlineOptions = { marginMs: 20, defaultMs: 5_000 };
 * const transport = withDeadline(createGrpcTransport({ baseUrl }), options);
 * ```
 */
export interface ConnectClientDeadlineOptions {
  /** Kept back from every call for this hop's own work after it returns (ms). Default 0. */
  marginMs?: number | undefined;
  /** Below this many ms left, the call is not made: it fails at once with `deadline_exceeded`. Default 1. */
  minMs?: number | undefined;
  /**
   * The budget of a call made outside any deadline context (a startup check, a script), when it has no
   * `timeoutMs` of its own. Default: none, as Connect (such a call may wait for ever).
   */
  defaultMs?: number | undefined;
  /**
   * A circuit breaker for this downstream (`new CircuitBreaker({ target: 'inventory' })` of
   * `@deadline/resilience`): an open circuit refuses a call before anything is sent, with `unavailable`.
   */
  circuitBreaker?: CallGuard | undefined;
}
