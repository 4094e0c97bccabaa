/**
 * The module's interceptor, around every HTTP route: it runs the route — its pipes, the interceptors inside it and
 * the handler — in the request's context, narrowed to the route's `@Deadline()` limits (or long-lived), and hands an
 * error that is about a deadline to Nest's exception layer as the typed error itself: a `DeadlineExceededError` or
 * `CancelledError` that `fetch` or a driver wrapped (`TypeError: fetch failed`) is unwrapped, so that the exception
 * filters — the module's, or the app's own — see what it is. Around a microservice's message handler, it runs the
 * handler in the message's own context (message-handling.ts).
 */
import { ErrorCode, findDeadlineError } from '@deadline/core';
import { findErrorWithCode } from '@deadline/core/internal';
import type { RouteLimits } from '@deadline/server';
import { type RequestState, type ResolvedLimits, resolveLimits } from '@deadline/server/internal';
import { type CallHandler, type ExecutionContext, Inject, Injectable, type NestInterceptor } from '@nestjs/common';
import { Reflector } from '@nestjs/core';
import { catchError, Observable, of, throwError } from 'rxjs';
import { DEADLINE_LIMITS } from './deadline.decorator.js';
import { MessageHandling } from './message-handling.js';
import { DEADLINE_SETUP, type ModuleSetup, type NestRequest } from './options.js';
import { stateOf } from './request-state.js';

/**
 * Runs each HTTP route inside its request's deadline context, and each microservice's message handler inside the
 * budget its message carries. Provided by {@link DeadlineModule} for the whole app; use it by hand only without the
 * module.
 *
 * @example
 * ```ts
 * // What DeadlineModule.forRoot() provides:
 * providers: [{ provide: APP_INTERCEPTOR, useClass: DeadlineInterceptor }];
 * ```
 */
@Injectable()
export class DeadlineInterceptor implements NestInterceptor {
  /** Each handler's or controller's limits, resolved over the module's once. */
  readonly #limits = new WeakMap<object, ResolvedLimits>();
  /** Each route's `@Deadline()` (`null`: none), by controller and handler: read once, not on every request. */
  readonly #routeLimits = new WeakMap<object, WeakMap<object, RouteLimits | false | null>>();
  /** How a microservice's messages are handled: made on the first one (an HTTP-only app makes none). */
  #messages: MessageHandling | undefined;

  constructor(
    @Inject(Reflector) private readonly reflector: Reflector,
    @Inject(DEADLINE_SETUP) private readonly setup: ModuleSetup,
  ) {}

  intercept(context: ExecutionContext, next: CallHandler): Observable<unknown> {
    const type = context.getType();
    if (type === 'rpc') {
      this.#messages ??= new MessageHandling(this.setup, this.reflector);
      return this.#messages.handle(context, next, this.#routeLimitsOf(context));
    }
    if (type !== 'http') return next.handle();
    // The request itself: switchToHttp() makes three functions on every call.
    const request = context.getArgByIndex<NestRequest>(0);
    const state = stateOf(request);
    if (state === undefined) return next.handle();
    const limits = this.#routeLimitsOf(context);
    if (limits === false) state.makeLongLived();
    else if (limits !== undefined && !state.longLived && !this.#narrow(state, request, context, limits)) {
      // Refused (its budget is below the route's minimum) and answered 504: the route does not run, and Nest's own
      // answer of nothing goes nowhere.
      return of(undefined);
    }
    const handled = () =>
      next.handle().pipe(catchError((error: unknown) => throwError(() => typedError(state, error))));
    // Without limits of its own the route already runs in the request's context (the platform's mount runs the whole
    // chain in it): only a narrowed or long-lived one is entered here.
    if (limits === undefined) return handled();
    return new Observable((subscriber) => state.context.run(() => handled().subscribe(subscriber)));
  }

  /** The route's `@Deadline()` limits: its handler's, else its controller's. */
  #routeLimitsOf(context: ExecutionContext): RouteLimits | false | undefined {
    const controller = context.getClass();
    const handler = context.getHandler();
    let byHandler = this.#routeLimits.get(controller);
    if (byHandler === undefined) {
      byHandler = new WeakMap();
      this.#routeLimits.set(controller, byHandler);
    }
    let limits = byHandler.get(handler);
    if (limits === undefined) {
      limits =
        this.reflector.getAllAndOverride<RouteLimits | false | undefined>(DEADLINE_LIMITS, [handler, controller]) ??
        null;
      byHandler.set(handler, limits);
    }
    return limits ?? undefined;
  }

  /** Narrows the request's deadline to the route's limits; false when it was refused (answered already). */
  #narrow(state: RequestState, request: NestRequest, context: ExecutionContext, limits: RouteLimits): boolean {
    const handler = context.getHandler();
    const key = this.reflector.get(DEADLINE_LIMITS, handler) === undefined ? context.getClass() : handler;
    let resolved = this.#limits.get(key);
    if (resolved === undefined) {
      resolved = resolveLimits(limits, this.setup.resolved.limits, '@Deadline() ');
      this.#limits.set(key, resolved);
    }
    const budget = this.setup.budgetOf(request, request.headers, resolved, state.budget.trusted);
    return state.narrow(budget, resolved.minMs);
  }
}

/** The error Nest's exception layer gets: the deadline error or cancellation itself, or a breaker's refusal unwrapped. */
function typedError(state: RequestState, error: unknown): unknown {
  const typed = findDeadlineError(error);
  if (typed !== undefined) {
    state.recordError(typed);
    return typed;
  }
  return findErrorWithCode(error, ErrorCode.CircuitOpen) ?? error;
}
