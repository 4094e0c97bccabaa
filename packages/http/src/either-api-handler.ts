/**
 * A dispatch handler that speaks both of undici's handler APIs to whoever drives it, and the newer one to the
 * handler it wraps. undici 7 and later call the newer methods (`onRequestStart`, `onResponseStart`, …): they pass
 * through as they are. undici 6 — what Node 20 and 22 bundle behind the global `fetch()` — calls only the older
 * ones (`onConnect`, `onHeaders`, `onData`, `onComplete`, `onError`), and refuses a handler without them ("invalid
 * onError method"): they are translated, with a controller standing in for the `abort` and `resume` it passes.
 * A compatibility layer, not a fast path. Delete when: Node 22 leaves support (April 2027), the last Node that
 * bundles undici 6.
 */
import type { IncomingHttpHeaders } from 'node:http';
import type { Duplex } from 'node:stream';
import type { Dispatcher } from 'undici';

type Handler = Dispatcher.DispatchHandler;
type Controller = Dispatcher.DispatchController;

/** The controller of an exchange driven through the older API: `abort` and `resume` are the ones undici 6 gave. */
class OlderApiController implements Controller {
  readonly #abort: (reason?: Error) => void;
  /** undici 6 hands its `resume` over with the headers. */
  resumeWith: (() => void) | undefined;
  #aborted = false;
  #paused = false;
  #reason: Error | null = null;

  constructor(abort: (reason?: Error) => void) {
    this.#abort = abort;
  }

  get aborted(): boolean {
    return this.#aborted;
  }

  get paused(): boolean {
    return this.#paused;
  }

  get reason(): Error | null {
    return this.#reason;
  }

  abort(reason: Error): void {
    if (this.#aborted) return;
    this.#aborted = true;
    this.#reason = reason;
    this.#abort(reason);
  }

  pause(): void {
    this.#paused = true;
  }

  resume(): void {
    if (!this.#paused) return;
    this.#paused = false;
    this.resumeWith?.();
  }
}

/** Raw headers (name, value, name, value…) as the newer API hands them: names in lower case, repeats as arrays. */
export function headersOf(raw: readonly (Buffer | string)[] | null | undefined): IncomingHttpHeaders {
  const headers: Record<string, string | string[]> = Object.create(null);
  for (let i = 0; raw != null && i + 1 < raw.length; i += 2) {
    const name = String(raw[i]).toLowerCase();
    const value = String(raw[i + 1]);
    const earlier = headers[name];
    headers[name] = earlier === undefined ? value : Array.isArray(earlier) ? [...earlier, value] : [earlier, value];
  }
  return headers as IncomingHttpHeaders;
}

/** @internal */
export class EitherApiHandler implements Handler {
  readonly #handler: Handler;
  #controller: OlderApiController | undefined;

  constructor(handler: Handler) {
    this.#handler = handler;
  }

  // The newer API: as it is.

  onRequestStart(controller: Controller, context: unknown): void {
    this.#handler.onRequestStart?.(controller, context);
  }

  onRequestUpgrade(controller: Controller, statusCode: number, headers: IncomingHttpHeaders, socket: Duplex): void {
    this.#handler.onRequestUpgrade?.(controller, statusCode, headers, socket);
  }

  onResponseStart(controller: Controller, statusCode: number, headers: IncomingHttpHeaders, message?: string): void {
    this.#handler.onResponseStart?.(controller, statusCode, headers, message);
  }

  onResponseData(controller: Controller, chunk: Buffer): void {
    this.#handler.onResponseData?.(controller, chunk);
  }

  onResponseEnd(controller: Controller, trailers: IncomingHttpHeaders): void {
    this.#handler.onResponseEnd?.(controller, trailers);
  }

  onResponseError(controller: Controller, error: Error): void {
    this.#handler.onResponseError?.(controller, error);
  }

  // The older API (undici 6): translated. An error may come before any connect: it gets a controller too.

  onConnect(abort: (reason?: Error) => void, context?: unknown): void {
    this.#controller = new OlderApiController(abort);
    this.#handler.onRequestStart?.(this.#controller, context);
  }

  onUpgrade(statusCode: number, rawHeaders: Buffer[] | string[] | null, socket: Duplex): void {
    this.#handler.onRequestUpgrade?.(this.#older(), statusCode, headersOf(rawHeaders), socket);
  }

  onHeaders(statusCode: number, rawHeaders: Buffer[], resume: () => void, statusText: string): boolean {
    const controller = this.#older();
    controller.resumeWith = resume;
    this.#handler.onResponseStart?.(controller, statusCode, headersOf(rawHeaders), statusText);
    return !controller.paused;
  }

  onData(chunk: Buffer): boolean {
    const controller = this.#older();
    this.#handler.onResponseData?.(controller, chunk);
    return !controller.paused;
  }

  onComplete(rawTrailers: string[] | null): void {
    this.#handler.onResponseEnd?.(this.#older(), headersOf(rawTrailers));
  }

  onError(error: Error): void {
    this.#handler.onResponseError?.(this.#older(), error);
  }

  #older(): OlderApiController {
    this.#controller ??= new OlderApiController(() => {});
    return this.#controller;
  }
}
