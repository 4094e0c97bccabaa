/**
 * The handler of undici's newer API (`onRequestStart`, `onResponseStart`, …) that a dispatch under a deadline
 * runs through (see call-exchange.ts for what it does): what interceptors speak, and fetch's own handler from
 * undici 8 (Node 26) on.
 */

import type { OutgoingCall } from '@deadline/core/internal';
import { DEADLINE_EXCEEDED_BY_HEADER } from '@deadline/core/wire';
import type { Dispatcher } from 'undici';
import { CallExchange } from './call-exchange.js';

type Handler = Dispatcher.DispatchHandler;
type Controller = Dispatcher.DispatchController;
type Headers = Parameters<NonNullable<Handler['onResponseStart']>>[2];

/** Forwards undici's events to the caller's handler, and stops the exchange when the call must stop. @internal */
export class DeadlineHandler extends CallExchange implements Handler {
  readonly #handler: Handler;
  #controller: Controller | undefined;

  constructor(handler: Handler, call: OutgoingCall, downstreamErrors: boolean) {
    super(call, downstreamErrors);
    this.#handler = handler;
  }

  protected abortExchange(error: Error): boolean {
    this.#controller?.abort(error);
    return this.#controller !== undefined;
  }

  protected failCaller(error: Error): void {
    this.#handler.onResponseError?.(this.#controller ?? (null as unknown as Controller), error);
  }

  onRequestStart(controller: Controller, context: unknown): void {
    this.#controller = controller;
    if (this.started((error) => controller.abort(error))) this.#handler.onRequestStart?.(controller, context);
  }

  onRequestUpgrade(controller: Controller, statusCode: number, headers: Headers, socket: never): void {
    this.call.end(undefined, statusCode);
    this.#handler.onRequestUpgrade?.(controller, statusCode, headers, socket);
  }

  onResponseStart(controller: Controller, statusCode: number, headers: Headers, statusMessage?: string): void {
    if (this.done || this.holdsBack(statusCode, headers[DEADLINE_EXCEEDED_BY_HEADER])) return;
    this.#handler.onResponseStart?.(controller, statusCode, headers, statusMessage);
  }

  onResponseData(controller: Controller, chunk: Buffer): void {
    if (this.done || this.downstream !== undefined) return;
    this.#handler.onResponseData?.(controller, chunk);
  }

  onResponseEnd(controller: Controller, trailers: Headers): void {
    this.ended(() => this.#handler.onResponseEnd?.(controller, trailers));
  }

  onResponseError(_controller: Controller, error: Error): void {
    this.failed(error);
  }
}
