/**
 * axios under the request's deadline, through its interceptors: each attempt (axios-retry runs the request
 * interceptors again) is prepared with {@link prepareWith}, and its end is reported from the response
 * interceptor. axios is an optional peer: only the few members used are typed here, structurally.
 */
import { storage } from '@deadline/core/internal';
import { IDEMPOTENCY_KEY_HEADER } from './idempotency-key.js';
import { type HttpDeadlineOptions, resolveHttpOptions } from './options.js';
import { type PreparedHttpRequest, prepareWith } from './prepare-request.js';

/**
 * The parts of an axios request config the adapter reads and sets (axios' `InternalAxiosRequestConfig` fits).
 *
 * @example
 * ```ts
 * const config: AxiosConfigLike = { method: 'get', url: 'http://inventory/stock/42', timeout: 2_000 };
 * ```
 */
export interface AxiosConfigLike {
  method?: string | undefined;
  url?: string | undefined;
  /** An `AxiosHeaders` (axios ≥ 1), or a plain object. */
  headers?: unknown;
  /** The caller's `AbortSignal`, if any. */
  signal?: unknown;
  /** ms; 0 or absent: none. */
  timeout?: number | undefined;
}

/**
 * The parts of an axios instance {@link deadlineAxios} uses (an `AxiosInstance` fits; axios is not imported).
 *
 * @example
 * ```ts
 * import axios from 'axios';
 * const instance: AxiosInstanceLike = axios.create({ baseURL: 'http://inventory' });
 * ```
 */
export interface AxiosInstanceLike {
  interceptors: {
    request: {
      use(onFulfilled: <C extends AxiosConfigLike>(config: C) => C): number;
      eject(id: number): void;
    };
    response: {
      use(
        onFulfilled: <R extends { status: number; headers?: unknown; config?: AxiosConfigLike }>(response: R) => R,
        onRejected: (error: unknown) => never,
      ): number;
      eject(id: number): void;
    };
  };
  /** The full URL of a request (`baseURL` and `params` applied), as axios will send it. */
  getUri(config?: AxiosConfigLike): string;
}

/** One attempt in flight: its call, and the listeners linking the caller's signal to ours. */
interface Attempt {
  call: PreparedHttpRequest;
  unlink: () => void;
}

/**
 * How long after the call's timeout axios' own fires. The call's stop may come up to a millisecond after its
 * nominal time (whole-ms timers, re-armed when Node fires them a fraction early); this is comfortably more.
 */
const BACKSTOP_MS = 10;

/** On the config, not in a WeakMap: an interceptor that returns a copy (`{ ...config }`) keeps it. */
const ATTEMPT = Symbol('@deadline/http axios attempt');

/**
 * The signal each attempt put on its config → the caller's own one, so that a config sent again (a retry) is
 * linked to the caller's signal, not to the ended attempt's.
 */
const callerSignals = new WeakMap<object, unknown>();

/**
 * Puts every request of an axios instance under the current deadline: the remaining budget and the trace are
 * sent, a request with no time left is refused before any connection (`DeadlineExceededError`, phase
 * `before-call`, or `CancelledError`), and one in flight is aborted when the budget runs out or the request is
 * cancelled, rejecting with that typed error instead of axios' `CanceledError`. A downstream's 504 naming its
 * hop rejects with `DeadlineExceededError` (`whose: 'downstream:<hop>'`). The caller's own `signal` and a
 * smaller `timeout` still apply. Returns a function that removes both interceptors.
 *
 * With `responseType: 'stream'` the call ends when the response head arrives: the body is then the caller's.
 *
 * @example
 * ```ts
 * import axios from 'axios';
 * import { deadlineAxios } from '@deadline/http';
 *
 * const inventory = axios.create({ baseURL: 'http://inventory:8080' });
 * const eject = deadlineAxios(inventory, { marginMs: 20 });
 * const { data } = await inventory.get('/stock/42'); // inside a request: budget sent, cut at the deadline
 * ```
 */
export function deadlineAxios(instance: AxiosInstanceLike, options?: HttpDeadlineOptions): () => void {
  const resolved = resolveHttpOptions(options);
  const requestId = instance.interceptors.request.use(<C extends AxiosConfigLike>(config: C): C => {
    // Outside any context, with no default budget or cap: exactly what axios would do.
    if (resolved.passThroughOutside && storage.getStore() === undefined) return config;
    const method = config.method ?? 'get';
    const headers = config.headers as { set?: unknown } | undefined;
    // Throws when no time is left: the request is rejected before the adapter runs, so nothing connects.
    let call: PreparedHttpRequest;
    if (typeof headers?.set === 'function') {
      call = prepareWith(resolved, method, instance.getUri(config), undefined, () => axiosHasKey(headers));
      // AxiosHeaders: `set` matches names case-insensitively; `true` overrides a caller's `false` (unset) too.
      (headers as { set(values: object, rewrite: boolean): unknown }).set(call.headers, true);
    } else {
      call = prepareWith(resolved, method, instance.getUri(config), {
        headers: headers as Record<string, string | string[] | number | undefined> | undefined,
      });
      config.headers = call.headers;
    }
    const unlink = linkSignal(config, call.signal);
    // axios' own timeout, as a backstop for adapters that ignore `signal`. A few ms after the call's: two timers
    // for the same instant race, and axios' winning would fail the call with its timeout error, not ours.
    const backstop = call.timeout === undefined ? undefined : call.timeout + BACKSTOP_MS;
    if (backstop !== undefined && !(config.timeout !== undefined && config.timeout > 0 && config.timeout <= backstop)) {
      config.timeout = backstop;
    }
    (config as Record<symbol, unknown>)[ATTEMPT] = { call, unlink } satisfies Attempt;
    return config;
  });
  const responseId = instance.interceptors.response.use(
    (response) => {
      const failure = finish(response.config, { statusCode: response.status, headers: response.headers });
      if (failure !== undefined) throw failure;
      return response;
    },
    (error: unknown): never => {
      const { config, response } = (error ?? {}) as {
        config?: AxiosConfigLike;
        response?: { status: number; headers?: unknown };
      };
      // With a response (a non-2xx status), `done` reads its status and headers: a downstream 504 naming its hop.
      // Stopped by us (axios says `CanceledError`) or the downstream's deadline: the typed error. Else axios' own.
      throw finish(config, response ? { statusCode: response.status, headers: response.headers } : error) ?? error;
    },
  );
  return function ejectDeadlineAxios() {
    instance.interceptors.request.eject(requestId);
    instance.interceptors.response.eject(responseId);
  };
}

/** Ends the attempt recorded on `config` (once); what `done` returns, or `undefined` without an attempt. */
function finish(config: AxiosConfigLike | undefined, result: unknown): unknown {
  const holder = config as Record<symbol, Attempt | undefined> | undefined;
  const attempt = holder?.[ATTEMPT];
  if (attempt === undefined || holder === undefined) return undefined;
  delete holder[ATTEMPT];
  attempt.unlink();
  return attempt.call.done(result);
}

type SignalLike = {
  aborted: boolean;
  reason?: unknown;
  addEventListener(type: 'abort', listener: () => void): void;
  removeEventListener(type: 'abort', listener: () => void): void;
};

const noop = () => {};

/**
 * Sets `config.signal` so that both the caller's signal and ours abort the request. Not `AbortSignal.any`: on
 * Node 20 it keeps every signal it ever combined alive. Returns what removes the listeners.
 */
function linkSignal(config: AxiosConfigLike, ours: AbortSignal | undefined): () => void {
  const current = config.signal;
  const theirs =
    current !== undefined && callerSignals.has(current as object) ? callerSignals.get(current as object) : current;
  if (ours === undefined) {
    config.signal = theirs;
    return noop;
  }
  if (theirs === undefined || theirs === null) {
    callerSignals.set(ours, undefined);
    config.signal = ours;
    return noop;
  }
  const caller = theirs as SignalLike;
  // A signal axios knows but we cannot listen to (only `onabort`): the caller's wins, our timeout stays.
  if (typeof caller.addEventListener !== 'function') {
    config.signal = theirs;
    return noop;
  }
  const controller = new AbortController();
  callerSignals.set(controller.signal, theirs);
  config.signal = controller.signal;
  const onOurs = () => controller.abort(ours.reason);
  const onTheirs = () => controller.abort(caller.reason);
  if (caller.aborted) {
    onTheirs();
    return noop;
  }
  ours.addEventListener('abort', onOurs);
  caller.addEventListener('abort', onTheirs);
  return () => {
    ours.removeEventListener('abort', onOurs);
    caller.removeEventListener('abort', onTheirs);
  };
}

/** Whether axios' own headers object (`AxiosHeaders`, case-insensitive) has an `Idempotency-Key`. */
function axiosHasKey(headers: unknown): boolean {
  const has = (headers as { has?: (name: string) => boolean } | undefined)?.has;
  return typeof has === 'function' ? has.call(headers, IDEMPOTENCY_KEY_HEADER) : false;
}
