/**
 * An `OutgoingCall` takes one stop listener; a call here has several parties to tell (the pool checkout, the
 * statement running now, a transaction's caller), one after another or at once. The relay holds the one
 * listener and passes the stop on.
 */
import type { CallStopListener, OutgoingCall } from '@deadline/core/internal';

type StopReason = Parameters<CallStopListener>[0];

const noop = () => {};

/** @internal */
export class StopRelay {
  readonly call: OutgoingCall;
  readonly #listeners = new Set<CallStopListener>();
  #stopped: Promise<StopReason> | undefined;

  constructor(call: OutgoingCall) {
    this.call = call;
    call.onStop((reason) => {
      for (const listener of [...this.#listeners]) listener(reason);
      this.#listeners.clear();
    });
  }

  /** Why the call was stopped, once it was. */
  get reason(): StopReason | undefined {
    return this.call.stopReason;
  }

  /** Calls `listener` once when the call stops (at once if it has). Returns a function that unsubscribes. */
  on(listener: CallStopListener): () => void {
    const reason = this.reason;
    if (reason !== undefined) {
      listener(reason);
      return noop;
    }
    this.#listeners.add(listener);
    return () => this.#listeners.delete(listener);
  }

  /** Resolves with the reason when the call stops; never, if it ends first. For `Promise.race`. */
  get stopped(): Promise<StopReason> {
    this.#stopped ??= new Promise((resolve) => this.on(resolve));
    return this.#stopped;
  }
}
