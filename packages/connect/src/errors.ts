/**
 * The two directions between Connect errors and this project's typed errors. A handler's deadline is answered
 * `deadline_exceeded` with the hop whose deadline fired in the `x-deadline-exceeded-by` metadata (a gRPC trailer, a
 * Connect error's header), as an HTTP hop names it in a 504's header; a client turns it back into a
 * `DeadlineExceededError` whose `whose` is `downstream:<hop>`.
 */

import { Code, ConnectError } from '@connectrpc/connect';
import { CancelledError, DeadlineExceededError, ErrorCode, findDeadlineError, type StopReason } from '@deadline/core';
import { type AdmissionRefusal, findErrorWithCode, shedMessage } from '@deadline/core/internal';
import {
  DEADLINE_EXCEEDED_BY_HEADER,
  DEADLINE_REFUSED_BY_HEADER,
  GRPC_RETRY_PUSHBACK_HEADER,
} from '@deadline/core/wire';

/**
 * The `ConnectError` to answer `error` with, when it is one of ours or explained by one (a driver error our
 * cancellation caused, a server-side statement timeout): `deadline_exceeded` naming the hop in the
 * `x-deadline-exceeded-by` metadata, `canceled`, or `unavailable` for a circuit breaker's refusal — each with the
 * typed error as its `cause`. `undefined` for any other error: it is answered as Connect would.
 *
 * @example
 * ```ts
 * import { toConnectError } from '@deadline/connect';
 * try { return await reserve(req); }
 * catch (err) { throw toConnectError(err, 'inventory') ?? err; }
 * ```
 */
export function toConnectError(error: unknown, hop?: string): ConnectError | undefined {
  const typed = findDeadlineError(error);
  if (typed instanceof DeadlineExceededError) {
    const whose = typed.hop ?? hop;
    const metadata = whose === undefined ? undefined : { [DEADLINE_EXCEEDED_BY_HEADER]: whose };
    return new ConnectError(typed.message, Code.DeadlineExceeded, metadata, undefined, typed);
  }
  if (typed instanceof CancelledError)
    return new ConnectError(typed.message, Code.Canceled, undefined, undefined, typed);
  const refusal = findErrorWithCode(error, ErrorCode.CircuitOpen);
  if (refusal !== undefined) {
    return new ConnectError(refusal.message, Code.Unavailable, refusal.headers, undefined, refusal);
  }
  return undefined;
}

/**
 * The error of a call admission refused for load: `unavailable` (503 in the Connect protocol), the refusing hop in
 * `x-deadline-refused-by`, when to retry in `Retry-After` (whole seconds, for HTTP) and `grpc-retry-pushback-ms` (for a
 * gRPC client's retry policy).
 * @internal
 */
export function shedError(refusal: AdmissionRefusal, hop: string): ConnectError {
  const metadata = {
    [DEADLINE_REFUSED_BY_HEADER]: hop,
    'retry-after': String(refusal.retryAfterS),
    [GRPC_RETRY_PUSHBACK_HEADER]: String(refusal.retryAfterMs),
  };
  return new ConnectError(shedMessage(refusal, hop), Code.Unavailable, metadata);
}

/** The hop a `deadline_exceeded` error names in its metadata, if any. @internal */
export function exceededBy(error: ConnectError): string | undefined {
  const value = error.metadata.get(DEADLINE_EXCEEDED_BY_HEADER);
  return value === null || value.length === 0 ? undefined : value;
}

/**
 * The typed error a failed call means: the `DeadlineExceededError` or `CancelledError` in its `cause` chain (a
 * call through a transport of {@link withDeadline} carries it), or, for a `ConnectError` that did not pass through
 * one, one built from it — `deadline_exceeded` naming the hop of its `x-deadline-exceeded-by` metadata
 * (`whose: 'downstream:<hop>'`), else this hop's own; `canceled` as a `CancelledError`. `undefined` otherwise.
 *
 * @example
 * ```ts
 * import { fromConnectError } from '@deadline/connect';
 * try { await inventory.reserve({ sku }); }
 * catch (err) {
 *   const typed = fromConnectError(err);
 *   if (typed?.code === 'ERR_DEADLINE_EXCEEDED') log.warn({ whose: typed.whose }, 'inventory ran out of time');
 * }
 * ```
 */
export function fromConnectError(error: unknown, target?: string): StopReason | undefined {
  const typed = findDeadlineError(error);
  if (typed !== undefined) return typed;
  if (!(error instanceof ConnectError)) return undefined;
  if (error.code === Code.DeadlineExceeded) {
    const hop = exceededBy(error);
    return new DeadlineExceededError({
      phase: 'during-call',
      target,
      whose: hop === undefined ? 'local' : `downstream:${hop}`,
      message: error.rawMessage,
      cause: error,
    });
  }
  if (error.code === Code.Canceled) return new CancelledError(error.rawMessage, { cause: error });
  return undefined;
}

/** The code a refused or cut-off call fails with for `reason`. @internal */
export function codeOf(reason: unknown): Code {
  const typed = findDeadlineError(reason);
  if (typed instanceof DeadlineExceededError) return Code.DeadlineExceeded;
  if (typed instanceof CancelledError) return Code.Canceled;
  return findErrorWithCode(reason, ErrorCode.CircuitOpen) === undefined ? Code.Unknown : Code.Unavailable;
}

/**
 * The codes that say the downstream failed, with the HTTP status that says the same: a circuit breaker and the
 * call's log line read them as a 5xx. The others are answers (`not_found`, `invalid_argument` …), as a 4xx is.
 * @internal
 */
export const FAILURE_STATUS: ReadonlyMap<Code, number> = new Map([
  [Code.Unknown, 500],
  [Code.Internal, 500],
  [Code.Unavailable, 503],
  [Code.DataLoss, 500],
]);
