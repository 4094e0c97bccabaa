/**
 * What a dispatch handler under a deadline does whichever of undici's handler APIs it speaks: it ends the call
 * when the exchange ends, stops the exchange when the call must stop (aborted once started, else the caller
 * failed at once), holds back a downstream's 504 that names the hop whose deadline fired and reports that
 * deadline error instead, and gives the caller's handler one last event, never two.
 */
import type { DeadlineExceededError } from '@deadline/core';
import type { OutgoingCall } from '@deadline/core/internal';
import { parseExceededBy } from '@deadline/core/wire';

/** @internal */
export abstract class CallExchange {
  protected readonly call: OutgoingCall;
  readonly #downstreamErrors: boolean;
  /** The caller's handler has had its last event (end or error): forward nothing more. */
  protected done = false;
  #statusCode: number | undefined;
  /** A downstream 504 naming the hop whose deadline fired: reported once its (small) body has been read. */
  protected downstream: DeadlineExceededError | undefined;

  constructor(call: OutgoingCall, downstreamErrors: boolean) {
    this.call = call;
    this.#downstreamErrors = downstreamErrors;
    call.onStop((error) => {
      // Still queued for a connection: fail the caller now; the request is aborted when undici gets to it.
      if (!this.abortExchange(error)) this.fail(error);
    });
  }

  /** Aborts the exchange through undici; false when undici has not started it yet. */
  protected abstract abortExchange(error: Error): boolean;

  /** Gives the caller's handler its error. */
  protected abstract failCaller(error: Error): void;

  /** The exchange started: false when it must be aborted at once (stopped while queued, already reported). */
  protected started(abort: (error: Error) => void): boolean {
    if (!this.done) return true;
    abort(this.call.stopReason ?? new Error('aborted'));
    return false;
  }

  /** The response's status came: true when it is a downstream's deadline, held back from the caller. */
  protected holdsBack(statusCode: number, exceededBy: string | readonly string[] | undefined): boolean {
    this.#statusCode = statusCode;
    if (statusCode !== 504 || !this.#downstreamErrors) return false;
    const hop = parseExceededBy(exceededBy);
    if (hop === undefined) return false;
    this.downstream = this.call.downstreamExceeded(hop);
    return true;
  }

  /** The response ended: the call ends, then the caller's handler hears of it through `forward`. */
  protected ended(forward: () => void): void {
    if (this.done) return;
    const downstream = this.downstream;
    if (downstream !== undefined) {
      this.fail(downstream);
      return;
    }
    this.done = true;
    this.call.end(undefined, this.#statusCode);
    try {
      forward();
    } catch (error) {
      // A handler that throws here (undici's retry handler does, to retry) is owed the error undici sends next.
      this.done = false;
      throw error;
    }
  }

  /** undici reports an error: ours, typed, when we aborted it, whatever undici wrapped it in. */
  protected failed(error: Error): void {
    if (!this.done) this.fail(this.call.stopReason ?? error);
  }

  protected fail(error: Error): void {
    if (this.done) return;
    this.done = true;
    this.call.end(error, this.#statusCode);
    this.failCaller(error);
  }
}
