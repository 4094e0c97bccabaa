/**
 * One node in the tree of contexts: a deadline, request metadata, and — only once somebody asks — a place in
 * the expiry queue (one timer for every scope, expiry-queue.ts), an AbortSignal and the links that carry a
 * parent's cancellation down to it.
 *
 * Why so lazy: on Node 20 an AbortSignal costs microseconds to create and again to abort, as does an
 * `addEventListener`, while `als.run` costs tens of nanoseconds (bench/primitives.mjs measures them). A request
 * that never asks for a signal must not pay for one, so expiry is computed from the clock when asked, and the
 * wait for the deadline, the controller and the parent link appear only when a listener (a signal, an
 * adapter's `onStop`, a child's link) needs to be told.
 *
 * Fields without `#` are deliberate: a second copy of this package in the same process calls them (see
 * storage.ts). They form the protocol named by the storage key's version.
 */

import { monotonicNow } from './clock.js';
import type { ContextValues } from './context-key.js';
import type { Deadline } from './deadline.js';
import type { CallOutlivedMessage } from './diagnostics.js';
import { publishCancelled, publishEnd, publishExceeded, publishStart } from './diagnostics.js';
import { CancelledError, DeadlineExceededError, withoutStack } from './errors.js';
import { stopWaiting, waitForExpiry } from './expiry-queue.js';
import { storage } from './storage.js';
import { NEW_TRACE, type TraceContext, traceFrom } from './trace.js';

/**
 * Why a context stopped: its deadline passed, or it was cancelled (explicitly, by its parent, or by ending).
 *
 * @example
 * ```ts
 * const reason: StopReason | undefined = currentContext()?.stopReason;
 * if (reason instanceof DeadlineExceededError) reply.code(504);
 * ```
 */
export type StopReason = DeadlineExceededError | CancelledError;

/**
 * Called once when a context stops, with the reason.
 *
 * @example
 * ```ts
 * const off = ctx.onStop((reason) => socket.destroy(reason));
 * // … later, when the socket is done:
 * off();
 * ```
 */
export type StopListener = (reason: StopReason) => void;

/**
 * The current request's context, as code running inside it sees it. Obtain it with `currentContext()`.
 *
 * @example
 * ```ts
 * import { currentContext } from '@deadline/core';
 * const ctx = currentContext();
 * log.info({ traceId: ctx?.trace?.traceId, hop: ctx?.hop, remainingMs: ctx?.remainingMs() });
 * ```
 */
export interface DeadlineContext {
  /** The effective deadline: the earliest of this context's own and every ancestor's. */
  readonly deadline: Deadline;
  /** W3C trace context of the request, if one was set or received. */
  readonly trace: TraceContext | undefined;
  /** Name of this hop (the service), for logs and `X-Deadline-Exceeded-By`. */
  readonly hop: string | undefined;
  /** Small string map carried along with the request (and into detached work). */
  readonly baggage: Readonly<Record<string, string>>;
  /** Extra fields that loggers add to every line written inside the context. */
  readonly bindings: Readonly<Record<string, unknown>>;
  /** True inside `withoutCancel()` (and contexts derived there): metadata kept, the request's deadline dropped. */
  readonly detached: boolean;
  /**
   * Aborts with a typed reason ({@link DeadlineExceededError} or {@link CancelledError}) when the deadline
   * passes, the context is cancelled, or it ends. Created on first access. `undefined` when nothing can ever
   * abort it (a detached context without its own budget).
   */
  readonly signal: AbortSignal | undefined;
  /** Why the context stopped, or `undefined` while it is live. Checks the clock: never stale. */
  readonly stopReason: StopReason | undefined;
  /** Milliseconds left on {@link DeadlineContext.deadline}; `Infinity` without one. */
  remainingMs(): number;
  /**
   * Calls `listener` once when the context stops (at once if it already has). Returns a function that
   * unsubscribes; unsubscribe when you no longer care, so a long-lived context keeps no dead listeners.
   */
  onStop(listener: StopListener): () => void;
}

/**
 * The one owner a scope tells first when it stops, without a closure or a listener array: a server adapter's
 * request state (one per request, so the per-request allocations of `onStop` are worth sparing). @internal
 */
export interface StopOwner {
  _ownerStopped(reason: StopReason): void;
}

/**
 * A context as its owner sees it: the code that created it runs work inside it, may cancel it, and ends it
 * when the work is done (which aborts whatever was started inside and is still running).
 *
 * @example
 * ```ts
 * import { createContext } from '@deadline/core';
 * const ctx = createContext({ deadline: 800, hop: 'orders', root: true });
 * res.on('close', () => ctx.end());
 * ctx.run(() => handle(req, res));
 * ```
 */
export interface OwnedContext extends DeadlineContext {
  /** Runs `fn` inside this context (AsyncLocalStorage `run`, never `enterWith`). */
  run<A extends unknown[], R>(fn: (...args: A) => R, ...args: A): R;
  /** Cancels the context and, through it, every context derived from it. Idempotent. */
  cancel(reason?: string | Error): void;
  /**
   * Ends the context: the owner is done. By default (Go's rule) it clears its timer, unlinks it, and cancels
   * work still running inside it. With `{ cancel: false }`, work still running (or started later by code the
   * owner did not await) keeps going under the context's deadline, and each outgoing call that ends after this
   * is reported on `deadline:call:outlived`. Idempotent.
   */
  end(options?: EndOptions): void;
}

/**
 * How {@link OwnedContext.end} treats work still running.
 *
 * @example
 * ```ts
 * res.once('close', () => ctx.end({ cancel: !res.writableFinished }));
 * ```
 */
export interface EndOptions {
  /**
   * Whether work still running in the context is cancelled now. Default `true`. With `false` it runs on, still
   * bounded by the context's deadline and still cancelled if the context (or an ancestor) is cancelled later.
   */
  cancel?: boolean | undefined;
}

/**
 * Told of each outgoing call that ended after its context's owner was done with it (`end({ cancel: false })`).
 * A server adapter passes one to log the call against its request. @internal
 */
export interface OutlivedReporter {
  callOutlived(message: CallOutlivedMessage): void;
}

const ACTIVE = 0;
const STOPPED = 1;

const endedReason = (): CancelledError =>
  withoutStack(
    () => new CancelledError('the context ended while this work was still running', { reason: 'context-ended' }),
  );

const NO_BAGGAGE: Readonly<Record<string, string>> = Object.freeze({});
const NO_BINDINGS: Readonly<Record<string, unknown>> = Object.freeze({});

/** Metadata a scope is created with (already merged with its parent's). */
export interface ScopeMetadata {
  trace: TraceContext | undefined;
  hop: string | undefined;
  baggage: Readonly<Record<string, string>> | undefined;
  bindings: Readonly<Record<string, unknown>> | undefined;
  values?: ContextValues | undefined;
}

/** A due scope expires inside its own context: its listeners (a server's 504 among them) see their request. */
function expireInside(scope: Scope): void {
  // Node's timers may fire a fraction of a millisecond early: a deadline still ahead waits again.
  if (scope.deadline.isExpired()) scope._expire();
  else waitForExpiry(scope);
}

function toStopReason(reason: unknown): StopReason {
  if (reason instanceof DeadlineExceededError || reason instanceof CancelledError) return reason;
  if (typeof reason === 'string') return new CancelledError(reason);
  // The signal's own error is the cause, whose message loggers print after this one.
  if (reason instanceof Error) return new CancelledError('cancelled by its signal', { cause: reason });
  return new CancelledError('cancelled', reason === undefined ? undefined : { cause: reason });
}

function callOwner(owner: StopOwner, reason: StopReason): void {
  callGuarded((stop) => owner._ownerStopped(stop), reason);
}

function callGuarded(listener: StopListener, reason: StopReason): void {
  try {
    listener(reason);
  } catch (error) {
    // A listener belongs to an adapter or a user; its bug must not stop the other listeners from running
    // nor surface as an exception in whatever code happened to notice the expiry.
    process.emitWarning(`a stop listener threw: ${error instanceof Error ? error.message : String(error)}`, {
      type: 'DeadlineWarning',
      code: 'DEADLINE_LISTENER_THREW',
      detail: error instanceof Error ? error.stack : undefined,
    });
  }
}

/** @internal The implementation of {@link OwnedContext}. Create one through `createContext()`. */
export class Scope implements OwnedContext {
  readonly deadline: Deadline;
  readonly hop: string | undefined;
  readonly baggage: Readonly<Record<string, string>>;
  readonly bindings: Readonly<Record<string, unknown>>;
  readonly detached: boolean;
  /** @internal What keys of other packages carry (context-key.ts); read through `key.get()`. */
  readonly _values: ContextValues | undefined;
  /** The context whose cancellation this one inherits (undefined for roots and detached scopes). */
  readonly parent: Scope | undefined;

  // Internal state (see the header comment for why these are not `#private`).
  /** @internal ACTIVE or STOPPED. */
  _state: number = ACTIVE;
  /** @internal Why it stopped; after a quiet `end()` it is made on demand. */
  _reason: StopReason | undefined;
  /** @internal Its place in the expiry queue (expiry-queue.ts) while something listens; -1 otherwise. */
  _waiting = -1;
  /** @internal Behind `signal`, created on first access. */
  _controller: AbortController | undefined;
  /** @internal `onStop` listeners and children's links. */
  _listeners: StopListener[] | undefined;
  /** @internal Told before the listeners (see {@link StopOwner}); set by `_own()`. */
  _owner: StopOwner | undefined;
  /** @internal Removes this scope's link from its parent's listeners. */
  _unlinkParent: (() => void) | undefined;
  /** @internal The outside signal being followed (`ContextInit.signal`). */
  _external: AbortSignal | undefined;
  /** @internal */
  _ended = false;
  /**
   * @internal When the owner ended the context without cancelling its work (`end({ cancel: false })`), on the
   * monotonic clock; -1 otherwise. Calls ending after it outlived the context.
   */
  _releasedAt = -1;
  /** @internal Who hears of calls that outlived the context, besides the diagnostics channel. */
  _outlivedReporter: OutlivedReporter | undefined;
  /** @internal False for the scope `withoutCancel()` makes: it has no owner, so nothing may cancel it. */
  readonly _cancellable: boolean;
  /** @internal The trace; {@link NEW_TRACE} until a root that starts a trace is first asked for it. */
  _trace: TraceContext | typeof NEW_TRACE | undefined;

  constructor(
    parent: Scope | undefined,
    deadline: Deadline,
    meta: ScopeMetadata,
    detached: boolean,
    cancellable: boolean,
  ) {
    this.parent = parent;
    this.deadline = deadline;
    this._trace = meta.trace;
    this.hop = meta.hop;
    this.baggage = meta.baggage ?? NO_BAGGAGE;
    this.bindings = meta.bindings ?? NO_BINDINGS;
    this.detached = detached;
    this._values = meta.values;
    this._cancellable = cancellable;
  }

  /**
   * @internal A request's root context, as `createContext({ root: true, deadline, trace, hop })` makes it, for
   * server adapters that checked their hop once at registration: the per-call option checks (the hop's pattern
   * among them) were a measurable part of starting a request.
   */
  static root(deadline: Deadline, trace: TraceContext | typeof NEW_TRACE | undefined, hop: string): Scope {
    const scope = new Scope(
      undefined,
      deadline,
      { trace: undefined, hop, baggage: undefined, bindings: undefined },
      false,
      true,
    );
    scope._trace = trace;
    publishStart(scope);
    return scope;
  }

  get trace(): TraceContext | undefined {
    const trace = this._trace;
    // A request that brought no trace starts one, but its ids are only made when something reads them (a log
    // line, an outgoing call, a child context): a server answering in time with logging off never does.
    return trace === NEW_TRACE ? (this._trace = traceFrom()) : trace;
  }

  /** @internal Whether anything could ever stop this scope; if not, it needs no signal and keeps no listeners. */
  get _stoppable(): boolean {
    return this._cancellable || !this.deadline.isNone;
  }

  remainingMs(): number {
    return this.deadline.remainingMs();
  }

  get stopReason(): StopReason | undefined {
    return this._check() > 0 ? undefined : this._reasonWhenStopped();
  }

  /**
   * @internal Whether it has stopped, as far as it already knows: no clock read. Asking `stopReason` may stop the
   * scope there and then (its deadline just passed), and with it run the stop listeners — a server adapter's 504
   * among them — inside the caller: code that is itself writing a response must not set that off.
   */
  get _knownStopped(): boolean {
    return this._state !== ACTIVE;
  }

  /**
   * @internal One clock read: the time left (> 0) while live; 0 once stopped, after stopping the scope if its
   * deadline has just passed or an ancestor was cancelled.
   */
  _check(): number {
    if (this._state !== ACTIVE) return 0;
    // Without a deadline, no clock reading is needed.
    return this._checkAt(this.deadline.isNone ? 0 : monotonicNow());
  }

  /** @internal {@link Scope._check} on a clock reading the caller already has. */
  _checkAt(now: number): number {
    if (this._state !== ACTIVE) return 0;
    const expiresAt = this.deadline.expiresAt;
    const remaining = expiresAt === Number.POSITIVE_INFINITY ? expiresAt : Math.max(expiresAt - now, 0);
    if (remaining <= 0) {
      this._expire();
      return 0;
    }
    const inherited = this.parent?._cancelledReason();
    if (inherited !== undefined) {
      this._stop(inherited);
      return 0;
    }
    return remaining;
  }

  get signal(): AbortSignal | undefined {
    if (this._controller !== undefined) return this._controller.signal;
    if (!this._stoppable) return undefined;
    const controller = new AbortController();
    this._controller = controller;
    const remaining = this._check();
    if (remaining === 0) controller.abort(this._reasonWhenStopped());
    else this._watch(true);
    return controller.signal;
  }

  onStop(listener: StopListener): () => void {
    return this._subscribe(listener, true);
  }

  run<A extends unknown[], R>(fn: (...args: A) => R, ...args: A): R {
    return storage.run(this, fn, ...args);
  }

  cancel(reason?: string | Error): void {
    if (this._state !== ACTIVE || !this._cancellable) return;
    const stop = toStopReason(reason);
    this._stop(stop);
  }

  end(options?: EndOptions): void {
    if (options?.cancel === false) this._release(undefined);
    else this._end();
  }

  /** @internal Ends the context, cancelling work still running in it (Go's rule). */
  _end(): void {
    if (this._ended) return;
    this._ended = true;
    // One clock read: an expiry nobody noticed (no timer was needed) is still reported as an expiry.
    const before = this.stopReason;
    if (before === undefined) {
      if (this._controller === undefined && this._listeners === undefined && this._owner === undefined) {
        // Nothing to tell: stop without building an error (the reason is made on demand).
        this._state = STOPPED;
        this._disarm();
        this._unfollow();
      } else {
        // A signal was handed out or work is subscribed: abort it, so nothing started here outlives the context.
        this._stop(endedReason());
      }
    }
    publishEnd(this, before);
  }

  /**
   * @internal Ends the context for its owner and leaves work still running alone: it stays live (its timer
   * armed while anything listens), so that work is still stopped at the deadline or by a cancellation, and
   * calls that end from now on are reported as having outlived it (to `reporter` too, when given).
   */
  _release(reporter: OutlivedReporter | undefined): void {
    if (this._ended) return;
    this._ended = true;
    // One clock reading: whether it is still live, and when it was released.
    const now = monotonicNow();
    const before = this._checkAt(now) > 0 ? undefined : this._reasonWhenStopped();
    if (before === undefined) {
      this._releasedAt = now;
      // The timer stays only while something needs it: a call still running (it re-arms for one made later),
      // or the signal, once handed out (whoever holds it — a fetch, an AbortSignal.any() — expects it to abort
      // at the deadline).
      this._outlivedReporter = reporter;
    }
    publishEnd(this, before);
  }

  /** @internal Adds a listener; `needsTimer` is false for a child's link (its own timer fires no later). */
  _subscribe(listener: StopListener, needsTimer: boolean): () => void {
    if (!this._stoppable) return noop;
    const remaining = this._check();
    if (remaining === 0) {
      callGuarded(listener, this._reasonWhenStopped());
      return noop;
    }
    (this._listeners ??= []).push(listener);
    this._watch(needsTimer);
    return () => this._unsubscribe(listener);
  }

  /**
   * @internal Makes `owner` the one told first when this scope stops (at once if it already has), until
   * `_disown()`: what `onStop` does for a listener, without its closures and its array.
   */
  _own(owner: StopOwner, now?: number): void {
    // `now`: a clock reading the caller just took (a request's arrival), spared a second one. A deadline that
    // passes between that reading and this is served by the expiry queue's timer instead, a moment later.
    if (now === undefined ? this._check() === 0 : this._state !== ACTIVE || this._checkAt(now) === 0) {
      callOwner(owner, this._reasonWhenStopped());
      return;
    }
    this._owner = owner;
    this._watch(true);
  }

  /**
   * @internal {@link Scope._own} for a root made just now, `now` being the reading its deadline was anchored at: it
   * has no parent and nothing stopped it yet (nothing had it to stop), so only a budget already spent takes the
   * general path. A request's start calls it: its few bytes leave V8 room to inline the rest of that start.
   */
  _ownNew(owner: StopOwner, now: number): void {
    const expiresAt = this.deadline.expiresAt;
    if (expiresAt <= now) {
      this._own(owner, now);
      return;
    }
    this._owner = owner;
    // Already waiting if a subscriber of the start channel asked for its signal.
    if (expiresAt !== Number.POSITIVE_INFINITY && this._waiting < 0) waitForExpiry(this);
  }

  /** @internal The owner no longer needs to be told; idle again if nothing else listens. */
  _disown(): void {
    if (this._owner === undefined) return;
    this._owner = undefined;
    if (this._listeners === undefined && this._controller === undefined) this._disarm();
  }

  /** @internal */
  _unsubscribe(listener: StopListener): void {
    const listeners = this._listeners;
    if (listeners === undefined) return;
    const at = listeners.indexOf(listener);
    if (at === -1) return;
    listeners.splice(at, 1);
    if (listeners.length === 0 && this._controller === undefined && this._owner === undefined) {
      // Idle again: a long-lived context (a background job) must not keep a timer or a parent link per call.
      this._listeners = undefined;
      this._disarm();
    }
  }

  /** @internal The reason an ancestor (or this scope) was cancelled or ended, ignoring the clock. */
  _cancelledReason(): StopReason | undefined {
    if (this._state !== ACTIVE) return this._reasonWhenStopped();
    return this.parent?._cancelledReason();
  }

  /** @internal Waits for the deadline (if asked and there is one) and links to the parent's cancellation. */
  _watch(needsTimer: boolean): void {
    if (needsTimer && this._waiting < 0 && !this.deadline.isNone) waitForExpiry(this);
    if (this._unlinkParent === undefined && this.parent !== undefined) {
      this._unlinkParent = this.parent._subscribe((reason) => this._stop(reason), false);
    }
  }

  /** @internal The instant the expiry queue serves this scope at. */
  get _dueAt(): number {
    return this.deadline.expiresAt;
  }

  /** @internal Called by the expiry queue once the deadline passed. */
  _due(): void {
    if (this._state === ACTIVE) storage.run(this, expireInside, this);
  }

  /** @internal Stops waiting for the deadline and drops the parent link; does not change state. */
  _disarm(): void {
    if (this._waiting >= 0) stopWaiting(this);
    if (this._unlinkParent !== undefined) {
      const unlink = this._unlinkParent;
      this._unlinkParent = undefined;
      unlink();
    }
  }

  /** @internal */
  _expire(): void {
    this._stop(this._expiredReason());
  }

  /** @internal */
  _expiredReason(): DeadlineExceededError {
    const { deadline } = this;
    return withoutStack(
      () =>
        new DeadlineExceededError({
          budgetMs: deadline.budgetMs,
          elapsedMs: deadline.elapsedMs(),
          phase: 'in-handler',
          hop: this.hop,
        }),
    );
  }

  /** @internal Stops the scope with `reason` and tells everyone listening. Idempotent. */
  _stop(reason: StopReason): void {
    if (this._state !== ACTIVE) return;
    this._state = STOPPED;
    this._reason = reason;
    this._disarm();
    this._unfollow();
    if (reason instanceof DeadlineExceededError) publishExceeded(this, reason);
    // Ending is not cancelling: a normal end is published once, as deadline:context:end.
    else if (reason.reason !== 'context-ended') publishCancelled(this, reason);
    this._controller?.abort(reason);
    const owner = this._owner;
    if (owner !== undefined) {
      this._owner = undefined;
      callOwner(owner, reason);
    }
    const listeners = this._listeners;
    this._listeners = undefined;
    if (listeners !== undefined) for (const listener of listeners) callGuarded(listener, reason);
  }

  /** @internal */
  _reasonWhenStopped(): StopReason {
    return (this._reason ??= endedReason());
  }

  /** @internal Follows an external AbortSignal (e.g. the host's request signal) without a closure. */
  _follow(signal: AbortSignal): void {
    if (signal.aborted) {
      this._stop(toStopReason(signal.reason));
      return;
    }
    this._external = signal;
    signal.addEventListener('abort', this, { once: true });
  }

  /** @internal */
  _unfollow(): void {
    if (this._external !== undefined) {
      this._external.removeEventListener('abort', this);
      this._external = undefined;
    }
  }

  /** @internal EventListener protocol, used by {@link Scope._follow}. */
  handleEvent(): void {
    const signal = this._external;
    this._external = undefined;
    if (signal !== undefined) this._stop(toStopReason(signal.reason));
  }
}

/**
 * @internal The nearest context, `scope` or an ancestor, whose owner released it; undefined if none. Reads
 * fields only, no method: a scope may come from another copy of this package, older than this one (a missing
 * `_releasedAt` reads as never released).
 */
export function releasedScope(scope: Scope): Scope | undefined {
  for (let at: Scope | undefined = scope; at !== undefined; at = at.parent) {
    if (at._releasedAt >= 0) return at;
  }
  return undefined;
}

function noop(): void {}
