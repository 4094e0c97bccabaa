/**
 * One call of a {@link DeadlineChannel}: grpc-js's own call, started with the trace metadata, cut off with
 * `cancelWithStatus` when the request's context stops, and ended with a status that says whose deadline fired.
 */
import type { OutgoingCall } from '@deadline/core/internal';
import { type Metadata, status as Status, type StatusObject } from '@grpc/grpc-js';
import type { CallListener, ChannelCall } from './grpc-types.js';
import { codeOf, exceededBy, FAILURE_STATUS } from './status.js';

/**
 * @internal Also the listener it starts grpc-js's call with (no closures per call): it passes everything on to the
 * caller's, ending the outgoing call first when the status arrives.
 */
export class DeadlineCall implements ChannelCall {
  readonly #inner: ChannelCall;
  readonly #call: OutgoingCall;
  #listener: CallListener | undefined;

  constructor(inner: ChannelCall, call: OutgoingCall) {
    this.#inner = inner;
    this.#call = call;
  }

  start(metadata: Metadata, listener: CallListener): void {
    const call = this.#call;
    // The trace only (the budget goes as grpc-timeout, which grpc-js writes from the deadline this call was given).
    for (const name in call.headers) metadata.set(name, call.headers[name] as string);
    this.#listener = listener;
    this.#inner.start(metadata, this);
    // Armed after the start: a stop that is already due cancels a call grpc-js knows about.
    call.onStop((reason) => this.#inner.cancelWithStatus(codeOf(reason), reason.message));
  }

  onReceiveMetadata(metadata: Metadata): void {
    this.#listener?.onReceiveMetadata(metadata);
  }
  onReceiveMessage(message: unknown): void {
    this.#listener?.onReceiveMessage(message);
  }
  onReceiveStatus(status: StatusObject): void {
    this.#end(status);
    this.#listener?.onReceiveStatus(status);
  }

  /** Ends the outgoing call with what the status means, and puts that on the status as its `cause`. */
  #end(status: StatusObject & { cause?: unknown }): void {
    const call = this.#call;
    if (status.code === Status.OK) {
      call.end();
      return;
    }
    if (call.stopReason === undefined && status.code === Status.DEADLINE_EXCEEDED) {
      const hop = exceededBy(status.metadata);
      // Without a trailer it is grpc-js's own timer: the deadline this hop gave the call (its budget, or less).
      if (hop === undefined) call._stopTimedOut();
      else call.stop(call.downstreamExceeded(hop));
    }
    const reason = call.stopReason;
    if (reason !== undefined) {
      // grpc-js builds the ServiceError from the status's own fields (Object.assign): the cause reaches the caller,
      // so `findDeadlineError(err)` — and a fastify or express edge's 504 — knows whose deadline fired.
      status.cause ??= reason;
      call.end(reason);
      return;
    }
    const failure = FAILURE_STATUS.get(status.code);
    call.end(failure === undefined ? undefined : statusError(status, failure), failure);
  }

  cancelWithStatus(status: Status, details: string): void {
    this.#inner.cancelWithStatus(status, details);
  }
  getPeer(): string {
    return this.#inner.getPeer();
  }
  sendMessageWithContext(context: Parameters<ChannelCall['sendMessageWithContext']>[0], message: Buffer): void {
    this.#inner.sendMessageWithContext(context, message);
  }
  startRead(): void {
    this.#inner.startRead();
  }
  halfClose(): void {
    this.#inner.halfClose();
  }
  getCallNumber(): number {
    return this.#inner.getCallNumber();
  }
  setCredentials(credentials: Parameters<ChannelCall['setCredentials']>[0]): void {
    this.#inner.setCredentials(credentials);
  }
  getAuthContext(): ReturnType<ChannelCall['getAuthContext']> {
    return this.#inner.getAuthContext();
  }
}

/** A failed status as an error, for the call's log line and its circuit breaker (which read `statusCode`). */
function statusError(status: StatusObject, statusCode: number): Error {
  const message = `${status.code} ${Status[status.code]}: ${status.details}`;
  return Object.assign(new Error(message), { grpcCode: status.code, statusCode });
}
