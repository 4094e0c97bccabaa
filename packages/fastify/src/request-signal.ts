/**
 * fastify's own deadline (5.8 and later) made one with the request's: `request.signal` and `handlerTimeout`.
 *
 * `request.signal` is fastify's per-request AbortSignal: it aborts when the client leaves or the route's handler
 * timeout passes. Under the plugin it aborts when the request's deadline passes (its reason the context's own
 * `DeadlineExceededError`) and when the client leaves (the `CancelledError`), so work given `request.signal` stops
 * with the rest; as fastify's, it never aborts once the response is over. It is made when first read, as fastify's
 * is: a route that never reads it pays nothing.
 *
 * `handlerTimeout` arms fastify's timer before any `onRequest` hook runs. The route's budget is capped by it
 * (route-plans.ts), so the deadline fires with it; and since fastify leaves a reply alone that a `request.signal`
 * listener sent, the plugin listens on fastify's own signal for that route and expires the request there: the answer
 * is the plugin's 504, never fastify's `FST_ERR_HANDLER_TIMEOUT` (503).
 */
import { CancelledError, DeadlineExceededError } from '@deadline/core';
import { markCausedBy, type Scope } from '@deadline/core/internal';
import type { RequestState } from '@deadline/server/internal';
import type { FastifyInstance, FastifyRequest } from 'fastify';

const HANDLER_TIMEOUT = 'FST_ERR_HANDLER_TIMEOUT';

/**
 * `request.signal` and fastify's handler timeout, for one registration of the plugin.
 *
 * @example
 * ```ts
 * const signals = new RequestSignals();
 * signals.install(fastify); // request.signal aborts with the request's deadline
 * if (plan.handlerTimeoutMs > 0) signals.followHandlerTimeout(request, state);
 * ```
 */
export class RequestSignals {
  /** fastify's own `request.signal` getter, above the plugin's (the fastify copy of this registration's). */
  #fastifys: ((this: FastifyRequest) => AbortSignal) | undefined;
  /** The signal handed out per request, made at its first read. */
  readonly #handedOut = new WeakMap<RequestState, AbortController>();
  /** The plugin's `request.signal` getter. */
  readonly #getter: (this: FastifyRequest) => AbortSignal;

  constructor() {
    const signals = this;
    this.#getter = function signal(this: FastifyRequest) {
      return signals.#signalOf(this);
    };
  }

  /** Makes `request.signal` the request's (fastify 5.8 and later; before, there is no `request.signal` to make). */
  install(fastify: FastifyInstance): void {
    if (!fastify.hasRequestDecorator('signal')) return;
    try {
      fastify.decorateRequest('signal', { getter: this.#getter } as never);
    } catch {
      // The app (or a plugin before this one) gave the request a `signal` of its own: it is left as it is.
    }
  }

  /**
   * Has the request expire when fastify's handler timeout for it passes, before fastify answers: fastify's signal
   * for the route exists already (made with the timer), and listeners run as it aborts.
   */
  followHandlerTimeout(request: FastifyRequest, state: RequestState): void {
    this.#fastifySignal(request).addEventListener('abort', new HandlerTimeout(state), { once: true });
  }

  #signalOf(request: FastifyRequest): AbortSignal {
    const state = request.deadline as RequestState | null;
    // Read before the plugin's hook ran (a hook of the app's registered before it): fastify's own.
    if (state === null) return this.#fastifySignal(request);
    let controller = this.#handedOut.get(state);
    if (controller === undefined) {
      controller = new AbortController();
      this.#handedOut.set(state, controller);
      abortWhileOpen(state, controller);
    }
    return controller.signal;
  }

  #fastifySignal(request: FastifyRequest): AbortSignal {
    this.#fastifys ??= fastifysGetter(request, this.#getter);
    return this.#fastifys.call(request);
  }
}

/**
 * Aborts `controller` with the reason the request's context stops for, if it stops while the response is open (or
 * had stopped so already): never for a context that ends with its response, nor at a deadline that passes after it.
 * A long-lived route's stream is not cut by a caller's deadline (only its outgoing calls are): nor is its signal.
 */
function abortWhileOpen(state: RequestState, controller: AbortController): void {
  let now = true;
  state.context.onStop((reason) => {
    if (reason instanceof CancelledError && reason.reason === 'context-ended') return;
    if (reason instanceof DeadlineExceededError && state.longLived) return;
    if (now || state.res !== undefined) controller.abort(reason);
  });
  now = false;
}

/** The listener on fastify's signal of a route with a handler timeout. */
class HandlerTimeout {
  readonly #state: RequestState;

  constructor(state: RequestState) {
    this.#state = state;
  }

  handleEvent(event: Event): void {
    const reason = (event.target as AbortSignal).reason as { code?: unknown } | undefined;
    // It also aborts when the client leaves, which the plugin hears from the socket.
    if (reason?.code !== HANDLER_TIMEOUT) return;
    const state = this.#state;
    if (state.res === undefined || state.outcome !== undefined) return;
    const context = state.context as Scope;
    // Inside the context, as at its own expiry: the 504, the calls' stops (a KILL QUERY) see their request.
    context.run(expire, context);
    const stopped = context.stopReason;
    if (stopped !== undefined) markCausedBy(reason, stopped);
  }
}

function expire(context: Scope): void {
  context._expire();
}

/** fastify's `request.signal` getter: the first above the plugin's on the request's prototype chain. */
function fastifysGetter(request: FastifyRequest, ours: unknown): (this: FastifyRequest) => AbortSignal {
  for (let proto = Object.getPrototypeOf(request); proto !== null; proto = Object.getPrototypeOf(proto)) {
    const get = Object.getOwnPropertyDescriptor(proto, 'signal')?.get;
    if (get !== undefined && get !== ours) return get;
  }
  throw new Error('@deadline/fastify: this fastify has no request.signal');
}
