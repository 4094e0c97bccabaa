/**
 * A request's stream events ('data', 'end', 'drain', …) come from the socket, whose async context was fixed
 * when the connection was accepted — not the request's. Middleware that continues from such an event (a body
 * parser calling `next()` on 'end') would lose the request's context. Emitting the request's and response's
 * events inside the context keeps every listener in it, whoever registered it.
 */
import type { EventEmitter } from 'node:events';
import type { RequestState } from './request-deadline.js';

/** @internal */
export function emitInContext(emitter: EventEmitter, state: RequestState): void {
  const emit = emitter.emit;
  emitter.emit = function emitInRequestContext(this: EventEmitter, ...args: Parameters<EventEmitter['emit']>) {
    // The state's current context: a router may have narrowed it since.
    return state.context.run(Reflect.apply, emit, this, args) as boolean;
  };
}
