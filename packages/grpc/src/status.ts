/**
 * The two directions between gRPC statuses and this project's typed errors. A server answers a deadline with
 * `DEADLINE_EXCEEDED` and names the hop whose deadline fired in the `x-deadline-exceeded-by` trailer, as an HTTP
 * hop names it in a 504's header; a client turns that status back into a `DeadlineExceededError` whose `whose` is
 * `downstream:<hop>`.
 */
import { CancelledError, DeadlineExceededError, ErrorCode, findDeadlineError, type StopReason } from '@deadline/core';
import { type AdmissionRefusal, findErrorWithCode, shedMessage } from '@deadline/core/internal';
import {
  DEADLINE_EXCEEDED_BY_HEADER,
  DEADLINE_REFUSED_BY_HEADER,
  GRPC_RETRY_PUSHBACK_HEADER,
} from '@deadline/core/wire';
import { Metadata, status as Status, type StatusObject } from '@grpc/grpc-js';

/**
 * A status as grpc-js hands it over: a `StatusObject`, or the `ServiceError` a call fails with (which carries
 * the status's fields).
 *
 * @example
 * ```ts
 * const seen: GrpcStatusLike = { code: status.DEADLINE_EXCEEDED, details: 'Deadline exceeded', metadata };
 * ```
 */
export interface GrpcStatusLike {
  code?: number | undefined;
  details?: string | undefined;
  metadata?: Metadata | null | undefined;
  cause?: unknown;
}

/**
 * The gRPC status to answer `error` with, when it is one of ours or explained by one (a driver error our
 * cancellation caused, a server-side statement timeout): `DEADLINE_EXCEEDED` with the hop in the
 * `x-deadline-exceeded-by` trailer, `CANCELLED`, or `UNAVAILABLE` for a circuit breaker's refusal. `undefined`
 * for any other error: it is answered as grpc-js would.
 *
 * @example
 * ```ts
 * import { toGrpcStatus } from '@deadline/grpc';
 * try { callback(null, await reserve(call.request)); }
 * catch (err) { callback(toGrpcStatus(err, 'inventory') ?? err); }
 * ```
 */
export function toGrpcStatus(error: unknown, hop?: string): StatusObject | undefined {
  const typed = findDeadlineError(error);
  if (typed instanceof DeadlineExceededError) {
    const metadata = new Metadata();
    const whose = typed.hop ?? hop;
    if (whose !== undefined) metadata.set(DEADLINE_EXCEEDED_BY_HEADER, whose);
    return { code: Status.DEADLINE_EXCEEDED, details: typed.message, metadata };
  }
  if (typed instanceof CancelledError) {
    return { code: Status.CANCELLED, details: typed.message, metadata: new Metadata() };
  }
  const refusal = findErrorWithCode(error, ErrorCode.CircuitOpen);
  if (refusal !== undefined) return { code: Status.UNAVAILABLE, details: refusal.message, metadata: new Metadata() };
  return undefined;
}

/**
 * The status of a call admission refused for load: `UNAVAILABLE` (gRPC's code for a condition a retry, elsewhere or
 * later, may not meet), the refusing hop in `x-deadline-refused-by`, and in `grpc-retry-pushback-ms` when the queue
 * should have drained.
 * @internal
 */
export function shedStatus(refusal: AdmissionRefusal, hop: string): StatusObject {
  const metadata = new Metadata();
  metadata.set(DEADLINE_REFUSED_BY_HEADER, hop);
  metadata.set(GRPC_RETRY_PUSHBACK_HEADER, String(refusal.retryAfterMs));
  return { code: Status.UNAVAILABLE, details: shedMessage(refusal, hop), metadata };
}

/** The status a call refused before anything was sent ends with: its reason as details, and as `cause`. @internal */
export function refusedStatus(reason: unknown): StatusObject & { cause: unknown } {
  const known = toGrpcStatus(reason);
  const details = reason instanceof Error ? reason.message : String(reason);
  return {
    code: known?.code ?? Status.UNKNOWN,
    details: known?.details ?? details,
    // A refusal is this hop's own: no trailer names a downstream.
    metadata: new Metadata(),
    cause: reason,
  };
}

/** The hop a `DEADLINE_EXCEEDED` status names in its trailer, if any. @internal */
export function exceededBy(metadata: Metadata | null | undefined): string | undefined {
  const value = metadata?.get(DEADLINE_EXCEEDED_BY_HEADER)[0];
  return typeof value === 'string' && value.length > 0 ? value : undefined;
}

/**
 * The typed error a failed call's status means: the `DeadlineExceededError` or `CancelledError` this package
 * attached as its `cause`, or, for a status that did not pass through a {@link DeadlineChannel}, one built from
 * it — `DEADLINE_EXCEEDED` naming the hop of its `x-deadline-exceeded-by` trailer (`whose: 'downstream:<hop>'`),
 * else this hop's own; `CANCELLED` as a `CancelledError`. `undefined` for any other status.
 *
 * @example
 * ```ts
 * import { fromGrpcStatus } from '@deadline/grpc';
 * client.reserve(request, (err, reply) => {
 *   const typed = err && fromGrpcStatus(err, 'inventory.Reserve');
 *   if (typed) return reply504(typed.hop);
 * });
 * ```
 */
export function fromGrpcStatus(status: GrpcStatusLike, target?: string): StopReason | undefined {
  const attached = status.cause === undefined ? undefined : findDeadlineError(status.cause);
  if (attached !== undefined) return attached;
  if (status.code === Status.DEADLINE_EXCEEDED) {
    const hop = exceededBy(status.metadata);
    return new DeadlineExceededError({
      phase: 'during-call',
      target,
      whose: hop === undefined ? 'local' : `downstream:${hop}`,
      message: status.details,
    });
  }
  if (status.code === Status.CANCELLED) return new CancelledError(status.details ?? 'cancelled');
  return undefined;
}

/** The status code to cut a call off with for `reason`. @internal */
export function codeOf(reason: StopReason): Status {
  return reason instanceof DeadlineExceededError ? Status.DEADLINE_EXCEEDED : Status.CANCELLED;
}

/**
 * The statuses that say the downstream failed, with the HTTP status that says the same (as grpc-gateway maps them):
 * a circuit breaker and the call's log line read it as they read a 5xx. The other codes are answers (`NOT_FOUND`,
 * `INVALID_ARGUMENT`, `RESOURCE_EXHAUSTED` …), as a 4xx is; `DEADLINE_EXCEEDED` is a typed error of its own.
 * @internal
 */
export const FAILURE_STATUS: ReadonlyMap<number, number> = new Map([
  [Status.UNKNOWN, 500],
  [Status.INTERNAL, 500],
  [Status.UNAVAILABLE, 503],
  [Status.DATA_LOSS, 500],
]);
