/**
 * The one version-specific fast path of this package (the rule: only such paths live here, each with the
 * condition under which it can be deleted). Compatibility layers for older undici versions are not fast paths:
 * they live in either-api-handler.ts and foreign-dispatcher.ts, each with its own condition.
 *
 * `OlderDeadlineHandler`: the handler of undici's older API (`onConnect`, `onHeaders`, `onData`, `onComplete`,
 * `onError`) that a dispatch under a deadline runs through (see call-exchange.ts for what it does), speaking that
 * API on both sides: `fetch()` hands a dispatcher such a handler (undici 6 and 7, bundled with Node 20 to 24), and
 * passing it on in kind spares the translation to the newer API and back (`compose()`'s WrapHandler, then the
 * Agent's UnwrapHandler) that every interceptor costs — the response's headers parsed into an object, then rebuilt
 * as buffers. Delete when: Node 24 leaves support (April 2028) — from Node 26 on, fetch's undici (8) hands the
 * newer API, which `DeadlineHandler` (deadline-handler.ts) speaks.
 */
import type { Duplex } from 'node:stream';
import type { OutgoingCall } from '@deadline/core/internal';
import { DEADLINE_EXCEEDED_BY_HEADER } from '@deadline/core/wire';
import type { Dispatcher } from 'undici';
import { CallExchange } from './call-exchange.js';
import { headersOf } from './either-api-handler.js';

type Handler = Dispatcher.DispatchHandler;
type Abort = (reason?: Error) => void;

/** Forwards undici's events to the caller's handler, and aborts the exchange when the call must stop. @internal */
export class OlderDeadlineHandler extends CallExchange implements Handler {
  readonly #handler: Handler;
  #abort: Abort | undefined;

  constructor(handler: Handler, call: OutgoingCall, downstreamErrors: boolean) {
    super(call, downstreamErrors);
    this.#handler = handler;
  }

  protected abortExchange(error: Error): boolean {
    this.#abort?.(error);
    return this.#abort !== undefined;
  }

  protected failCaller(error: Error): void {
    this.#handler.onError?.(error);
  }

  onConnect(abort: Abort, context?: unknown): void {
    this.#abort = abort;
    if (this.started(abort)) (this.#handler.onConnect as (abort: Abort, context?: unknown) => void)?.(abort, context);
  }

  onUpgrade(statusCode: number, rawHeaders: Buffer[] | string[] | null, socket: Duplex): void {
    this.call.end(undefined, statusCode);
    this.#handler.onUpgrade?.(statusCode, rawHeaders, socket);
  }

  // undici 6 passes (chunkSize, totalBytesSent), undici 7 the chunk: forwarded as it came.
  onBodySent(...args: [chunkSize: number, totalBytesSent: number]): void {
    this.#handler.onBodySent?.(...args);
  }

  onRequestSent(): void {
    (this.#handler as { onRequestSent?: () => void }).onRequestSent?.();
  }

  onResponseStarted(): void {
    this.#handler.onResponseStarted?.();
  }

  onHeaders(statusCode: number, rawHeaders: Buffer[], resume: () => void, statusText: string): boolean {
    if (this.done) return false;
    // Only a 504's headers are parsed (what the newer API would hand over); any other answer passes as it came.
    const exceededBy = statusCode === 504 ? headersOf(rawHeaders)[DEADLINE_EXCEEDED_BY_HEADER] : undefined;
    if (this.holdsBack(statusCode, exceededBy)) return true;
    return this.#handler.onHeaders?.(statusCode, rawHeaders, resume, statusText) ?? true;
  }

  onData(chunk: Buffer): boolean {
    if (this.done || this.downstream !== undefined) return true;
    return this.#handler.onData?.(chunk) ?? true;
  }

  onComplete(rawTrailers: string[] | null): void {
    this.ended(() => this.#handler.onComplete?.(rawTrailers));
  }

  onError(error: Error): void {
    this.failed(error);
  }
}
