/**
 * `DeadlineDispatcher`: a dispatcher that puts every request made through it under the current deadline, as
 * the interceptor does, but without `compose()`. `compose()` returns a Proxy (a trap on every property read) and
 * translates each handler to the interceptors' API (WrapHandler) only for the Agent to translate it back
 * (UnwrapHandler): for `fetch()`'s handler that is the response's headers parsed into an object and rebuilt as
 * buffers, on every call — more than the deadline's own work. Here the handler is passed on in the API it speaks.
 */
import type { EventEmitter } from 'node:events';
import { runWithCall, storage } from '@deadline/core/internal';
import { Agent, type Dispatcher } from 'undici';
import { DeadlineHandler } from './deadline-handler.js';
import { type DeadlineDispatch, startDispatch } from './dispatch-call.js';
import { OlderDeadlineHandler } from './engine-paths.js';
import { ownUndici } from './foreign-dispatcher.js';
import { type HttpDeadlineOptions, type ResolvedHttpOptions, resolveHttpOptions } from './options.js';
import { SendingDispatcher } from './sending-dispatcher.js';

type Handler = Dispatcher.DispatchHandler;
type Controller = Dispatcher.DispatchController;

/**
 * Options of {@link DeadlineDispatcher}, `installGlobalDispatcher()` and `createFetch()`: the HTTP options, and
 * the dispatcher to send through.
 *
 * @example
 * ```ts
 * const options: DispatcherOptions = { marginMs: 20, dispatcher: new Agent({ connections: 64 }) };
 * ```
 */
export interface DispatcherOptions extends HttpDeadlineOptions {
  /**
   * The dispatcher to send through (a configured `Agent`, a `ProxyAgent`…). Default: a new `Agent`;
   * for `installGlobalDispatcher()`, the current global one.
   */
  dispatcher?: Dispatcher | undefined;
}

/** The base dispatcher's events, re-emitted on the deadline dispatcher once someone listens for them. */
const FORWARDED_EVENTS = new Set(['connect', 'disconnect', 'connectionError', 'drain']);

/**
 * A dispatcher that puts every request made through it — `fetch()`, `request()`, `stream()` — under the current
 * deadline: each carries the remaining budget, is not made without time left, and is cut off when the budget runs
 * out or the request stops. Outside a deadline context (and without `defaultMs`, `maxMs` or a breaker) it is the
 * dispatcher it wraps. For a dispatcher you compose yourself, `deadlineInterceptor()` does the same.
 *
 * @example
 * ```ts
 * import { DeadlineDispatcher } from '@deadline/http';
 * import { Agent } from 'undici';
 *
 * const dispatcher = new DeadlineDispatcher({ dispatcher: new Agent({ connections: 50 }), marginMs: 20 });
 * const res = await fetch('http://inventory:8080/stock/42', { dispatcher });
 * ```
 */
export class DeadlineDispatcher extends SendingDispatcher<Dispatcher> {
  readonly #resolved: ResolvedHttpOptions;
  readonly #forwarding = new Set<string>();

  constructor(options?: DispatcherOptions) {
    // Often Node's own bundled undici (see foreign-dispatcher.ts).
    super(ownUndici(options?.dispatcher ?? new Agent()));
    this.#resolved = resolveHttpOptions(options);
    // Listeners of the base's events (`connect`, `disconnect`…) are served from the base, not per request.
    const emitter = this as unknown as EventEmitter;
    emitter.on('newListener', (event: string | symbol) => {
      if (typeof event !== 'string' || !FORWARDED_EVENTS.has(event) || this.#forwarding.has(event)) return;
      this.#forwarding.add(event);
      (this.base as unknown as EventEmitter).on(event, (...args: unknown[]) => emitter.emit(event, ...args));
    });
  }

  /** The dispatcher requests are sent through. */
  get base(): Dispatcher {
    return this.inner;
  }

  override dispatch(opts: Dispatcher.DispatchOptions, handler: Handler): boolean {
    const resolved = this.#resolved;
    const scope = storage.getStore();
    // Outside any context, with no default budget or cap: exactly what the base would do.
    if (resolved.passThroughOutside && scope === undefined) return this.inner.dispatch(opts, handler);
    const newer = typeof handler.onRequestStart === 'function';
    let started: DeadlineDispatch;
    try {
      started = startDispatch(opts, resolved, scope);
    } catch (error) {
      // Not made: nothing connected, nothing written.
      if (newer) handler.onResponseError?.(null as unknown as Controller, error as Error);
      else handler.onError?.(error as Error);
      return false;
    }
    const { call } = started;
    const deadlineHandler = newer
      ? new DeadlineHandler(handler, call, resolved.downstreamErrors)
      : new OlderDeadlineHandler(handler, call, resolved.downstreamErrors);
    try {
      // With the call in OpenTelemetry's context: instrumentation-undici's span, made inside, is the call's.
      return runWithCall(call, () => this.inner.dispatch(started.opts, deadlineHandler));
    } catch (error) {
      call.end(error);
      throw error;
    }
  }
}
