/**
 * One request's deadline on a server hop, from arrival to the end-of-request log line. Adapters translate
 * their host's hooks into three calls: `startRequest()` when the request arrives, `ctx.run()` around the
 * handler chain, and nothing else — the end of the response ends it (response-end.ts: the server's finish, or a
 * close before it).
 *
 * The reliable end signals are the server's own: a response finished, or closed before that, which means the
 * client left before the answer (fastify 5's `request.signal` and `onRequestAbort` were seen to misfire for
 * POSTs).
 */
import type { IncomingHttpHeaders, IncomingMessage, ServerResponse } from 'node:http';
import {
  type CallOutlivedMessage,
  CancelledError,
  createContext,
  Deadline,
  type DeadlineContext,
  DeadlineExceededError,
  findDeadlineError,
  type OwnedContext,
  type StopReason,
  type TraceContext,
  traceFrom,
} from '@deadline/core';
import {
  type AdmissionRefusal,
  activeRequestSpan,
  monotonicNow,
  NEW_TRACE,
  type OtelSpan,
  type OutlivedReporter,
  Scope,
  type StopOwner,
  spanOfTrace,
  traceOfSpan,
} from '@deadline/core/internal';
import { DEADLINE_EXCEEDED_BY_HEADER } from '@deadline/core/wire';
import type { RequestBudget } from './budget.js';
import { hasRequestEndSubscribers, publishRequestEnd } from './diagnostics.js';
import type { DeadlineAnswerShape, LineLogger, ResolvedLimits, ResolvedOptions } from './options.js';
import { type DeadlineAnswer, deadlineAnswer, overloadedAnswer } from './respond.js';
import { finishWithResponse } from './response-end.js';
import { annotateArrival, annotateEnd, annotateStop } from './span-attributes.js';

/**
 * How a request ended, for its log line: in time (`ok`), out of time (`deadline_exceeded`), its client left or
 * it was cancelled (`cancelled`), it failed otherwise (`error`, a 5xx), or admission refused it at arrival because
 * the server was overloaded (`refused`, 503).
 *
 * @example
 * ```ts
 * if (request.deadline?.outcome === 'deadline_exceeded') metrics.increment('expired');
 * ```
 */
export type RequestOutcome = 'ok' | 'deadline_exceeded' | 'cancelled' | 'error' | 'refused';

/**
 * The end-of-request log line, one per request per hop.
 *
 * @example
 * ```ts
 * diagnostics.subscribe('deadline:server:request', (line) => metrics.observe(line as RequestLine));
 * ```
 */
export interface RequestLine {
  traceId: string;
  /** This hop's span id: the OpenTelemetry server span's when OpenTelemetry made one. */
  spanId: string;
  hop: string;
  method: string;
  /** The request path, without the query string (which may carry secrets). */
  path: string;
  /** Where the budget came from: a header name, `default`, or `none` (a long-lived route without a caller's budget). */
  budgetSource: string;
  /** The raw header value, when the budget came from a header. */
  budgetHeader: string | undefined;
  /** The budget the request ran with, in ms. */
  budgetMs: number;
  /** What the caller asked for, when it was clamped to the route's maximum. */
  clampedFromMs: number | undefined;
  /** Whether the caller's deadline headers were honoured. */
  trusted: boolean;
  elapsedMs: number;
  statusCode: number;
  outcome: RequestOutcome;
  /** The hop whose deadline fired, when the outcome is `deadline_exceeded`. */
  exceededBy: string | undefined;
  /** Why admission refused the request, when the outcome is `refused`. */
  refused?: 'overloaded' | 'low-priority' | undefined;
}

/**
 * A request's deadline as handlers see it (`request.deadline` in fastify, `req.deadline` in express).
 *
 * @example
 * ```ts
 * app.get('/stock', async (request) => {
 *   request.log.info({ left: request.deadline.remainingMs() }, 'checking stock');
 * });
 * ```
 */
export interface RequestDeadline {
  /** The request's context: its deadline, trace, hop and signal. */
  readonly context: DeadlineContext;
  /** The request's deadline, anchored when it arrived. */
  readonly deadline: Deadline;
  /** Where the budget came from and what was done to it. */
  readonly budget: RequestBudget;
  /** Milliseconds left. */
  remainingMs(): number;
  /** How it ended; `undefined` while it runs. */
  readonly outcome: RequestOutcome | undefined;
}

/** What an adapter supplies, once per service: how to answer on its host, and where to log. @internal */
export interface RequestHost {
  /** Answers 504 (or 499) now, through the host; returns whether an answer was sent. */
  answer(state: RequestState, error: DeadlineExceededError | CancelledError): boolean;
  /** The logger for the request's end-of-request line, if any (looked up when the line is written). */
  logger(state: RequestState): LineLogger | undefined;
  /**
   * The client closed the connection before the response, just before the request's work is cancelled: a host
   * whose framework would route the handler's failure to the app's error handler takes the response over here, so
   * that the request's end is this hop's one line, not an unexpected error (fastify hijacks the reply).
   */
  clientLeft?(state: RequestState): void;
  /**
   * Whether the state lets go of its `hostData` when the response is over (its logger looked up by then, for calls
   * that outlive the request): true where that object holds the whole exchange (fastify's reply). A host that
   * reads `hostData` after the end (express counts the closes there) leaves it unset.
   */
  readonly releasesHostData?: boolean;
}

/**
 * A handler chain that answers its request's deadline itself, in its own protocol: a GraphQL server answers with
 * the data resolved so far and an error for each field cut. When the deadline passes, the hop stops the request's
 * context as always (its work hears of it and stops) but leaves the answer to the handler; if no answer has begun
 * within `graceMs`, it gives `answer()`'s. Set on {@link RequestState.claim}.
 * @internal
 *
 * @example
 * ```ts
 * state.claim ??= { graceMs: 100, answer: graphqlDeadlineAnswer };
 * ```
 */
export interface DeadlineAnswerClaim {
  /** How long after the deadline the hop waits for the handler's own answer, in ms. */
  readonly graceMs: number;
  /** The hop's answer when the handler's has not begun in time, or when the hop answers a deadline error itself. */
  readonly answer: DeadlineAnswerShape;
}

/**
 * The request state that owns `context` or the nearest context it descends from: how a layer inside the handler
 * chain (a GraphQL server's plugin) reaches its hop. `undefined` outside a server hop's request, or once it ended.
 * @internal
 *
 * @example
 * ```ts
 * requestStateOf(currentContext())?.recordError(error);
 * ```
 */
export function requestStateOf(context: DeadlineContext | undefined): RequestState | undefined {
  for (let scope = context as Scope | undefined; scope !== undefined; scope = scope.parent) {
    if (scope._owner instanceof RequestState) return scope._owner;
  }
  return undefined;
}

/**
 * One request's deadline on a server hop (see the module's header). The fields the constructor sets are `declare`d:
 * a class field without an initialiser is emitted as a definition to `undefined` (then the constructor sets it
 * again), and V8 counts that initialiser's bytecode with the constructor's against the 920 bytes it inlines into a
 * request's start. With seven fields fewer there (89 bytes of bytecode to 54), the constructor is taken in before
 * AsyncLocalStorage's `run` on Node 26, instead of being left out for it (express, `--trace-turbo-inlining`; ~0.5k
 * instructions a request, callgrind).
 * @internal
 */
export class RequestState implements RequestDeadline, OutlivedReporter, StopOwner {
  context!: OwnedContext;
  declare budget: RequestBudget;
  outcome: RequestOutcome | undefined;
  exceededBy: string | undefined;
  /** Status of the answer this hop gave for the handler (504/499), if it did. */
  answeredWith: number | undefined;
  declare readonly arrivedAt: number;
  /**
   * The exchange, released when the response closes: a finished state may live on (express keeps it in a
   * WeakMap for `req.deadline`), and V8's young-generation collector treats a WeakMap's values as strong, so a
   * state still pointing at its request kept every request's objects alive until a full collection.
   */
  declare req: IncomingMessage | undefined;
  declare res: ServerResponse | undefined;
  declare readonly options: ResolvedOptions<never>;
  declare readonly host: RequestHost;
  /**
   * The adapter's own per-request object (fastify: the reply); let go of when the response is over where the host
   * says so (`releasesHostData`).
   */
  declare hostData: unknown;
  /**
   * A long-lived request (SSE, long poll, websocket): no default budget, and never answered 504 nor cut by this
   * hop; a caller's budget still bounds its outgoing calls.
   */
  longLived = false;
  /**
   * Set when the handler chain answers this request's deadline itself (a GraphQL server: the data resolved so far):
   * see {@link DeadlineAnswerClaim}. Declared, not initialised: only such requests pay for it.
   */
  declare claim: DeadlineAnswerClaim | undefined;
  /** Why admission refused the request, when it shed it (503). Declared, not initialised: only those pay for it. */
  declare refusal: AdmissionRefusal | undefined;
  #root!: Scope;
  /** The logger the end-of-request line went to: calls that outlive the request are logged there too. */
  #logger: LineLogger | undefined;
  /** The request's OpenTelemetry server span, when OpenTelemetry made one: the deadline is written on it. */
  readonly #span: OtelSpan | undefined;

  constructor(
    req: IncomingMessage,
    res: ServerResponse,
    options: ResolvedOptions<never>,
    host: RequestHost,
    budget: RequestBudget,
    arrivedAt: number,
    trace: TraceContext | typeof NEW_TRACE,
    hostData: unknown,
  ) {
    this.req = req;
    this.res = res;
    this.options = options;
    this.host = host;
    this.hostData = hostData;
    this.budget = budget;
    this.arrivedAt = arrivedAt;
    this.#span = trace === NEW_TRACE ? undefined : spanOfTrace(trace);
    this.#begin(trace);
  }

  /**
   * The request's root context, owned by this state. Apart from the constructor, which stays small enough for V8 to
   * inline where a request starts: a construction it does not inline goes through a generic stub (~0.15k
   * instructions a request on Node 20, callgrind), a plain call does not.
   */
  #begin(trace: TraceContext | typeof NEW_TRACE): void {
    // createContext({ root: true, … }) without its option checks: the hop was checked with the options.
    const root = Scope.root(Deadline._anchored(this.arrivedAt, this.budget.budgetMs), trace, this.options.hop);
    if (this.#span !== undefined) annotateArrival(this.#span, this.options.hop, this.budget);
    // Last: a budget already spent stops the context at once, and the answer reads the fields above and `context`.
    this.#root = root;
    this.context = root;
    root._ownNew(this, this.arrivedAt);
  }

  get deadline(): Deadline {
    return this.context.deadline;
  }

  remainingMs(): number {
    return this.context.deadline.remainingMs();
  }

  /**
   * Narrows the deadline to a route's limits (express: a router's own middleware after the app's). The
   * earlier deadline wins; the request keeps one owner, one close listener and one log line.
   */
  narrow(budget: RequestBudget, minMs: number): boolean {
    if (budget.budgetMs < minMs) {
      this.budget = budget;
      this.refuse(minMs);
      return false;
    }
    // A child of the current (the request's) context: the earlier deadline wins, cancellation flows down.
    const narrowed = createContext({ deadline: Deadline.at(this.arrivedAt + budget.budgetMs, this.arrivedAt) });
    if (narrowed.deadline === this.context.deadline) {
      narrowed.end();
      return true;
    }
    this.#disown();
    this.context = narrowed;
    this.budget = budget;
    (narrowed as Scope)._own(this);
    return true;
  }

  /**
   * Refuses the request at once, as this hop's deadline (504): its budget is below the route's minimum (`minMs`), or
   * what `message` says (admission: below the route's fastest typical time).
   */
  refuse(minMs: number | string): void {
    const error = new DeadlineExceededError({
      budgetMs: this.budget.budgetMs,
      elapsedMs: monotonicNow() - this.arrivedAt,
      phase: 'before-call',
      target: this.options.hop,
      hop: this.options.hop,
      message:
        typeof minMs === 'string'
          ? minMs
          : `not starting: ${Math.floor(this.budget.budgetMs)} ms left, this route needs at least ${minMs} ms`,
    });
    // Not an expiry (no onExpire): the caller arrived with too little time. Nothing ran: answered now, even where
    // the handler answers its deadline itself.
    this.#disown();
    this.#answer(error, false);
    this.context.cancel(error);
  }

  /**
   * Refuses the request at once because the server is overloaded (admission): 503 with `Retry-After`, naming this
   * hop; nothing of it ran. Its line says `refused`, at the level of requests that ended well: shedding is the
   * server doing its job, and under load it is most requests.
   */
  shed(refusal: AdmissionRefusal): void {
    this.#disown();
    this.outcome = 'refused';
    this.refusal = refusal;
    const error = new CancelledError(`refused at arrival: ${refusal.reason}`, { reason: 'refused' });
    if (this.host.answer(this, error)) this.answeredWith = 503;
  }

  /**
   * Makes the request long-lived once it has started (express's `longLived()`, mounted on a route): the
   * route's default budget no longer applies. A caller's budget, if one came, still bounds its outgoing calls.
   * Work started before, under the default budget, keeps it.
   */
  makeLongLived(): void {
    if (this.longLived) return;
    this.longLived = true;
    if (this.budget.source === 'header') return;
    this.#disown();
    const previous = this.context as Scope;
    const root = this.#root;
    // A caller not trusted that asked for more than the default: on a route without one, its budget only shortens.
    const asked = this.budget.requestedMs;
    const budgetMs = asked === undefined ? Number.POSITIVE_INFINITY : Math.min(asked, this.options.limits.maxMs);
    const deadline = asked === undefined ? Deadline.NONE : Deadline._anchored(this.arrivedAt, budgetMs);
    this.#root = Scope.root(deadline, root.trace, this.options.hop);
    this.context = this.#root;
    this.budget = { ...this.budget, budgetMs, source: asked === undefined ? 'none' : 'header' };
    this.#root._own(this);
    if (previous !== root) previous._release(this);
    root._release(this);
  }

  /** The request's context stopped (its deadline, a cancellation, the client leaving). @internal */
  _ownerStopped(reason: StopReason): void {
    if (reason instanceof DeadlineExceededError) {
      // A caller's budget on a long-lived route: its outgoing calls were cut; the stream is the route's own.
      if (this.longLived) return;
      this.#answer(reason);
      this.#notifyExpire(reason);
    } else if (reason.reason !== 'context-ended') {
      this.outcome ??= 'cancelled';
      if (reason.reason !== 'client-disconnected') this.#answer(reason);
    }
  }

  #answer(error: DeadlineExceededError | CancelledError, handlerMayAnswer = true): void {
    if (this.answeredWith !== undefined) return;
    if (this.#span !== undefined) annotateStop(this.#span, error, monotonicNow() - this.arrivedAt);
    const res = this.res;
    if (
      handlerMayAnswer &&
      this.claim !== undefined &&
      error instanceof DeadlineExceededError &&
      res?.headersSent === false
    ) {
      this.#awaitClaimedAnswer(error, this.claim.graceMs);
      return;
    }
    // A response already streaming cannot be answered: the host cuts it.
    const streaming = res?.headersSent === true && !res.writableEnded;
    const answered = this.host.answer(this, error);
    if (streaming && res?.destroyed === true && error instanceof DeadlineExceededError) this.#streamCut(error);
    if (error instanceof DeadlineExceededError) {
      this.outcome = 'deadline_exceeded';
      this.exceededBy = error.hop ?? this.options.hop;
    } else {
      this.outcome ??= 'cancelled';
    }
    if (answered) this.answeredWith = error instanceof DeadlineExceededError ? 504 : 499;
  }

  /**
   * The deadline passed on a request whose handler answers it itself: the work hears of it next (the context's
   * listeners run after its owner), and answers with what it has; this hop answers only if that has not begun within
   * `graceMs`. The outcome is the deadline's either way.
   */
  #awaitClaimedAnswer(error: DeadlineExceededError, graceMs: number): void {
    this.outcome = 'deadline_exceeded';
    this.exceededBy = error.hop ?? this.options.hop;
    const timer = setTimeout(() => {
      // Let go of when the response is over; a response begun is the handler's.
      if (this.res === undefined || this.res.headersSent || this.answeredWith !== undefined) return;
      if (this.host.answer(this, error)) this.answeredWith = 504;
    }, graceMs);
    timer.unref();
  }

  /**
   * What this hop answers for `error`: 504 with its JSON body (499 for a cancellation), or, on a request whose
   * handler claimed its deadline's answer, the body that handler's protocol gives (a GraphQL response).
   */
  answerOf(error: DeadlineExceededError | CancelledError): DeadlineAnswer {
    const elapsedMs = monotonicNow() - this.arrivedAt;
    const refusal = this.refusal;
    if (refusal !== undefined) return overloadedAnswer(refusal, this.options.hop);
    const shape = this.claim?.answer ?? this.options.answer;
    if (shape !== undefined && error instanceof DeadlineExceededError) {
      try {
        return shape(error, { hop: this.options.hop, budgetMs: this.budget.budgetMs, elapsedMs });
      } catch (shapeError) {
        reportHookError(this.host.logger(this), 'answer', shapeError, this.options.hop);
      }
    }
    return deadlineAnswer(error, this.budget.budgetMs, elapsedMs, this.options.hop);
  }

  /** A response still streaming was cut at the deadline: one line, saying how a long-lived route opts out. */
  #streamCut(error: DeadlineExceededError): void {
    const req = this.req;
    this.#log(
      this.host.logger(this),
      'warn',
      {
        traceId: this.#root.trace?.traceId,
        spanId: this.#root.trace?.spanId,
        hop: this.options.hop,
        path: pathOf((req as { originalUrl?: string } | undefined)?.originalUrl ?? req?.url),
        budgetMs: Math.round(this.budget.budgetMs),
        elapsedMs: Math.round(error.elapsedMs ?? monotonicNow() - this.arrivedAt),
      },
      `deadline: the response was still streaming when its ${Math.round(this.budget.budgetMs)} ms budget ran out, so the connection was cut. A long-lived route (server-sent events, long poll, websocket) opts out of the default budget: fastify \`config: { deadline: false }\`, express \`longLived()\`, node:http the \`longLived\` option`,
    );
  }

  /**
   * Records that a deadline error (or a cancellation) escaped the handler and was answered through the host's
   * error handling, so the log line says so. Other errors are left for the status code to tell.
   */
  recordError(error: unknown): void {
    const typed = findDeadlineError(error);
    if (typed instanceof DeadlineExceededError) {
      this.outcome ??= 'deadline_exceeded';
      this.exceededBy ??= typed.hop ?? this.options.hop;
    } else if (typed !== undefined) {
      this.outcome ??= 'cancelled';
    }
  }

  #notifyExpire(error: DeadlineExceededError): void {
    const hook = this.options.onExpire;
    if (hook === undefined) return;
    try {
      hook({
        // Set: expiry is only heard while the request runs.
        req: this.req as IncomingMessage,
        hop: this.options.hop,
        budgetMs: this.budget.budgetMs,
        elapsedMs: monotonicNow() - this.arrivedAt,
        error,
      });
    } catch (hookError) {
      reportHookError(this.host.logger(this), 'onExpire', hookError, this.options.hop);
    }
  }

  /**
   * Whether the request may run: refuses it at once (504) when its budget is below the route's minimum.
   */
  admit(minMs: number): boolean {
    if (this.budget.budgetMs >= minMs) return true;
    this.refuse(minMs);
    return false;
  }

  /**
   * The response is over: classify, cancel work left running if the client went away, end, log. Once.
   * `finished`: the server finished the response (its last bytes may still be on their way to the socket); left
   * out, the response says whether it was fully sent.
   */
  finish(finished?: boolean): void {
    const res = this.res;
    if (res === undefined) return;
    this.#disown();
    // HTTP/2's compatibility response says `writableFinished` when its stream was reset, though never ended: a
    // response is sent only if it was also ended.
    const sent = finished === true || (res.writableFinished && res.writableEnded);
    const disconnected = !sent && this.outcome === undefined;
    if (disconnected) this.#clientLeft();
    // Logged as 499 when the client left first, as nginx and grpc-gateway do.
    const statusCode = this.answeredWith ?? (disconnected ? 499 : res.statusCode);
    // The rare outcomes are a call apart: this runs inlined where a response ends, and V8 inlines only so much there.
    if (this.outcome === undefined) this.outcome = statusCode < 499 ? 'ok' : this.#outcomeOf(statusCode, res);
    if (this.#span !== undefined) annotateEnd(this.#span, this.outcome as RequestOutcome, this.exceededBy, this.budget);
    this.#end(sent);
    this.#writeLine(statusCode);
    this.req = undefined;
    this.res = undefined;
    if (this.host.releasesHostData === true) this.#releaseHostData();
  }

  /**
   * Lets go of the host's object once the response is over. The state outlives its response for as long as
   * anything still holds the request's context (the context keeps the state, for calls that outlive the request),
   * and through fastify's reply it kept every object of the request: fastify on Node 20 had 14–18 KB surviving each
   * young-generation collection, 5 KB once let go of (`--trace-gc-nvp`), as much as the hand-written minimum.
   */
  #releaseHostData(): void {
    // Calls that outlive the request are logged where its line went; when no line was written, looked up now.
    this.#logger ??= this.host.logger(this);
    this.hostData = undefined;
  }

  /** The client closed the connection before the response: its work is cancelled. */
  #clientLeft(): void {
    this.outcome = 'cancelled';
    this.host.clientLeft?.(this);
    const error = new CancelledError('the client closed the connection before the response', {
      reason: 'client-disconnected',
    });
    if (this.#span !== undefined) annotateStop(this.#span, error, monotonicNow() - this.arrivedAt);
    this.#root.cancel(error);
  }

  /**
   * The outcome of a response of status 499 or more that this hop did not answer itself: answered through the
   * framework's error handling, our errors carry status 504 and the header naming the hop.
   */
  #outcomeOf(statusCode: number, res: ServerResponse): RequestOutcome {
    const exceededBy = statusCode === 504 ? res.getHeader(DEADLINE_EXCEEDED_BY_HEADER) : undefined;
    if (typeof exceededBy === 'string') {
      this.exceededBy = exceededBy;
      return 'deadline_exceeded';
    }
    return statusCode === 499 ? 'cancelled' : statusCode >= 500 ? 'error' : 'ok';
  }

  /**
   * Ends the request's context. A request that ended well — its response fully sent — leaves work the handler
   * did not await running, under the request's deadline: Node code fires and forgets (an audit insert, a cache
   * write), and cancelling it would turn into an unhandled rejection. Each such call is logged as it ends (see
   * `callOutlived`). A request that failed (its client left, its response was cut) cancels its work, as does
   * every request with `cancelOnEnd` (Go's rule).
   */
  #end(sent: boolean): void {
    const context = this.context as Scope;
    if (this.options.cancelOnEnd || !sent) {
      if (context !== this.#root) context._end();
      this.#root._end();
    } else {
      if (context !== this.#root) context._release(this);
      this.#root._release(this);
    }
  }

  /** Stops hearing of the request's context stopping. */
  #disown(): void {
    (this.context as Scope)._disown();
  }

  /** A call the handler left running ended after the response: one line, pointing to the right tool. */
  callOutlived(message: CallOutlivedMessage): void {
    const logger = this.#logger ?? this.host.logger(this);
    const outlivedMs = Math.round(message.outlivedMs);
    this.#log(
      logger,
      'warn',
      {
        traceId: this.#root.trace?.traceId,
        spanId: this.#root.trace?.spanId,
        hop: this.options.hop,
        target: message.target,
        outlivedMs,
        elapsedMs: Math.round(message.elapsedMs),
        outcome: message.outcome,
        err: message.outcome === 'ok' ? undefined : message.error,
      },
      `deadline: a call to ${message.target} outlived its request by ${outlivedMs} ms (the handler did not await it); it ran under the request's deadline. Work meant to outlive the response belongs in runInBackground() from @deadline/jobs, under a budget of its own`,
    );
  }

  #writeLine(statusCode: number): void {
    const outcome = this.outcome as RequestOutcome;
    const level = outcome === 'ok' || outcome === 'cancelled' || outcome === 'refused' ? this.options.logLevel : 'warn';
    const logger = level === false ? undefined : this.host.logger(this);
    // Build the line only for someone: a logger that logs at this level, or a diagnostics subscriber. This much
    // stays small enough for V8 to inline where a response ends; building the line is a call apart.
    if (logger !== undefined) this.#logger = logger;
    const logs = logger !== undefined && enabled(logger, level as 'info' | 'debug' | 'warn');
    if (logs || hasRequestEndSubscribers()) {
      this.#buildLine(statusCode, outcome, logs ? logger : undefined, level as 'info' | 'debug' | 'warn');
    }
  }

  #buildLine(
    statusCode: number,
    outcome: RequestOutcome,
    logger: LineLogger | undefined,
    level: 'info' | 'debug' | 'warn',
  ): void {
    const budget = this.budget;
    const req = this.req as IncomingMessage;
    const line: RequestLine = {
      traceId: this.#root.trace?.traceId as string,
      spanId: this.#root.trace?.spanId as string,
      hop: this.options.hop,
      method: req.method ?? 'GET',
      // express rewrites req.url inside mounted routers; originalUrl keeps what the client asked for.
      path: pathOf((req as { originalUrl?: string }).originalUrl ?? req.url),
      budgetSource: budget.header ?? budget.source,
      budgetHeader: budget.value,
      budgetMs: Math.round(budget.budgetMs),
      clampedFromMs: budget.requestedMs === undefined ? undefined : Math.round(budget.requestedMs),
      trusted: budget.trusted,
      elapsedMs: Math.round((monotonicNow() - this.arrivedAt) * 10) / 10,
      statusCode,
      outcome,
      exceededBy: this.exceededBy,
    };
    if (outcome === 'refused') line.refused = this.refusal?.reason as RequestLine['refused'];
    publishRequestEnd(line);
    this.#log(logger, level, line, `deadline: ${outcome}`);
  }

  #log(logger: LineLogger | undefined, level: 'info' | 'debug' | 'warn', line: object, message: string): void {
    if (logger === undefined) return;
    try {
      if (level === 'debug') logger.debug?.(line, message);
      else logger[level](line, message);
    } catch {
      // A broken logger must not break the response path.
    }
  }
}

/**
 * A user hook threw: logged when there is a logger, else a process warning — never silent, never fatal.
 * @internal
 */
export function reportHookError(logger: LineLogger | undefined, hook: string, error: unknown, hop: string): void {
  if (logger !== undefined) {
    try {
      logger.warn({ err: error, hop }, `deadline: the ${hook} hook threw`);
      return;
    } catch {
      // fall through to the warning
    }
  }
  process.emitWarning(`the ${hook} hook threw: ${error instanceof Error ? error.message : String(error)}`, {
    type: 'DeadlineWarning',
    code: 'DEADLINE_HOOK_THREW',
  });
}

/**
 * Whether `logger` would write at `level`: pino says so itself; otherwise a method named `noop` (a disabled
 * pino level, fastify's logger when logging is off) writes nothing, so the line is not even built.
 */
function enabled(logger: LineLogger, level: 'info' | 'debug' | 'warn'): boolean {
  if (typeof logger.isLevelEnabled === 'function') return logger.isLevelEnabled(level);
  const method = logger[level];
  // Remembered per method: reading a function's `name` is a runtime call, and the same logger comes every time.
  if (method !== lastMethod) {
    lastMethod = method;
    lastMethodWrites = typeof method === 'function' && method.name !== 'noop';
  }
  return lastMethodWrites;
}
let lastMethod: unknown;
let lastMethodWrites = false;

function pathOf(url: string | undefined): string {
  if (url === undefined) return '/';
  const query = url.indexOf('?');
  return query === -1 ? url : url.slice(0, query);
}

/**
 * The request's trace: the server span OpenTelemetry started for it, when it did (its instrumentation has
 * already continued the caller's trace); else the caller's, continued, or a new one.
 * @internal
 */
export function requestTrace(headers: IncomingHttpHeaders): TraceContext | typeof NEW_TRACE {
  const span = activeRequestSpan();
  if (span !== undefined) return traceOfSpan(span, headers.traceparent);
  const traceparent = headers.traceparent;
  return traceparent === undefined ? NEW_TRACE : traceFrom(traceparent, headers.tracestate);
}

/**
 * Starts a request's deadline: budget from headers (if trusted) or the route default, clamped, anchored at
 * `arrivedAt` on the monotonic clock. Has the end of the response end it (response-end.ts).
 * Returns the state; when `state.outcome` is already set, the request was refused and the handler must not run.
 * @internal
 */
export function startRequest(
  req: IncomingMessage,
  res: ServerResponse,
  // The adapter's read of `req.headers`: a second read is a getter's call on Node 20.
  headers: IncomingHttpHeaders,
  options: ResolvedOptions<never>,
  host: RequestHost,
  budget: RequestBudget,
  arrivedAt: number,
  limits: ResolvedLimits = options.limits,
  hostData?: unknown,
): RequestState {
  const state = new RequestState(req, res, options, host, budget, arrivedAt, requestTrace(headers), hostData);
  state.longLived = limits.longLived;
  finishWithResponse(req, res, state);
  state.admit(limits.minMs);
  return state;
}
