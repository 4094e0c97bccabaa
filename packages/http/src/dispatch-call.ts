/**
 * What one dispatch under a deadline sends, whichever way it came in (the interceptor, the dispatcher): the
 * call, started in the caller's context, and the dispatch options carrying its budget, trace and idempotency
 * headers in place of the caller's.
 */
import { OutgoingCall, type Scope } from '@deadline/core/internal';
import type { Dispatcher } from 'undici';
import { type DispatchHeaders, hasHeader, replaceHeaders } from './headers.js';
import { IDEMPOTENCY_KEY_HEADER, outgoingKey } from './idempotency-key.js';
import type { ResolvedHttpOptions } from './options.js';
import { originOf } from './target.js';

/** A dispatch under a deadline: its call, and the options to send. @internal */
export interface DeadlineDispatch {
  call: OutgoingCall;
  opts: Dispatcher.DispatchOptions;
}

/**
 * Starts the call of one dispatch (every attempt: a retry never reuses a stale budget). Throws, with nothing
 * sent, when it must not be made (no time left, an open circuit). @internal
 */
export function startDispatch(
  opts: Dispatcher.DispatchOptions,
  resolved: ResolvedHttpOptions,
  // The caller's read of the current context (a read is a Map lookup from Node 24 on: core's `timeoutIn`).
  scope: Scope | undefined,
): DeadlineDispatch {
  const call = startCall(opts, resolved, scope);
  const key = outgoingKey(opts.method, opts.headers as DispatchHeaders, hasKeyHeader);
  const add = key === undefined ? call.headers : { ...call.headers, [IDEMPOTENCY_KEY_HEADER]: key };
  const headers = replaceHeaders(opts.headers as DispatchHeaders, add);
  return { call, opts: { ...opts, headers: headers as NonNullable<Dispatcher.DispatchOptions['headers']> } };
}

/** @internal */
export function startCall(
  opts: Dispatcher.DispatchOptions,
  resolved: ResolvedHttpOptions,
  scope: Scope | undefined,
): OutgoingCall {
  const origin = originOf(opts.origin);
  const target = resolved.target({ method: opts.method ?? 'GET', origin, path: opts.path ?? '/' });
  return OutgoingCall.start(target, resolved, resolved.guardFor(origin), scope);
}

/** Whether the caller's headers, in any shape undici takes, have an `Idempotency-Key`. */
const hasKeyHeader = (headers: DispatchHeaders): boolean => hasHeader(headers, IDEMPOTENCY_KEY_HEADER);
