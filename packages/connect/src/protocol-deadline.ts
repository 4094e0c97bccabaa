/**
 * Connect's own copy of the caller's deadline, as the server interceptor meets it. Connect-ES reads the timeout header
 * of the call's protocol itself and arms a timer that aborts the handler's signal with a `deadline_exceeded`
 * ConnectError (`createHandlerContext`). That abort is the caller's deadline, not the caller leaving — unless the
 * timeout is longer than a timer can hold: Node fires a `setTimeout` of more than 2^31−1 ms at once (printing a
 * `TimeoutOverflowWarning`), so a `Connect-Timeout-Ms` above 2147483647, or a `grpc-timeout` of 597 hours or more,
 * aborts the signal a millisecond after the call arrived. That abort is ignored: the context keeps its own (clamped)
 * deadline.
 */

import { Code, ConnectError } from '@connectrpc/connect';
import type { IncomingCallInit } from '@deadline/core/internal';
import { MAX_TIMER_DELAY_MS } from '@deadline/core/internal';
import { CONNECT_TIMEOUT_HEADER, GRPC_TIMEOUT_HEADER, parseGrpcTimeout } from '@deadline/core/wire';

/** How the core is told what an abort of the protocol's signal means. */
type AbortMeans = NonNullable<IncomingCallInit<unknown>['abortMeans']>;

/** The request's headers, as an interceptor's request holds them. */
interface RequestHeaders {
  get(name: string): string | null;
}

/**
 * The timeout Connect armed its timer with, in ms (`undefined`: none, or one it refused before the handler). The gRPC
 * and gRPC-Web protocols send `grpc-timeout` (their content types start `application/grpc`), the Connect protocol
 * `Connect-Timeout-Ms`, as Connect-ES's handlers read them.
 */
function connectTimeoutMs(header: RequestHeaders): number | undefined {
  const grpc = header.get('content-type')?.startsWith('application/grpc') === true;
  const value = header.get(grpc ? GRPC_TIMEOUT_HEADER : CONNECT_TIMEOUT_HEADER);
  if (value === null) return undefined;
  // Connect's grammar is the core's: up to 10 digits of ms, up to 8 digits and a unit.
  return grpc ? parseGrpcTimeout(value) : /^\d{1,10}$/.test(value) ? Number(value) : undefined;
}

/**
 * What an abort of the handler's signal means: Connect's deadline timer (`'deadline'`, or `'ignore'` when its timeout
 * overflowed the timer), or anything else — the caller leaving, the server shutting down (`'cancel'`).
 * @internal
 */
export function abortMeaning(header: RequestHeaders): AbortMeans {
  return (reason) => {
    if (!(reason instanceof ConnectError) || reason.code !== Code.DeadlineExceeded) return 'cancel';
    const timeoutMs = connectTimeoutMs(header);
    return timeoutMs !== undefined && timeoutMs > MAX_TIMER_DELAY_MS ? 'ignore' : 'deadline';
  };
}
