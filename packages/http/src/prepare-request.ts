/**
 * For clients built on `node:http`/`node:https` (and axios, got and friends): the call's `signal`, `timeout` and
 * headers for one request, and a `done()` that ends it. The same `OutgoingCall` as the undici interceptor; only
 * the way of aborting differs (an AbortSignal, which `http.request` honours by destroying the socket, where its
 * `timeout` option only emits an event and lets the request run on).
 */
import type { DeadlineExceededError } from '@deadline/core';
import { OutgoingCall, storage } from '@deadline/core/internal';
import { DEADLINE_EXCEEDED_BY_HEADER, parseExceededBy } from '@deadline/core/wire';
import { IDEMPOTENCY_KEY_HEADER, outgoingKey, recordHasKey } from './idempotency-key.js';
import { type HttpDeadlineOptions, type ResolvedHttpOptions, resolveHttpOptions } from './options.js';

/**
 * One outgoing request prepared by {@link prepareHttpRequest}.
 *
 * @example
 * ```ts
 * const call: PreparedHttpRequest = prepareHttpRequest('GET', url);
 * const req = http.get(url, { headers: call.headers, signal: call.signal, timeout: call.timeout });
 * ```
 */
export interface PreparedHttpRequest {
  /** The name of the call in errors and events (`GET http://inventory/stock`). */
  readonly target: string;
  /** The caller's headers with the budget and trace headers set over them (same-named ones replaced). */
  readonly headers: Record<string, string | string[] | number>;
  /**
   * The `Idempotency-Key` set on a POST or PATCH inside work that has keys (an idempotent request, a keyed
   * `retry()`), also in `headers`; `undefined` otherwise, and when the caller's headers had one.
   */
  readonly idempotencyKey: string | undefined;
  /**
   * Aborts with `DeadlineExceededError` (`during-call`) or `CancelledError` when the call must stop;
   * `undefined` when nothing can stop it (no deadline, no `maxMs`, no `defaultMs`).
   */
  readonly signal: AbortSignal | undefined;
  /** The call's timeout in ms, for clients that take one (`http.request`'s is an idle-socket timeout). */
  readonly timeout: number | undefined;
  /**
   * Ends the call: pass the response (status and headers) when it has been read, or the error it failed
   * with. Returns the error the caller should fail with: the typed reason if the call was stopped, a
   * `DeadlineExceededError` (`whose: 'downstream:<hop>'`) for a downstream's 504 naming its hop, else the
   * error given (or `undefined`). Idempotent; listeners and timers are gone after it.
   */
  done(result?: { statusCode?: number | undefined; headers?: object | undefined } | Error | unknown): unknown;
}

/**
 * Prepares one request to `url` in the current context. Throws `DeadlineExceededError` (`before-call`) or
 * `CancelledError` when it must not be made. Outside a context (and without `defaultMs`/`maxMs`) it changes
 * nothing: the headers are the caller's, no signal, no timeout.
 *
 * @example
 * ```ts
 * import http from 'node:http';
 * import { prepareHttpRequest } from '@deadline/http';
 *
 * const call = prepareHttpRequest('GET', 'http://inventory/stock/42', { headers: { accept: 'application/json' } });
 * const req = http.request('http://inventory/stock/42', { headers: call.headers, signal: call.signal });
 * req.on('response', (res) => res.on('end', () => call.done(res)).resume());
 * req.on('error', (error) => call.done(error));
 * req.end();
 * ```
 */
export function prepareHttpRequest(
  method: string,
  url: string | URL,
  init?: RequestInit,
  options?: HttpDeadlineOptions,
): PreparedHttpRequest {
  return prepareWith(resolveHttpOptions(options), method, url, init);
}

/** The caller's side of a request: its headers. */
type RequestInit = { headers?: Record<string, string | string[] | number | undefined> | undefined };

/** {@link prepareHttpRequest} with options resolved once (the axios and got adapters). @internal */
export function prepareWith(
  resolved: ResolvedHttpOptions,
  method: string,
  url: string | URL,
  init?: RequestInit,
  callerHasKey: (headers: RequestInit['headers']) => boolean = recordHasKey,
): PreparedHttpRequest {
  const scope = storage.getStore();
  // Outside any context, with no default budget or cap: nothing to prepare, nothing published.
  if (resolved.passThroughOutside && scope === undefined) return passThrough(init);
  const parsed = typeof url === 'string' ? new URL(url) : url;
  const target = resolved.target({ method: method.toUpperCase(), origin: parsed.origin, path: parsed.pathname });
  const call = OutgoingCall.start(target, resolved, resolved.guardFor(parsed.origin), scope);
  const headers: Record<string, string | string[] | number> = {};
  for (const [name, value] of Object.entries(init?.headers ?? {})) {
    if (value !== undefined && !Object.hasOwn(call.headers, name.toLowerCase())) headers[name] = value;
  }
  Object.assign(headers, call.headers);
  const idempotencyKey = outgoingKey(method, init?.headers, callerHasKey);
  if (idempotencyKey !== undefined) headers[IDEMPOTENCY_KEY_HEADER] = idempotencyKey;
  let signal: AbortSignal | undefined;
  // A signal only where something can stop the call: its own timeout, or a context that can end or be cancelled.
  if (call.timeoutMs !== undefined || scope?._stoppable === true) {
    const controller = new AbortController();
    call.onStop((error) => controller.abort(error));
    signal = controller.signal;
  }
  const downstreamErrors = resolved.downstreamErrors;
  return {
    target,
    headers,
    idempotencyKey,
    signal,
    timeout: call.timeoutMs,
    done(result) {
      const stopped = call.stopReason;
      if (stopped !== undefined) {
        call.end(stopped);
        return stopped;
      }
      if (result instanceof Error || (result !== undefined && !isResponse(result))) {
        call.end(result);
        return result;
      }
      const response = result as
        | { statusCode?: number; status?: number; headers?: Record<string, unknown> }
        | undefined;
      const downstream = downstreamErrors ? downstreamError(call, response) : undefined;
      call.end(downstream, statusOf(response));
      return downstream;
    },
  };
}

function downstreamError(
  call: OutgoingCall,
  response: { statusCode?: number; status?: number; headers?: Record<string, unknown> } | undefined,
): DeadlineExceededError | undefined {
  if (statusOf(response) !== 504) return undefined;
  const headers = response?.headers;
  const value =
    typeof (headers as { get?: unknown } | undefined)?.get === 'function'
      ? (headers as unknown as { get(name: string): unknown }).get(DEADLINE_EXCEEDED_BY_HEADER)
      : headers?.[DEADLINE_EXCEEDED_BY_HEADER];
  const hop = parseExceededBy(value as string | string[] | undefined);
  return hop === undefined ? undefined : call.downstreamExceeded(hop);
}

/** node:http's `IncomingMessage` and got's response have `statusCode`; fetch's `Response` has `status`. */
function isResponse(value: unknown): boolean {
  return typeof value === 'object' && value !== null && ('statusCode' in value || 'status' in value);
}

function statusOf(response: { statusCode?: number; status?: number } | undefined): number | undefined {
  return response?.statusCode ?? response?.status;
}

function passThrough(init: RequestInit | undefined): PreparedHttpRequest {
  const headers: Record<string, string | string[] | number> = {};
  for (const [name, value] of Object.entries(init?.headers ?? {})) if (value !== undefined) headers[name] = value;
  return {
    target: '',
    headers,
    idempotencyKey: undefined,
    signal: undefined,
    timeout: undefined,
    done: (result) => (result instanceof Error ? result : undefined),
  };
}
