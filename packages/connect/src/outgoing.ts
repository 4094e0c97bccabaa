/**
 * One call through a transport of {@link withDeadline}: the signal it is given (the context's, or one of its own
 * linked by hand to the caller's, so nothing is left on a long-lived signal), and its failure explained as the typed
 * error it carries as `cause`.
 */

import { Code, ConnectError } from '@connectrpc/connect';
import type { OutgoingCall } from '@deadline/core/internal';
import { codeOf, exceededBy, FAILURE_STATUS } from './errors.js';

const noop = () => {};

/**
 * The signal a call is given. Without a signal of the caller's it is the context's own, one per context whatever its
 * calls: on Node 20 an AbortController costs microseconds to make and to link, and Connect links the signal it is
 * given to two of its own per call already. With the caller's, it is one of the call's own, linked to both by hand.
 * @internal
 */
export class CallSignal {
  readonly signal: AbortSignal;
  readonly #outer: AbortSignal | undefined;
  readonly #controller: AbortController | undefined;
  readonly #offStop: () => void;

  constructor(call: OutgoingCall, outer: AbortSignal | undefined, shared: AbortSignal | undefined) {
    this.#outer = outer;
    if (outer === undefined && shared !== undefined) {
      this.signal = shared;
      // Only to learn why, when the context stops: its signal aborts the call.
      this.#offStop = call.onStop(noop);
      return;
    }
    const controller = new AbortController();
    this.#controller = controller;
    this.signal = controller.signal;
    if (outer?.aborted === true) controller.abort(outer.reason);
    else outer?.addEventListener('abort', this);
    this.#offStop = call.onStop((reason) => controller.abort(reason));
  }

  /** The caller's own signal aborted: so does the call. */
  handleEvent(): void {
    this.#controller?.abort(this.#outer?.reason);
  }

  /** Unlinks from the caller's signal and the context: the call is over. */
  dispose(): void {
    this.#outer?.removeEventListener('abort', this);
    this.#offStop();
  }
}

/**
 * Ends `call` with what `error` means and returns the error to throw: the same `ConnectError`, its `cause` the typed
 * error when one explains it (a stop of ours, Connect's own timeout, a downstream naming its hop).
 * @internal
 */
export function failed(call: OutgoingCall, error: unknown): unknown {
  if (call.stopReason === undefined && error instanceof ConnectError && error.code === Code.DeadlineExceeded) {
    const hop = exceededBy(error);
    // Without a hop it is Connect's own timer: the timeout this hop gave the call (its budget, or less).
    if (hop === undefined) call._stopTimedOut();
    else call.stop(call.downstreamExceeded(hop));
  }
  const reason = call.stopReason;
  if (reason !== undefined) {
    call.end(reason);
    const code = codeOf(reason);
    // Connect reports an abort of ours as `canceled` (or `unknown`): the code says what happened, the cause why.
    if (error instanceof ConnectError && error.code === code && (error.cause === undefined || error.cause === reason)) {
      error.cause = reason;
      return error;
    }
    const metadata = error instanceof ConnectError ? error.metadata : undefined;
    return new ConnectError(reason.message, code, metadata, undefined, reason);
  }
  const failure = error instanceof ConnectError ? FAILURE_STATUS.get(error.code) : 500;
  call.end(failure === undefined ? undefined : error, failure);
  return error;
}
