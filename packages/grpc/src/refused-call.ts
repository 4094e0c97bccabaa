/**
 * The call a {@link DeadlineChannel} hands grpc-js when a call must not be made (no time left, the request
 * cancelled, the circuit open): nothing is created on the channel, nothing is sent, and the call ends on the next
 * tick with the refusal's status, as grpc-js ends a call whose deadline has already passed.
 */
import type { Metadata } from '@grpc/grpc-js';
import type { CallListener, ChannelCall } from './grpc-types.js';
import { refusedStatus } from './status.js';

let refusedCalls = 0;

/** @internal */
export class RefusedCall implements ChannelCall {
  readonly #reason: unknown;
  readonly #number = ++refusedCalls;

  constructor(reason: unknown) {
    this.#reason = reason;
  }

  start(_metadata: Metadata, listener: CallListener): void {
    process.nextTick(() => listener.onReceiveStatus(refusedStatus(this.#reason)));
  }
  cancelWithStatus(): void {}
  getPeer(): string {
    return 'unknown';
  }
  sendMessageWithContext(context: Parameters<ChannelCall['sendMessageWithContext']>[0]): void {
    // A stream's write waits for this: it is done (dropped), as on a call that has ended.
    if (context.callback !== undefined) process.nextTick(context.callback);
  }
  startRead(): void {}
  halfClose(): void {}
  getCallNumber(): number {
    return -this.#number;
  }
  setCredentials(): void {}
  getAuthContext(): null {
    return null;
  }
}
