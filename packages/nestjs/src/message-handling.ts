/**
 * A microservice's message handler, run by the module's interceptor in a context of its own: from the budget the
 * message carries (rpc-call.ts reads it off each transport), or the module's `defaultMs`, narrowed by the handler's
 * `@Deadline()`. At that deadline, or when a gRPC caller cancels, the handler's answer is the typed error and the
 * work it started stops. An event's handler answers nobody: it runs without a deadline unless its message carries one
 * (it keeps the trace), as a job does.
 */
import { ErrorCode, findDeadlineError } from '@deadline/core';
import { findErrorWithCode, MAX_TIMER_DELAY_MS, type ResolvedIncomingOptions } from '@deadline/core/internal';
import type { RouteLimits } from '@deadline/server';
import { resolveLimits } from '@deadline/server/internal';
import type { CallHandler, ExecutionContext } from '@nestjs/common';
import type { Reflector } from '@nestjs/core';
import { Observable, throwError } from 'rxjs';
import type { ModuleSetup } from './options.js';
import { endRpcCall, startRpcCall } from './rpc-call.js';

/** Where `@EventPattern()` and `@MessagePattern()` say which they are (both majors). */
const PATTERN_HANDLER_METADATA = 'microservices:handler_type';
const EVENT_HANDLER = 2;

type MessageOptions = ResolvedIncomingOptions<ExecutionContext>;

/** @internal */
export class MessageHandling {
  readonly #setup: ModuleSetup;
  readonly #reflector: Reflector;
  /** An event's, or a handler's with `@Deadline(false)`: no deadline unless the message carries one. */
  readonly #unbounded: MessageOptions;
  /** The options of handlers with `@Deadline()` limits, by those limits. */
  readonly #narrowed = new WeakMap<RouteLimits, MessageOptions>();
  /** Whether each handler is an event's (`@EventPattern()`). */
  readonly #events = new WeakMap<object, boolean>();

  constructor(setup: ModuleSetup, reflector: Reflector) {
    this.#setup = setup;
    this.#reflector = reflector;
    this.#unbounded = { ...setup.messages, defaultMs: MAX_TIMER_DELAY_MS, maxMs: MAX_TIMER_DELAY_MS };
  }

  /** Runs the handler `next` leads to in the message's context; `limits`, its `@Deadline()`. */
  handle(context: ExecutionContext, next: CallHandler, limits: RouteLimits | false | undefined): Observable<unknown> {
    const incoming = startRpcCall(context, this.#optionsOf(context, limits), this.#setup.messageParser);
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

  #optionsOf(context: ExecutionContext, limits: RouteLimits | false | undefined): MessageOptions {
    if (limits === false) return this.#unbounded;
    if (limits === undefined) return this.#isEvent(context.getHandler()) ? this.#unbounded : this.#setup.messages;
    let options = this.#narrowed.get(limits);
    if (options === undefined) {
      const resolved = resolveLimits(limits, this.#setup.resolved.limits, '@Deadline() ');
      options = {
        ...this.#setup.messages,
        defaultMs: resolved.defaultMs,
        maxMs: resolved.maxMs,
        minMs: resolved.minMs,
      };
      this.#narrowed.set(limits, options);
    }
    return options;
  }

  #isEvent(handler: object): boolean {
    let event = this.#events.get(handler);
    if (event === undefined) {
      event = this.#reflector.get(PATTERN_HANDLER_METADATA, handler as never) === EVENT_HANDLER;
      this.#events.set(handler, event);
    }
    return event;
  }
}
