/**
 * The undici interceptor. Each dispatch — every attempt, so a retry never reuses a stale budget — starts an
 * `OutgoingCall` in the caller's context: no time left → the handler fails at once and nothing is sent; else
 * the budget and trace headers replace the caller's, and the call is aborted through undici's controller
 * (a `signal` in the dispatch options is not honoured this deep) when its timeout passes or the request stops.
 */
import { DEADLINE_EXCEEDED_BY_HEADER, type DeadlineExceededError, parseExceededBy } from '@deadline/core';
import { OutgoingCall, runWithCall, storage } from '@deadline/core/internal';
import type { Dispatcher } from 'undici';
import { type DispatchHeaders, hasHeader, replaceHeaders } from './headers.js';
import { IDEMPOTENCY_KEY_HEADER, outgoingKey } from './idempotency-key.js';
import { type HttpDeadlineOptions, type ResolvedHttpOptions, resolveHttpOptions } from './options.js';
import { originOf } from './target.js';

type Handler = Dispatcher.DispatchHandler;
type Controller = Dispatcher.DispatchController;
type Headers = Parameters<NonNullable<Handler['onResponseStart']>>[2];

/**
 * An undici interceptor that puts every request made through the dispatcher under the current deadline.
 *
 * @example
 * ```ts
 * import { Agent, setGlobalDispatcher } from 'undici';
 * import { deadlineInterceptor } from '@deadline/http';
 *
 * const agent = new Agent().compose(deadlineInterceptor({ marginMs: 20 }));
 * await agent.request({ origin: 'http://inventory:8080', path: '/stock/42', method: 'GET' });
 * ```
 */
export function deadlineInterceptor(options?: HttpDeadlineOptions): Dispatcher.DispatcherComposeInterceptor {
  const resolved = resolveHttpOptions(options);
  return (dispatch) =>
    function deadlineDispatch(opts, handler) {
      // Outside any context, with no default budget or cap: exactly what undici would do.
      if (resolved.passThroughOutside && storage.getStore() === undefined) return dispatch(opts, handler);
      let call: OutgoingCall;
      try {
        call = startCall(opts, resolved);
      } catch (error) {
        // Not made: nothing connected, nothing written. undici's own interceptors report early failures so.
        handler.onResponseError?.(null as unknown as Controller, error as Error);
        return false;
      }
      const key = outgoingKey(opts.method, opts.headers as DispatchHeaders, hasKeyHeader);
      const add = key === undefined ? call.headers : { ...call.headers, [IDEMPOTENCY_KEY_HEADER]: key };
      const headers = replaceHeaders(opts.headers as DispatchHeaders, add);
      const deadlineHandler = new DeadlineHandler(handler, call, resolved.downstreamErrors);
      try {
        // With the call in OpenTelemetry's context: instrumentation-undici's span, made inside, is the call's.
        return runWithCall(call, () =>
          dispatch(
            { ...opts, headers: headers as NonNullable<Dispatcher.DispatchOptions['headers']> },
            deadlineHandler,
          ),
        );
      } catch (error) {
        call.end(error);
        throw error;
      }
    };
}

/** Whether the caller's headers, in any shape undici takes, have an `Idempotency-Key`. */
const hasKeyHeader = (headers: DispatchHeaders): boolean => hasHeader(headers, IDEMPOTENCY_KEY_HEADER);

/** @internal */
export function startCall(opts: Dispatcher.DispatchOptions, resolved: ResolvedHttpOptions): OutgoingCall {
  const origin = originOf(opts.origin);
  const target = resolved.target({ method: opts.method ?? 'GET', origin, path: opts.path ?? '/' });
  return OutgoingCall.start(target, resolved, resolved.guardFor(origin));
}

/** Forwards undici's events to the caller's handler, and stops the exchange when the call must stop. */
class DeadlineHandler implements Handler {
  readonly #handler: Handler;
  readonly #call: OutgoingCall;
  readonly #downstreamErrors: boolean;
  #controller: Controller | undefined;
  /** The caller's handler has had its last event (end or error): forward nothing more. */
  #done = false;
  #statusCode: number | undefined;
  /** A downstream 504 naming the hop whose deadline fired: reported once its (small) body has been read. */
  #downstream: DeadlineExceededError | undefined;

  constructor(handler: Handler, call: OutgoingCall, downstreamErrors: boolean) {
    this.#handler = handler;
    this.#call = call;
    this.#downstreamErrors = downstreamErrors;
    call.onStop((error) => {
      const controller = this.#controller;
      if (controller !== undefined) {
        controller.abort(error);
        return;
      }
      // Still queued for a connection: fail the caller now; the request is aborted when undici gets to it.
      this.#fail(null, error);
    });
  }

  onRequestStart(controller: Controller, context: unknown): void {
    this.#controller = controller;
    if (this.#done) {
      // Stopped while queued, already reported: abort before a byte is written.
      controller.abort(this.#call.stopReason ?? new Error('aborted'));
      return;
    }
    this.#handler.onRequestStart?.(controller, context);
  }

  onRequestUpgrade(controller: Controller, statusCode: number, headers: Headers, socket: never): void {
    this.#call.end(undefined, statusCode);
    this.#handler.onRequestUpgrade?.(controller, statusCode, headers, socket);
  }

  onResponseStart(controller: Controller, statusCode: number, headers: Headers, statusMessage?: string): void {
    if (this.#done) return;
    this.#statusCode = statusCode;
    if (statusCode === 504 && this.#downstreamErrors) {
      const hop = parseExceededBy(headers[DEADLINE_EXCEEDED_BY_HEADER]);
      if (hop !== undefined) {
        this.#downstream = this.#call.downstreamExceeded(hop);
        return;
      }
    }
    this.#handler.onResponseStart?.(controller, statusCode, headers, statusMessage);
  }

  onResponseData(controller: Controller, chunk: Buffer): void {
    if (this.#done || this.#downstream !== undefined) return;
    this.#handler.onResponseData?.(controller, chunk);
  }

  onResponseEnd(controller: Controller, trailers: Headers): void {
    if (this.#done) return;
    const downstream = this.#downstream;
    if (downstream !== undefined) {
      this.#fail(controller, downstream);
      return;
    }
    this.#done = true;
    this.#call.end(undefined, this.#statusCode);
    try {
      this.#handler.onResponseEnd?.(controller, trailers);
    } catch (error) {
      // A handler that throws here (undici's retry handler does, to retry) is owed the onResponseError undici
      // sends next.
      this.#done = false;
      throw error;
    }
  }

  onResponseError(controller: Controller, error: Error): void {
    if (this.#done) return;
    // Aborted by us: the typed reason, whatever undici wrapped it in.
    this.#fail(controller, this.#call.stopReason ?? error);
  }

  #fail(controller: Controller | null, error: Error): void {
    if (this.#done) return;
    this.#done = true;
    this.#call.end(error, this.#statusCode);
    this.#handler.onResponseError?.(controller as Controller, error);
  }
}
