/**
 * One outgoing call, from "may it be made?" to its end, for every transport adapter (HTTP, Postgres, MySQL,
 * Redis): the timeout and headers of `prepareCall`, one stop notification when the call must be cut off (its
 * own timeout, the request's deadline, or the request cancelled), and the `deadline:call:*` events.
 *
 * Why in the core: the adapters differ only in how they abort; the timer, the listener on the request's
 * context and the typed errors are the same everywhere, and must be disposed of the same way.
 */
import type { CallGuard, CallPermit } from './call-guard.js';
import { monotonicNow } from './clock.js';
import {
  type CallEndMessage,
  hasCallCancelSubscribers,
  hasCallOutlivedSubscribers,
  hasCallSubscribers,
  publishCallCancel,
  publishCallEnd,
  publishCallOutlived,
  publishCallStart,
  publishExceeded,
} from './diagnostics.js';
import { CancelledError, DeadlineExceededError } from './errors.js';
import { stopWaiting, waitForExpiry } from './expiry-queue.js';
import type { OtelSpan } from './opentelemetry/api.js';
import { annotateCallConfirmed, annotateCallStart, annotateCallStop } from './opentelemetry/call-annotations.js';
import { type PrepareCallOptions, prepareCallIn } from './prepare-call.js';
import { releasedScope, type Scope, type StopReason } from './scope.js';
import { storage } from './storage.js';
import { timeoutIn } from './timeout-for.js';
import { formatBudgetHeaders } from './wire/format-budget.js';

/** What the adapter learns when a call must stop: the error to abort it with. @internal */
export type CallStopListener = (error: DeadlineExceededError | CancelledError) => void;

/**
 * Options of {@link OutgoingCall.start}: those of `prepareCall`, plus the budget to use outside a deadline
 * context. @internal
 */
export interface OutgoingCallOptions extends PrepareCallOptions {
  /** Budget for a call made outside any deadline (or under a context without one); unbounded if unset. */
  defaultMs?: number | undefined;
  /**
   * Whether the call carries budget and trace headers to the next hop (HTTP). A database call sends none:
   * false skips them, and the `deadline:propagate` event that would announce them. `'trace'`: an RPC transport
   * writes the budget itself, from the call's timeout, in its own header (`grpc-timeout`, `Connect-Timeout-Ms`), so
   * only the trace headers are added; the event still announces the budget. Default true.
   */
  propagates?: boolean | 'trace' | undefined;
}

const noop = () => {};
const stopTimedOut = (call: OutgoingCall): void => call._stopTimedOut();
const NO_HEADERS: Record<string, string> = Object.freeze({}) as Record<string, string>;

/** @internal */
export class OutgoingCall {
  readonly target: string;
  /** Whole ms this call may take (`undefined`: unbounded). */
  readonly timeoutMs: number | undefined;
  /** Headers to send, replacing any of the same name (budget and trace). */
  readonly headers: Record<string, string>;
  /** Time left on the request when the call started (`Infinity` without a deadline). */
  readonly remainingMs: number;
  readonly startedAt: number;
  readonly #scope: Scope | undefined;
  #listeners: CallStopListener[] | undefined;
  /** @internal Its place in the expiry queue while its own timeout is armed; -1 otherwise. */
  _waiting = -1;
  /** @internal When its own timeout passes (startedAt + timeoutMs), while armed. */
  _dueAt = 0;
  #unsubscribe: () => void = noop;
  #stopped: DeadlineExceededError | CancelledError | undefined;
  /** When it was stopped, on the monotonic clock: a call cut before its owner let go of its context did not outlive it. */
  #stoppedAt = -1;
  #ended = false;
  /** The circuit breaker's admission, reported to when the call ends. */
  #permit: CallPermit | undefined;
  /** The call's OpenTelemetry span, handed over by `DeadlineSpanProcessor` (opentelemetry/call-span.ts). */
  #span: OtelSpan | undefined;
  #confirmed = false;

  private constructor(
    target: string,
    scope: Scope | undefined,
    options: OutgoingCallOptions | undefined,
    permit: CallPermit | undefined,
  ) {
    this.target = target;
    this.#scope = scope;
    this.#permit = permit;
    this.startedAt = monotonicNow();
    const defaultMs = options?.defaultMs;
    if (defaultMs !== undefined && (scope === undefined || scope.deadline.isNone)) {
      // No deadline to follow: the configured default is this call's budget, as if a request had brought it.
      const timeoutMs = Math.floor(Math.min(defaultMs, options?.maxMs ?? defaultMs));
      this.timeoutMs = timeoutMs;
      this.remainingMs = Number.POSITIVE_INFINITY;
      const traceOnly = options?.propagates === 'trace';
      this.headers = {
        ...prepareCallIn(scope, target, options, !traceOnly).headers,
        ...(traceOnly ? {} : formatBudgetHeaders(Math.max(1, timeoutMs), options?.dialects)),
      };
    } else if (options?.propagates === false) {
      this.timeoutMs = timeoutIn(scope, target, options);
      this.headers = NO_HEADERS;
      this.remainingMs = scope === undefined ? Number.POSITIVE_INFINITY : scope.deadline.remainingMs();
    } else {
      const prepared = prepareCallIn(scope, target, options, options?.propagates !== 'trace');
      this.timeoutMs = prepared.timeoutMs;
      this.headers = prepared.headers;
      this.remainingMs = scope === undefined ? Number.POSITIVE_INFINITY : scope.deadline.remainingMs();
    }
    // Messages are built only for a subscriber (a logger, an APM): calls are a hot path.
    if (!hasCallSubscribers()) return;
    publishCallStart({ context: scope, target, remainingMs: this.remainingMs, timeoutMs: this.timeoutMs });
  }

  /**
   * Starts a call to `target` in the current context. Throws `DeadlineExceededError` (`before-call`) or
   * `CancelledError` when it must not be made — before anything is sent.
   */
  static start(
    target: string,
    options?: OutgoingCallOptions,
    guard?: CallGuard,
    // The caller's read of the current context, when it made one (see `timeoutIn`); left out (or `undefined`, a
    // caller outside any context) it is read here.
    scope: Scope | undefined = storage.getStore(),
  ): OutgoingCall {
    if (guard === undefined) return new OutgoingCall(target, scope, options, undefined);
    // The breaker first: an open circuit refuses the call (throws) before anything else is done.
    const permit = guard.admit();
    // A probe's cap, never below the call's own minimum (a cap under it would be refused as an invalid option).
    const capped =
      permit.maxMs === undefined
        ? options
        : {
            ...options,
            maxMs: Math.max(Math.min(options?.maxMs ?? permit.maxMs, permit.maxMs), options?.minMs ?? 1),
          };
    try {
      return new OutgoingCall(target, scope, capped, permit);
    } catch (error) {
      // Not made for lack of time: reported, so a probe slot is not held forever (the breaker calls it neutral).
      permit.done({ error, statusCode: undefined, durationMs: 0, givenMs: 0 });
      throw error;
    }
  }

  /** The hop (service) the call is made from, when its context names one. */
  get hop(): string | undefined {
    return this.#scope?.hop;
  }

  /** Why the call was stopped, once it was. */
  get stopReason(): DeadlineExceededError | CancelledError | undefined {
    return this.#stopped;
  }

  /**
   * Arms the stop: `listener` is called once, with the typed error, when the call's timeout passes or the
   * request's context stops first (at once if the call has already stopped). `end()` disarms it. A call
   * that changes hands (a pool checkout, then the statement) may add a listener at each step, and take it
   * off again with the function returned.
   */
  onStop(listener: CallStopListener): () => void {
    if (this.#ended) return noop;
    if (this.#stopped !== undefined) {
      listener(this.#stopped);
      return noop;
    }
    const off = () => {
      const at = this.#listeners?.indexOf(listener) ?? -1;
      if (at !== -1) this.#listeners?.splice(at, 1);
    };
    if (this.#listeners !== undefined) {
      this.#listeners.push(listener);
      return off;
    }
    this.#listeners = [listener];
    const scope = this.#scope;
    const timeoutMs = this.timeoutMs;
    // Our own timer only when the call must stop before the context does (a margin, a maxMs, no deadline);
    // otherwise the context's one timer, shared by every call of the request, is enough.
    const ownTimer = timeoutMs !== undefined && !(timeoutMs >= Math.floor(this.remainingMs));
    if (scope?._stoppable === true) {
      this.#unsubscribe = scope._subscribe((reason) => this.#stop(this.#fromContext(reason)), !ownTimer);
    }
    if (ownTimer && !this.#ended && this.#stopped === undefined) {
      this._dueAt = this.startedAt + timeoutMs;
      waitForExpiry(this);
    }
    return off;
  }

  /**
   * @internal Its own timeout passed (the expiry queue's one timer): stopped inside its request's context, where
   * its listeners (an abort, a CancelRequest, a KILL) belong.
   */
  _due(): void {
    if (this.#ended || this.#stopped !== undefined) return;
    const scope = this.#scope;
    if (scope === undefined) this.#stop(this.#timedOut());
    else storage.run(scope, stopTimedOut, this);
  }

  /** @internal */
  _stopTimedOut(): void {
    this.#stop(this.#timedOut());
  }

  /**
   * Waits for `start()`'s work, but no longer than the call may: rejects with the stop reason if the call
   * stops first (and does not start the work at all if it already has). A value that arrives after the stop
   * goes to `discard` — a pooled connection handed back, say — so nothing acquired for a dead call leaks.
   */
  race<T>(start: () => Promise<T>, discard?: (late: T) => void): Promise<T> {
    if (this.#stopped !== undefined) return Promise.reject(this.#stopped);
    return new Promise<T>((resolve, reject) => {
      let waiting = true;
      const off = this.onStop((reason) => {
        waiting = false;
        reject(reason);
      });
      let work: Promise<T>;
      try {
        work = start();
      } catch (error) {
        off();
        reject(error);
        return;
      }
      work.then(
        (value) => {
          off();
          if (waiting) resolve(value);
          else discard?.(value);
        },
        (error: unknown) => {
          off();
          if (waiting) reject(error);
        },
      );
    });
  }

  /** Stops the call now with `error` (an adapter saw it end for a deadline reason of its own). */
  stop(error: DeadlineExceededError | CancelledError): void {
    this.#stop(error);
  }

  /**
   * The server confirmed that the work of a call cut off has stopped (PostgreSQL's 57014, a KILL QUERY's OK or
   * the killed statement's 1317, the statement's own server limit firing, a CLIENT UNBLOCK's 1): recorded on the
   * call's span and published on `deadline:call:cancel`, once. `by` names the confirmation.
   */
  confirmStop(by: string): void {
    if (this.#confirmed || this.#stopped === undefined) return;
    this.#confirmed = true;
    if (this.#span !== undefined) annotateCallConfirmed(this.#span, by, this.elapsedMs());
    if (hasCallCancelSubscribers()) this.#publishCancel('confirmed', this.#stopped, by);
  }

  /**
   * @internal A span started inside the driver call (`runWithCall`), given by `DeadlineSpanProcessor`: it gets
   * the time left and the timeout left as it starts. A call that sends several statements (the pg adapter's
   * `SET statement_timeout`, then the statement; a transaction's) has one per statement: the one on the wire
   * when the call stops gets the stop and its confirmation. Spans of the clean-up after the stop take nothing.
   */
  _adoptSpan(span: OtelSpan): void {
    if (this.#ended || this.#stopped !== undefined) return;
    this.#span = span;
    const elapsed = this.elapsedMs();
    const timeoutLeft = this.timeoutMs === undefined ? undefined : Math.max(0, Math.floor(this.timeoutMs - elapsed));
    annotateCallStart(span, this.remainingMs - elapsed, timeoutLeft);
  }

  /**
   * Ends the call: disarms the timer and the listener, publishes `deadline:call:end`. Idempotent.
   * The outcome is what stopped the call; else, with an error, `error` (or the deadline error it is); else
   * `error` for a 5xx status and `ok` otherwise.
   */
  end(error?: unknown, statusCode?: number): void {
    if (this.#ended) return;
    this.#ended = true;
    this.#disarm();
    const stopped = this.#stopped;
    const cause = stopped ?? error;
    if (this.#permit !== undefined) {
      this.#permit.done({
        error: cause,
        statusCode,
        durationMs: monotonicNow() - this.startedAt,
        givenMs: this.timeoutMs ?? Number.POSITIVE_INFINITY,
      });
    }
    // A call left running by an owner that is done with its context (an unawaited query): told apart, so it
    // can be logged against its request.
    const scope = this.#scope;
    const released = scope === undefined ? undefined : this.#releasedWhileRunning(scope);
    const reportOutlived =
      released !== undefined && (released._outlivedReporter !== undefined || hasCallOutlivedSubscribers());
    if (!hasCallSubscribers() && !reportOutlived) return;
    // As in a hop's own request line: an answer with a 5xx status is an error, even without an exception.
    const outcome: CallEndMessage['outcome'] =
      cause === undefined
        ? statusCode !== undefined && statusCode >= 500
          ? 'error'
          : 'ok'
        : cause instanceof DeadlineExceededError
          ? 'deadline_exceeded'
          : cause instanceof CancelledError
            ? 'cancelled'
            : 'error';
    const endedAt = monotonicNow();
    const message: CallEndMessage = {
      context: this.#scope,
      target: this.target,
      remainingMs: this.remainingMs,
      timeoutMs: this.timeoutMs,
      elapsedMs: endedAt - this.startedAt,
      outcome,
      statusCode,
      error: cause,
    };
    publishCallEnd(message);
    if (reportOutlived) {
      const outlived = { ...message, context: this.#scope as Scope, outlivedMs: endedAt - released._releasedAt };
      publishCallOutlived(outlived);
      released._outlivedReporter?.callOutlived(outlived);
    }
  }

  /**
   * The error for a downstream that answered 504 with `X-Deadline-Exceeded-By: <hop>`: its own deadline (the
   * budget this call gave it, or tighter) fired there. `whose` is `downstream:<hop>`, so this hop's 504 names it.
   */
  downstreamExceeded(hop: string): DeadlineExceededError {
    return new DeadlineExceededError({
      budgetMs: this.timeoutMs,
      elapsedMs: this.elapsedMs(),
      phase: 'during-call',
      target: this.target,
      whose: `downstream:${hop}`,
    });
  }

  /** Milliseconds since the call started. */
  elapsedMs(): number {
    return monotonicNow() - this.startedAt;
  }

  #stop(error: DeadlineExceededError | CancelledError): void {
    if (this.#ended || this.#stopped !== undefined) return;
    this.#stopped = error;
    this.#stoppedAt = monotonicNow();
    this.#disarm();
    if (error instanceof DeadlineExceededError) publishExceeded(this.#scope, error);
    // Before the listeners send the stop (abort, CancelRequest, KILL, UNBLOCK): it is requested now.
    if (this.#span !== undefined) annotateCallStop(this.#span, error, this.elapsedMs());
    if (hasCallCancelSubscribers()) this.#publishCancel('requested', error, undefined);
    const listeners = this.#listeners;
    this.#listeners = undefined;
    if (listeners !== undefined) for (const listener of listeners) listener(error);
  }

  /**
   * The released context (its own or an ancestor) the call ran on past its owner letting go of it, if any. A call cut
   * before that was not left running — its stop was on its way (the server confirming a cancel), as when a GraphQL
   * field's own budget passed just before the answer went out.
   */
  #releasedWhileRunning(scope: Scope): Scope | undefined {
    const released = releasedScope(scope);
    if (released === undefined) return undefined;
    return this.#stopped !== undefined && this.#stoppedAt <= released._releasedAt ? undefined : released;
  }

  #publishCancel(
    state: 'requested' | 'confirmed',
    reason: DeadlineExceededError | CancelledError,
    confirmedBy: string | undefined,
  ): void {
    publishCallCancel({
      context: this.#scope,
      target: this.target,
      state,
      reason,
      confirmedBy,
      elapsedMs: this.elapsedMs(),
    });
  }

  #disarm(): void {
    if (this._waiting >= 0) stopWaiting(this);
    this.#unsubscribe();
    this.#unsubscribe = noop;
  }

  #timedOut(): DeadlineExceededError {
    return new DeadlineExceededError({
      budgetMs: this.timeoutMs,
      elapsedMs: this.elapsedMs(),
      phase: 'during-call',
      target: this.target,
      hop: this.#scope?.hop,
      message: `call to ${this.target} cut off after ${Math.round(this.elapsedMs())} ms (its timeout: ${this.timeoutMs} ms)`,
    });
  }

  /**
   * The call's error for its context's stop: its message says why, and the context's reason is not made its cause.
   * Loggers print a cause's message after the error's own (pino's `err` serializer joins the chain with ': '), so it
   * would say the same twice; and the cause is kept for what a driver adds — the server's confirmation of the stop.
   */
  #fromContext(reason: StopReason): DeadlineExceededError | CancelledError {
    if (reason instanceof CancelledError) {
      return new CancelledError(`call to ${this.target} stopped: ${reason.message}`, { reason: reason.reason });
    }
    return new DeadlineExceededError({
      budgetMs: reason.budgetMs,
      elapsedMs: reason.elapsedMs,
      phase: 'during-call',
      target: this.target,
      whose: reason.whose,
      hop: reason.hop,
    });
  }
}
