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

/** Request events a handler or body parser continues from. */
export const REQUEST_EVENTS: ReadonlySet<string | symbol> = new Set(['data', 'end', 'readable', 'error']);
/**
 * Response events a streaming handler continues from. Not 'finish' or 'close': they come for every request,
 * mostly with only bookkeeping listeners, and entering the context for them was most of this module's cost.
 */
export const RESPONSE_EVENTS: ReadonlySet<string | symbol> = new Set(['drain', 'error']);

/** Whether `event` on `emitter` needs the request's context: one of `events`, and someone listens. */
export function needsContext(emitter: EventEmitter, event: unknown, events: ReadonlySet<string | symbol>): boolean {
  return events.has(event as string) && emitter.listenerCount(event as string) > 0;
}

/** @internal */
export function emitInContext(emitter: EventEmitter, state: RequestState, events: ReadonlySet<string | symbol>): void {
  const emit = emitter.emit;
  emitter.emit = function emitInRequestContext(this: EventEmitter, ...args: Parameters<EventEmitter['emit']>) {
    if (!needsContext(this, args[0], events)) return Reflect.apply(emit, this, args) as boolean;
    // The state's current context: a router may have narrowed it since.
    return state.context.run(Reflect.apply, emit, this, args) as boolean;
  };
}
