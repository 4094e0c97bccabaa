/**
 * The module's interceptor, around every HTTP route: it runs the route — its pipes, the interceptors inside it and
 * the handler — in the request's context, narrowed to the route's `@Deadline()` limits (or long-lived), and hands an
 * error that is about a deadline to Nest's exception layer as the typed error itself: a `DeadlineExceededError` or
 * `CancelledError` that `fetch` or a driver wrapped (`TypeError: fetch failed`) is unwrapped, so that the exception
 * filters — the module's, or the app's own — see what it is.
 */
import { ErrorCode, findDeadlineError } from '@deadline/core';
import { findErrorWithCode, MAX_TIMER_DELAY_MS, type ResolvedIncomingOptions } from '@deadline/core/internal';
import type { RouteLimits } from '@deadline/server';
import { type RequestState, type ResolvedLimits, resolveLimits } from '@deadline/server/internal';
import { type CallHandler, type ExecutionContext, Inject, Injectable, type NestInterceptor } from '@nestjs/common';
import { Reflector } from '@nestjs/core';
import { catchError, Observable, of, throwError } from 'rxjs';
import { DEADLINE_LIMITS } from './deadline.decorator.js';
import { DEADLINE_SETUP, type ModuleSetup, type NestRequest } from './options.js';
import { stateOf } from './request-state.js';
import { endRpcCall, startRpcCall } from './rpc-call.js';

/** Where `@EventPattern()` and `@MessagePattern()` say which they are (both majors): an event is answered nothing. */
const PATTERN_HANDLER_METADATA = 'microservices:handler_type';
const EVENT_HANDLER = 2;

/**
 * Runs each HTTP route inside its request's deadline context. Provided by {@link DeadlineModule} for the whole app;
 * use it by hand only without the module.
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
  /** Each message handler's options, resolved over the module's once. */
  readonly #messageOptions = new WeakMap<object, ResolvedIncomingOptions<ExecutionContext>>();

  constructor(
    @Inject(Reflector) private readonly reflector: Reflector,
    @Inject(DEADLINE_SETUP) private readonly setup: ModuleSetup,
  ) {}

  intercept(context: ExecutionContext, next: CallHandler): Observable<unknown> {
    const type = context.getType();
    if (type === 'rpc') return this.#message(context, next);
    if (type !== 'http') return next.handle();
    const request = context.switchToHttp().getRequest<NestRequest>();
    const state = stateOf(request);
    if (state === undefined) return next.handle();
    const limits = this.reflector.getAllAndOverride<RouteLimits | false | undefined>(DEADLINE_LIMITS, [
      context.getHandler(),
      context.getClass(),
    ]);
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

  /**
   * A microservice's message: its handler runs in a context of its own, from the budget its caller sent (or the
   * module's `defaultMs`); at that deadline, or when a gRPC caller cancels, the handler's answer is the typed error
   * and the work it started stops. An event's handler answers nobody: it runs without a deadline unless its message
   * carries one (it keeps the trace), as a job does.
   */
  #message(context: ExecutionContext, next: CallHandler): Observable<unknown> {
    const incoming = startRpcCall(context, this.#messageOptionsOf(context), this.setup.messageParser);
    const refusal = incoming.refusal;
    if (refusal !== undefined) {
      endRpcCall(incoming, context, refusal);
      return throwError(() => refusal);
    }
    return new Observable((subscriber) => {
      const offStop = incoming.onStop((reason) => {
        endRpcCall(incoming, context, reason);
        subscriber.error(reason);
      });
      const subscription = incoming.context.run(() =>
        next.handle().subscribe({
          next: (value) => subscriber.next(value),
          error: (error: unknown) => {
            const typed = findDeadlineError(error) ?? findErrorWithCode(error, ErrorCode.CircuitOpen) ?? error;
            endRpcCall(incoming, context, typed);
            subscriber.error(typed);
          },
          complete: () => {
            endRpcCall(incoming, context);
            subscriber.complete();
          },
        }),
      );
      return () => {
        offStop();
        subscription.unsubscribe();
      };
    });
  }

  /** The module's options for messages, an event's without a deadline of its own, a handler's `@Deadline()` over them. */
  #messageOptionsOf(context: ExecutionContext): ResolvedIncomingOptions<ExecutionContext> {
    const handler = context.getHandler();
    let options = this.#messageOptions.get(handler);
    if (options !== undefined) return options;
    const base = this.setup.messages;
    const limits = this.reflector.getAllAndOverride<RouteLimits | false | undefined>(DEADLINE_LIMITS, [
      handler,
      context.getClass(),
    ]);
    if (
      limits === false ||
      (limits === undefined && this.reflector.get(PATTERN_HANDLER_METADATA, handler) === EVENT_HANDLER)
    ) {
      options = { ...base, defaultMs: MAX_TIMER_DELAY_MS, maxMs: MAX_TIMER_DELAY_MS };
    } else if (limits !== undefined) {
      const resolved = resolveLimits(limits, this.setup.resolved.limits, '@Deadline() ');
      options = { ...base, defaultMs: resolved.defaultMs, maxMs: resolved.maxMs, minMs: resolved.minMs };
    } else {
      options = base;
    }
    this.#messageOptions.set(handler, options);
    return options;
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
