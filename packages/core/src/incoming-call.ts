/**
 * One call a server received over an RPC protocol (gRPC, Connect), in the deadline context its handler runs in: the
 * budget is the smallest of the protocol's own timeout and the budget headers, clamped like an HTTP request's,
 * `defaultMs` when none came (or the caller is not trusted and asks for more); too little refuses the call before its
 * handler runs. The context ends — and the call's line is written — once, when the call's outcome is decided. The
 * adapters only read the protocol's call and answer it.
 *
 * The protocol library keeps its own copy of the caller's deadline, and acts on it by itself: grpc-js answers
 * `DEADLINE_EXCEEDED` when its timer fires, Connect aborts the handler's signal. Either is the caller's deadline, not
 * the caller leaving: the context stops as this hop's deadline ({@link IncomingCall.expire}), and a cancellation that
 * arrives as the caller's deadline runs out is read as that deadline too ({@link IncomingCall.callerLeft}).
 */
import type { AdmissionRefusal, AdmissionRoute } from './admission.js';
import { isExempt } from './admission-options.js';
import { MAX_TIMER_DELAY_MS, monotonicNow } from './clock.js';
import { createContext } from './context.js';
import { hasIncomingStartSubscribers, publishAdmissionRefused, publishIncomingStart } from './diagnostics.js';
import { CancelledError, DeadlineExceededError } from './errors.js';
import { findDeadlineError } from './guards.js';
import type { ResolvedIncomingOptions } from './incoming-options.js';
import type { OwnedContext, StopReason } from './scope.js';
import { traceFrom } from './trace.js';
import { REQUEST_DEADLINE_AT_HEADER } from './wire/header-names.js';
import type { HeaderSource } from './wire/headers.js';
import { readHeader } from './wire/headers.js';
import type { BudgetParser } from './wire/parse-budget.js';
import { PRIORITY_HEADER, parseUrgency } from './wire/priority.js';
import { waitedMs } from './wire/queue-time.js';

/**
 * How close to the caller's deadline its leaving counts as that deadline, in ms. The server anchors the caller's
 * relative timeout when it gets to the call, and a loaded server gets there late: the caller's own deadline then
 * passes that much before the server's copy of it, and the caller, whose timer fired, resets the call "early". Under
 * the core's test suite running beside it, a server here got to a Python client's call 80 ms after it was sent. And
 * grpc-js's own timer, armed on the event loop's cached clock, fires early by however long the loop iteration that read
 * the call's headers had run (40 ms at worst, measured with both cores kept busy). A caller that really gives up in
 * these last milliseconds is reported as out of time, which it nearly was.
 */
const AT_THE_DEADLINE_MS = 100;

/** An event's limits: no deadline but the one it carries (the longest a timer holds). */
const EVENT_LIMITS = { defaultMs: MAX_TIMER_DELAY_MS, maxMs: MAX_TIMER_DELAY_MS } as const;

/**
 * What an abort of the protocol's signal means (see {@link IncomingCallInit.abortMeans}).
 * @internal
 */
export type AbortMeaning = 'deadline' | 'ignore' | 'cancel';

/** What an adapter reads off the protocol's call to start one. @internal */
export interface IncomingCallInit<Call> {
  call: Call;
  /** The method, as its line names it (`/pkg.Service/Method`). */
  method: string;
  /** The protocol, as its line names it (`grpc`, `connect`, `amqp`). */
  protocol: string;
  /**
   * What it is: a `call` (default), or a broker's `message`, which may have waited in a queue: the time it surely
   * waited is read off `x-request-deadline-at` (with the options' `clockSkewMs`) and taken off its budget
   * (wire/queue-time.ts). Its line says which.
   */
  kind?: 'call' | 'message' | undefined;
  /**
   * For a message: whether anyone waits for its answer (it names a reply-to). One nobody waits for is an event: without
   * a budget of its own it runs with no deadline, as a queued job does, whatever `defaultMs` says. Default true.
   */
  awaited?: boolean | undefined;
  /** The request's headers (metadata), for the budget headers and the trace. */
  headers: HeaderSource;
  /**
   * The protocol's own timeout, in ms from now (`Infinity`: none; 0 or less: already passed); budget headers may ask
   * for less.
   */
  ownMs: number;
  /**
   * How long before `ownMs` runs out the handler's deadline falls, in ms. For a protocol library that answers the
   * caller's deadline itself when its own timer fires (grpc-js, without the `x-deadline-exceeded-by` trailer): the
   * answer that names this hop must be on its way first. Default 0.
   */
  leadMs?: number | undefined;
  /**
   * Whether the call streams its request or its answer: never refused by admission (a stream's time is not an
   * answer's), nor teaching its method a time. Default false.
   */
  streaming?: boolean | undefined;
  /** An outside cancellation: the protocol's own signal for the call, aborted when the caller goes. */
  signal?: AbortSignal | undefined;
  /**
   * What an abort of `signal` means, told by its reason: `'deadline'`, the protocol's own timer for the caller's
   * deadline fired (Connect aborts its handler's signal so), and the context stops as this hop's deadline; `'ignore'`,
   * that timer fired but cannot be right, and the context keeps its own deadline; `'cancel'`, the caller went (see
   * {@link IncomingCall.callerLeft}). Default: every abort is `'cancel'`.
   */
  abortMeans?: ((reason: unknown) => AbortMeaning) | undefined;
}

/** @internal */
export class IncomingCall<Call> {
  readonly context: OwnedContext;
  readonly budgetMs: number;
  /** Where the budget came from: the caller (`header`), or the service's `defaultMs`. */
  readonly source: 'header' | 'default';
  /** What the caller asked for, when more than it may: `maxMs`, or `defaultMs` for a caller not trusted. */
  readonly requestedMs: number | undefined;
  /** How long the message surely waited in a broker before it arrived, in ms (0 but for messages). */
  readonly waitedMs: number;
  /**
   * Why the handler must not run at all as this hop's deadline: no time left, less than `minMs`, or (admission) less
   * than its method's fastest typical time. Answered `DEADLINE_EXCEEDED`.
   */
  readonly refusal: DeadlineExceededError | undefined;
  /**
   * Why the handler must not run because the server is overloaded (admission: `overloaded`, `low-priority`).
   * Answered `UNAVAILABLE`, with when to retry.
   */
  readonly shed: AdmissionRefusal | undefined;
  /** The method's admission, when the call was let in by it: told how long the call took at its end. */
  #admitted: { route: AdmissionRoute; probe: boolean } | undefined;
  readonly #init: IncomingCallInit<Call>;
  readonly #options: ResolvedIncomingOptions<Call>;
  readonly #startedAt = monotonicNow();
  /** When the caller's own deadline (the protocol's timeout, or its budget header) runs out; `Infinity`: none. */
  readonly #callerDeadlineAt: number;
  /** The protocol's signal while it is followed. */
  #signal: AbortSignal | undefined;
  #ended = false;

  constructor(init: IncomingCallInit<Call>, options: ResolvedIncomingOptions<Call>, parser: BudgetParser) {
    this.#init = init;
    this.#options = options;
    const parsed = parser(init.headers);
    // Before the parser's own clamp (2^31−1 ms): the log line says what the caller really asked for.
    const sentMs = parsed.requestedMs ?? parsed.budgetMs ?? Number.POSITIVE_INFINITY;
    const skewMs = init.kind === 'message' ? options.clockSkewMs : undefined;
    this.waitedMs =
      skewMs === undefined || sentMs === Number.POSITIVE_INFINITY
        ? 0
        : waitedMs(sentMs, readHeader(init.headers, REQUEST_DEADLINE_AT_HEADER), skewMs);
    const headerMs = sentMs - this.waitedMs;
    // What the caller asked for, and the most of it the handler may use before the protocol acts on its own copy.
    const asked = Math.min(init.ownMs, headerMs);
    const usable = Math.min(init.ownMs - (init.leadMs ?? 0), headerMs);
    this.#callerDeadlineAt = this.#startedAt + asked;
    // A caller the service trusts may lengthen the budget up to maxMs; any other may only shorten the default.
    const event = init.kind === 'message' && init.awaited === false;
    const { defaultMs, maxMs } = event ? EVENT_LIMITS : options;
    const trusted = this.#trusted();
    const allowed = trusted ? maxMs : defaultMs;
    this.source = asked === Number.POSITIVE_INFINITY || (!trusted && asked > allowed) ? 'default' : 'header';
    // Never below 0: a deadline already past on arrival is no time left, as a timeout of 0 is.
    this.budgetMs = Math.max(0, Math.min(usable, this.source === 'default' ? defaultMs : allowed));
    this.requestedMs = asked > allowed && asked !== Number.POSITIVE_INFINITY ? Math.round(asked) : undefined;
    this.context = createContext({
      deadline: this.budgetMs,
      hop: options.hop,
      trace: traceFrom(readHeader(init.headers, 'traceparent'), readHeader(init.headers, 'tracestate')),
      root: true,
    });
    if (hasIncomingStartSubscribers()) this.#publishStart(event && asked === Number.POSITIVE_INFINITY);
    const refusal = this.#refusal();
    const verdict = refusal === undefined ? this.#admission(trusted) : undefined;
    this.refusal = verdict?.reason === 'too-little-time' ? this.#tooLittleTime(verdict) : refusal;
    this.shed = verdict !== undefined && verdict.reason !== 'too-little-time' ? verdict : undefined;
    if (init.signal !== undefined) this.#follow(init.signal);
  }

  /** `deadline:incoming:start`, for a subscriber. `none`: an event that came without a budget runs with none. */
  #publishStart(none: boolean): void {
    const init = this.#init;
    publishIncomingStart({
      context: this.context,
      protocol: init.protocol,
      kind: init.kind ?? 'call',
      hop: this.#options.hop,
      method: init.method,
      budgetMs: none ? Number.POSITIVE_INFINITY : this.budgetMs,
      source: none ? 'none' : this.source,
    });
  }

  /** A budget already spent (a timeout of 0, a deadline past on arrival), or below the service's minimum. */
  #refusal(): DeadlineExceededError | undefined {
    const { budgetMs } = this;
    const { minMs, hop } = this.#options;
    if (budgetMs > 0 && budgetMs >= minMs) return undefined;
    return new DeadlineExceededError({
      budgetMs,
      elapsedMs: 0,
      phase: 'in-handler',
      hop,
      message:
        budgetMs <= 0
          ? `${this.#init.method} not started: no time left`
          : `${this.#init.method} not started: ${Math.round(budgetMs)} ms left, below this service's minimum of ${minMs} ms`,
    });
  }

  /**
   * Admission's verdict on a unary call (core's admission.ts): a refusal, or `undefined` when let in (its method then
   * follows it) or not judged — admission off, a message, a streaming or exempt call.
   */
  #admission(trusted: boolean): AdmissionRefusal | undefined {
    const admission = this.#options.admission;
    const init = this.#init;
    if (admission === undefined || (init.kind ?? 'call') !== 'call' || init.streaming === true) return undefined;
    if (isExempt(admission, init.call, (error) => this.#warn({ error: String(error) }, 'admission.exempt threw')))
      return undefined;
    const route = admission.engine.route(init.method);
    // RFC 9218's urgency, from callers trusted to lengthen their budget: anyone else could buy a place ahead.
    const priority = trusted ? readHeader(init.headers, PRIORITY_HEADER) : undefined;
    const urgency = typeof priority === 'string' ? parseUrgency(priority) : undefined;
    const verdict = admission.engine.check(route, this.budgetMs, urgency);
    if (verdict.admitted) {
      route.enter();
      this.#admitted = { route, probe: verdict.probe };
      return undefined;
    }
    publishAdmissionRefused({
      protocol: init.protocol,
      hop: this.#options.hop,
      route: init.method,
      reason: verdict.reason,
      remainingMs: this.budgetMs,
      neededMs: verdict.neededMs,
      queueMs: verdict.queueMs,
    });
    return verdict;
  }

  /** Admission's `too-little-time`: this hop's deadline, as a budget below `minMs` is. */
  #tooLittleTime(verdict: AdmissionRefusal): DeadlineExceededError {
    return new DeadlineExceededError({
      budgetMs: this.budgetMs,
      elapsedMs: 0,
      phase: 'in-handler',
      hop: this.#options.hop,
      message: `${this.#init.method} not started: ${Math.floor(verdict.remainingMs)} ms left, and its calls take at least ${Math.ceil(verdict.neededMs)} ms`,
    });
  }

  #warn(line: object, message: string): void {
    try {
      this.#options.logger?.warn({ hop: this.#options.hop, method: this.#init.method, ...line }, message);
    } catch {
      // A broken logger never breaks the call.
    }
  }

  #trusted(): boolean {
    const trust = this.#options.trust;
    if (trust === undefined) return false;
    try {
      return Boolean(trust(this.#init.call));
    } catch {
      // A throwing predicate treats the caller as untrusted: it may only shorten the default; the call goes on.
      return false;
    }
  }

  /** Follows the protocol's signal without a closure (see {@link IncomingCall.handleEvent}). */
  #follow(signal: AbortSignal): void {
    if (signal.aborted) {
      this.#aborted(signal.reason);
      return;
    }
    this.#signal = signal;
    signal.addEventListener('abort', this, { once: true });
  }

  /** @internal EventListener protocol: the protocol's signal aborted. */
  handleEvent(): void {
    const signal = this.#signal;
    this.#signal = undefined;
    if (signal !== undefined) this.#aborted(signal.reason);
  }

  #aborted(reason: unknown): void {
    if (this.#ended) {
      this.#exchangeOver();
      return;
    }
    const meaning = this.#init.abortMeans?.(reason) ?? 'cancel';
    if (meaning === 'deadline') this.expire(reason);
    else if (meaning === 'cancel') this.callerLeft(reason);
  }

  /**
   * Stops the context as this hop's deadline, now: the protocol's own copy of the caller's deadline ran out first
   * (Connect's timer aborted its signal; grpc-js's timer answered the call). Its stop listeners answer
   * `DEADLINE_EXCEEDED` naming this hop, and the handler's work stops with a `DeadlineExceededError`. `cause`: what the
   * protocol said. Nothing once the call ended or the context stopped.
   */
  expire(cause?: unknown): void {
    if (this.#ended) return;
    this.context.cancel(
      new DeadlineExceededError({
        budgetMs: this.budgetMs,
        elapsedMs: monotonicNow() - this.#startedAt,
        phase: 'in-handler',
        hop: this.#options.hop,
        cause,
      }),
    );
  }

  /**
   * The protocol says the caller ended the call (grpc-js's `'cancelled'`, an abort of Connect's signal). Within
   * {@link AT_THE_DEADLINE_MS} of the caller's own deadline, or after it, that is the deadline ({@link IncomingCall.expire}):
   * the caller's timer, or the protocol's own, fired. Before, the caller left: the context is cancelled with a
   * `CancelledError` (`reason: 'client-disconnected'`). Nothing once the context stopped. Once the call ended, it is
   * the protocol closing the exchange (grpc-js says `'cancelled'` after every status it sent, connect-node aborts its
   * signal when the stream closes): see {@link IncomingCall.end}.
   */
  callerLeft(cause?: unknown): void {
    if (this.#ended) {
      this.#exchangeOver();
      return;
    }
    if (monotonicNow() >= this.#callerDeadlineAt - AT_THE_DEADLINE_MS) {
      this.expire(cause);
      return;
    }
    this.context.cancel(
      new CancelledError(`the caller cancelled ${this.#init.method}`, { reason: 'client-disconnected', cause }),
    );
  }

  /**
   * The protocol closed the call's exchange after its outcome was decided: work the handler left running stops now, as
   * the context's end would have stopped it, and the context leaves the expiry queue. Not a cancellation by anyone:
   * its reason is `context-ended`, which publishes no cancellation event.
   */
  #exchangeOver(): void {
    this.context.cancel(
      new CancelledError(`${this.#init.method} is over: the protocol closed its exchange`, { reason: 'context-ended' }),
    );
  }

  /**
   * Tells `listener` when the context stops before the call ended (its deadline, or the caller cancelled); returns
   * the function that takes it off again.
   */
  onStop(listener: (reason: StopReason) => void): () => void {
    return this.context.onStop((reason) => {
      if (!this.#ended) listener(reason);
    });
  }

  /** Whether the call's outcome is decided. */
  get ended(): boolean {
    return this.#ended;
  }

  /**
   * Ends the call's context once its outcome is decided (`error` undefined: answered), and writes its line with the
   * protocol's `code`. Work it left running is cancelled if the call failed, or with `cancelOnEnd`; else once the
   * protocol closes the exchange, a moment later (`callerLeft()` or the signal's abort after the end).
   */
  end(code: number | string, error?: unknown): void {
    if (this.#ended) return;
    this.#ended = true;
    const typed = error === undefined ? undefined : findDeadlineError(error);
    this.context.end({ cancel: typed !== undefined || this.#options.cancelOnEnd });
    const admitted = this.#admitted;
    if (admitted !== undefined) {
      // An error says nothing of the method's time; a call cut took at least what it took (core's admission.ts).
      admitted.route.leave(
        monotonicNow() - this.#startedAt,
        error === undefined || typed !== undefined,
        admitted.probe,
      );
    }
    if (this.#options.logger !== undefined) this.#log(code, error, typed);
  }

  #log(code: number | string, error: unknown, typed: StopReason | undefined): void {
    const outcome =
      this.shed !== undefined
        ? 'refused'
        : error === undefined
          ? 'ok'
          : typed instanceof DeadlineExceededError
            ? 'deadline_exceeded'
            : typed instanceof CancelledError
              ? 'cancelled'
              : 'error';
    const line = {
      hop: this.#options.hop,
      method: this.#init.method,
      budgetMs: Math.round(this.budgetMs),
      budgetSource: this.source,
      ...(this.requestedMs === undefined ? {} : { requestedMs: this.requestedMs }),
      ...(this.waitedMs === 0 ? {} : { waitedMs: Math.round(this.waitedMs) }),
      elapsedMs: Math.round(monotonicNow() - this.#startedAt),
      outcome,
      code,
      ...(this.shed === undefined ? {} : { refused: this.shed.reason }),
      ...(typed instanceof DeadlineExceededError && typed.hop !== undefined ? { exceededBy: typed.hop } : {}),
    };
    const message = `${this.#init.protocol} ${this.#init.kind ?? 'call'}`;
    try {
      if (outcome === 'ok' || outcome === 'cancelled' || outcome === 'refused')
        this.#options.logger?.info(line, message);
      else this.#options.logger?.warn(line, message);
    } catch {
      // A broken logger never breaks the call.
    }
  }
}
