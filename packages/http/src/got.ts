/**
 * got (14) under the request's deadline, through its hooks. Each attempt — retries and redirects included —
 * is prepared with {@link prepareWith} in `beforeRequest`, in the context of the caller who made the request
 * (retries are scheduled from socket and timer callbacks), and ended by whichever hook sees it end first.
 *
 * got reads its `signal` option only when a request object is built, before `beforeRequest` runs: a signal
 * set there is ignored. So the attempt's signal is handed to `http.request` itself, by wrapping the `request`
 * function. got's own `timeout` is left alone: its expiry is an `ETIMEDOUT` that got retries, where a call
 * out of time must fail at once. got is an optional peer: only the members used are typed here, structurally.
 */
import { findDeadlineError } from '@deadline/core';
import { outsideContext, type Scope, storage } from '@deadline/core/internal';
import { type HttpDeadlineOptions, resolveHttpOptions } from './options.js';
import { type PreparedHttpRequest, prepareWith } from './prepare-request.js';

/**
 * The parts of got's `Options` the hooks read and set (got's own `Options` fits; got is not imported).
 *
 * @example
 * ```ts
 * const hook = (options: GotOptionsLike) => console.log(options.method, String(options.url));
 * ```
 */
export interface GotOptionsLike {
  method: string;
  url: string | URL | undefined;
  headers: Record<string, string | string[] | undefined>;
  context: object;
  request?: unknown;
  retry: { calculateDelay?: unknown };
  getFallbackRequestFunction(): unknown;
}

/**
 * The parts of a got response the hooks read.
 *
 * @example
 * ```ts
 * const hook = (response: GotResponseLike) => console.log(response.statusCode);
 * ```
 */
export interface GotResponseLike {
  statusCode: number;
  headers: object;
  request: { options: GotOptionsLike };
}

/**
 * The parts of got's `RequestError` the hooks read.
 *
 * @example
 * ```ts
 * const hook = (error: GotErrorLike) => console.log(error.message, error.options?.method);
 * ```
 */
export interface GotErrorLike extends Error {
  options?: GotOptionsLike | undefined;
}

/**
 * What {@link deadlineGot} returns: options for `got.extend()`.
 *
 * @example
 * ```ts
 * const extension: GotDeadlineExtension = deadlineGot({ marginMs: 20 });
 * const client = got.extend(extension);
 * ```
 */
export interface GotDeadlineExtension {
  hooks: {
    beforeRequest: [(options: GotOptionsLike) => void];
    beforeRedirect: [(options: GotOptionsLike, response: GotResponseLike) => void];
    afterResponse: [<R extends GotResponseLike>(response: R) => R];
    beforeError: [(error: GotErrorLike) => Error];
  };
}

type RetryObjectLike = { error: GotErrorLike; computedValue: number };
type CalculateDelay = (retry: RetryObjectLike) => number | Promise<number>;

/** One got request across its attempts: got copies `context` from each attempt's options to the next. */
interface Exchange {
  /** The caller's context, read when the first attempt was prepared. */
  readonly scope: Scope | undefined;
  /** The `request` function and `retry.calculateDelay` the caller configured, before ours replaced them. */
  readonly request: unknown;
  readonly calculateDelay: CalculateDelay | undefined;
  /** The attempt in flight. */
  call: PreparedHttpRequest | undefined;
}

const EXCHANGE = Symbol('@deadline/http got exchange');

function exchangeOf(options: GotOptionsLike | undefined): Exchange | undefined {
  return (options?.context as Record<symbol, Exchange | undefined> | undefined)?.[EXCHANGE];
}

/**
 * Options for `got.extend()` that put every request of the instance under the current deadline: the remaining
 * budget and the trace are sent (every attempt gets a fresh budget), a request with no time left is refused
 * before any connection (`DeadlineExceededError`, phase `before-call`, or `CancelledError`), and one in flight
 * is aborted when the budget runs out or the request is cancelled, failing with that typed error. A downstream's
 * 504 naming its hop fails with `DeadlineExceededError` (`whose: 'downstream:<hop>'`). Neither is retried:
 * there is no time for it. The caller's own `signal`, timeouts and retry settings still apply.
 *
 * For the promise API: with `got.stream()` got runs no `afterResponse` hook, so a successful stream's call is
 * only cut by the deadline, never ended early.
 *
 * @example
 * ```ts
 * import got from 'got';
 * import { deadlineGot } from '@deadline/http';
 *
 * const inventory = got.extend({ prefixUrl: 'http://inventory:8080' }, deadlineGot({ marginMs: 20 }));
 * const stock = await inventory.get('stock/42').json(); // inside a request: budget sent, cut at the deadline
 * ```
 */
export function deadlineGot(options?: HttpDeadlineOptions): GotDeadlineExtension {
  const resolved = resolveHttpOptions(options);

  /** Ends the attempt now, not after got's backoff; a deadline failure is never retried. */
  const calculateDelay: CalculateDelay = (retry) => {
    const exchange = exchangeOf(retry.error.options);
    const outcome = exchange?.call?.done(retry.error);
    if (findDeadlineError(outcome ?? retry.error) !== undefined) return 0;
    return exchange?.calculateDelay === undefined ? retry.computedValue : exchange.calculateDelay(retry);
  };

  return {
    hooks: {
      beforeRequest: [
        function deadlineBeforeRequest(options) {
          const context = options.context as Record<symbol, Exchange | undefined>;
          let exchange = context[EXCHANGE];
          if (exchange === undefined) {
            exchange = {
              scope: storage.getStore(),
              request: options.request,
              calculateDelay: options.retry.calculateDelay as CalculateDelay | undefined,
              call: undefined,
            };
            context[EXCHANGE] = exchange;
          }
          // The previous attempt has normally been ended by a hook (response, redirect, retry decision): never
          // leave one armed.
          exchange.call?.done();
          exchange.call = undefined;
          // Outside any context, with no default budget or cap: exactly what got would do.
          if (resolved.passThroughOutside && exchange.scope === undefined) return;
          const headers = options.headers;
          // Throws when no time is left: got fails the request before its request function runs.
          const call = inScope(exchange.scope, () =>
            prepareWith(resolved, options.method, String(options.url), { headers }),
          );
          exchange.call = call;
          options.headers = call.headers as Record<string, string | string[]>;
          options.retry.calculateDelay = calculateDelay;
          options.request =
            call.signal === undefined ? exchange.request : withSignal(exchange.request, options, call.signal);
        },
      ],
      beforeRedirect: [
        function deadlineBeforeRedirect(options, response) {
          exchangeOf(options)?.call?.done(response);
        },
      ],
      afterResponse: [
        function deadlineAfterResponse(response) {
          // A downstream 504 naming its hop, or a call stopped while its body was read.
          const failure = exchangeOf(response.request.options)?.call?.done(response);
          if (failure !== undefined) throw failure;
          return response;
        },
      ],
      beforeError: [
        function deadlineBeforeError(error) {
          // got wraps what it is given in a `RequestError` (an AbortError, our thrown error): the typed one.
          const outcome = exchangeOf(error.options)?.call?.done(error);
          return findDeadlineError(outcome ?? error) ?? error;
        },
      ],
    },
  };
}

/** Runs `fn` in the caller's context, whatever context got's callbacks run in. */
function inScope<T>(scope: Scope | undefined, fn: () => T): T {
  if (storage.getStore() === scope) return fn();
  return scope === undefined ? outsideContext(fn) : storage.run(scope, fn);
}

type RequestFunction = (this: unknown, ...args: unknown[]) => unknown;

/**
 * The caller's request function (or got's default for the URL's protocol), called with our signal in its
 * native options: `http.request` destroys the socket when it aborts.
 */
function withSignal(base: unknown, options: GotOptionsLike, signal: AbortSignal): RequestFunction {
  return function deadlineRequest(this: unknown, ...args: unknown[]) {
    // got calls `(url, options)`; with its `cache` option, cacheable-request calls `(options, callback)`.
    const native = (args[0] instanceof URL ? args[1] : args[0]) as { signal?: AbortSignal };
    native.signal = signal;
    const request = (base ?? options.getFallbackRequestFunction()) as RequestFunction;
    return request.apply(this, args);
  };
}
