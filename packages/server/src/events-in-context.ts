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

/**
 * Node's http server's own 'end' listener (`clearIncoming`, once learned): Node adds it to every request whose
 * response finished before the request's body was read to its end — every GET whose handler did not read it.
 */
let nodeEndListener: unknown;

/**
 * Whether `event` on the request `req` needs the request's context: a continuation event, and someone other than
 * Node itself listens. A GET's 'end' comes after its response finished, with only Node's `clearIncoming` (which
 * forgets the request) listening: entering the context for it cost an `als.run` per request for nobody (on Node
 * 24 a new AsyncContextFrame, a Map, each time).
 */
export function needsRequestContext(req: EventEmitter, event: unknown): boolean {
  if (!isRequestContinuation(event)) return false;
  const count = req.listenerCount(event as string | symbol);
  if (count !== 1 || event !== 'end') return count > 0;
  if (nodeEndListener !== undefined) return req.listenerCount('end', nodeEndListener as () => void) === 0;
  // Not learned yet: is this one listener Node's? (`name` is a slow read: only until learned.)
  const only = req.listeners('end')[0];
  if (typeof only === 'function' && only.name === 'clearIncoming') {
    nodeEndListener = only;
    return false;
  }
  return true;
}

/** Whether `event` on the response `res` needs the request's context: a continuation event, and someone listens. */
export function needsResponseContext(res: EventEmitter, event: unknown): boolean {
  return isResponseContinuation(event) && res.listenerCount(event as string | symbol) > 0;
}

/** @internal */
export function emitInContext(
  emitter: EventEmitter,
  state: RequestState,
  needsContext: (emitter: EventEmitter, event: unknown) => boolean,
): void {
  const emit = emitter.emit;
  emitter.emit = function emitInRequestContext(this: EventEmitter, ...args: Parameters<EventEmitter['emit']>) {
    if (!needsContext(this, args[0])) return Reflect.apply(emit, this, args) as boolean;
    // The state's current context: a router may have narrowed it since.
    return state.context.run(Reflect.apply, emit, this, args) as boolean;
  };
}
