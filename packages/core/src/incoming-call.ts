/**
 * One call a server received over an RPC protocol (gRPC, Connect), in the deadline context its handler runs in: the
 * budget is the smallest of the protocol's own timeout and the budget headers, clamped like an HTTP request's,
 * `defaultMs` when none came (or the caller is not trusted); too little refuses the call before its handler runs.
 * The context ends — and the call's line is written — once, when the call's outcome is decided. The adapters only
 * read the protocol's call and answer it.
 */
import { monotonicNow } from './clock.js';
import { createContext } from './context.js';
import { CancelledError, DeadlineExceededError } from './errors.js';
import { findDeadlineError } from './guards.js';
import type { ResolvedIncomingOptions } from './incoming-options.js';
import type { OwnedContext, StopReason } from './scope.js';
import { traceFrom } from './trace.js';
import type { HeaderSource } from './wire/headers.js';
import { readHeader } from './wire/headers.js';
import type { BudgetParser } from './wire/parse-budget.js';

/** What an adapter reads off the protocol's call to start one. @internal */
export interface IncomingCallInit<Call> {
  call: Call;
  /** The method, as its line names it (`/pkg.Service/Method`). */
  method: string;
  /** The protocol, as its line names it (`grpc`, `connect`). */
  protocol: string;
  /** The request's headers (metadata), for the budget headers and the trace. */
  headers: HeaderSource;
  /** The protocol's own timeout, in ms from now (`Infinity`: none); budget headers may ask for less. */
  ownMs: number;
  /** An outside cancellation: the protocol's own signal for the call, aborted when the caller goes. */
  signal?: AbortSignal | undefined;
}

/** @internal */
export class IncomingCall<Call> {
  readonly context: OwnedContext;
  readonly budgetMs: number;
  /** Where the budget came from: the caller (`header`), or the service's `defaultMs`. */
  readonly source: 'header' | 'default';
  /** What the caller asked for, when more than `maxMs` allowed. */
  readonly requestedMs: number | undefined;
  /** Why the handler must not run at all (too little time left). */
  readonly refusal: DeadlineExceededError | undefined;
  readonly #init: IncomingCallInit<Call>;
  readonly #options: ResolvedIncomingOptions<Call>;
  readonly #startedAt = monotonicNow();
  #ended = false;

  constructor(init: IncomingCallInit<Call>, options: ResolvedIncomingOptions<Call>, parser: BudgetParser) {
    this.#init = init;
    this.#options = options;
    let asked = Number.POSITIVE_INFINITY;
    if (this.#trusted()) asked = Math.min(init.ownMs, parser(init.headers).budgetMs ?? Number.POSITIVE_INFINITY);
    this.source = asked === Number.POSITIVE_INFINITY ? 'default' : 'header';
    this.budgetMs = this.source === 'default' ? options.defaultMs : Math.min(asked, options.maxMs);
    this.requestedMs = this.source === 'header' && asked > options.maxMs ? Math.round(asked) : undefined;
    this.context = createContext({
      deadline: Math.max(0, this.budgetMs),
      hop: options.hop,
      trace: traceFrom(readHeader(init.headers, 'traceparent'), readHeader(init.headers, 'tracestate')),
      root: true,
      signal: init.signal,
    });
    this.refusal =
      this.budgetMs < options.minMs
        ? new DeadlineExceededError({
            budgetMs: this.budgetMs,
            elapsedMs: 0,
            phase: 'in-handler',
            hop: options.hop,
            message: `${init.method} not started: ${Math.max(0, Math.round(this.budgetMs))} ms left, below this service's minimum of ${options.minMs} ms`,
          })
        : undefined;
  }

  #trusted(): boolean {
    const trust = this.#options.trust;
    if (trust === undefined) return true;
    try {
      return Boolean(trust(this.#init.call));
    } catch {
      // A throwing predicate treats the caller as untrusted: the service's default applies, the call goes on.
      return false;
    }
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
   * protocol's `code`. Work it left running is cancelled if the call failed, or with `cancelOnEnd`.
   */
  end(code: number | string, error?: unknown): void {
    if (this.#ended) return;
    this.#ended = true;
    const typed = error === undefined ? undefined : findDeadlineError(error);
    this.context.end({ cancel: typed !== undefined || this.#options.cancelOnEnd });
    if (this.#options.logger !== undefined) this.#log(code, error, typed);
  }

  #log(code: number | string, error: unknown, typed: StopReason | undefined): void {
    const outcome =
      error === undefined
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
      elapsedMs: Math.round(monotonicNow() - this.#startedAt),
      outcome,
      code,
      ...(typed instanceof DeadlineExceededError && typed.hop !== undefined ? { exceededBy: typed.hop } : {}),
    };
    const message = `${this.#init.protocol} call`;
    try {
      if (outcome === 'ok' || outcome === 'cancelled') this.#options.logger?.info(line, message);
      else this.#options.logger?.warn(line, message);
    } catch {
      // A broken logger never breaks the call.
    }
  }
}
