/**
 * A request's stream events ('data', 'end', 'drain', …) come from the socket, whose async context was fixed
 * when the connection was accepted — not the request's. Middleware that continues from such an event (a body
 * parser calling `next()` on 'end') would lose the request's context. Emitting those events inside the
 * context keeps every listener in it, whoever registered it.
 *
 * Only the events that code continues from, and only when someone listens: entering a context costs more
 * than a plain emit on Node 20 (counted with callgrind: most of the express middleware's cost before this).
 */
import type { EventEmitter } from 'node:events';
import type { RequestState } from './request-deadline.js';

/** Whether `event` is one a handler or body parser continues from, on a request. */
export function isRequestContinuation(event: unknown): boolean {
  // Compared one by one rather than looked up in a Set: every event of every request passes here.
  return event === 'data' || event === 'end' || event === 'readable' || event === 'error';
}

/**
 * Whether `event` is one a streaming handler continues from, on a response. Not 'finish' or 'close': they come
 * for every request, mostly with only bookkeeping listeners, and entering the context for them was most of this
 * module's cost.
 */
export function isResponseContinuation(event: unknown): boolean {
  return event === 'drain' || event === 'error';
}

/** Whether `event` on `emitter` needs the request's context: a continuation event, and someone listens. */
export function needsContext(
  emitter: EventEmitter,
  event: unknown,
  isContinuation: (event: unknown) => boolean,
): boolean {
  return isContinuation(event) && emitter.listenerCount(event as string | symbol) > 0;
}

/** @internal */
export function emitInContext(
  emitter: EventEmitter,
  state: RequestState,
  isContinuation: (event: unknown) => boolean,
): void {
  const emit = emitter.emit;
  emitter.emit = function emitInRequestContext(this: EventEmitter, ...args: Parameters<EventEmitter['emit']>) {
    if (!needsContext(this, args[0], isContinuation)) return Reflect.apply(emit, this, args) as boolean;
    // The state's current context: a router may have narrowed it since.
    return state.context.run(Reflect.apply, emit, this, args) as boolean;
  };
}
