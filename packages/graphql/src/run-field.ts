/**
 * One resolver's run under the request's deadline: inside its context (entered here when the server runs outside
 * it), not started when the time is gone or too short for the field, and raced against the context's stop, so that a
 * field still running at the deadline is answered at once as cut — its work (a query, a call) hears of the same stop
 * and is cancelled — while the fields already resolved keep their data. A deadline error the resolver itself ends
 * with (a query refused for lack of time, a downstream's 504) becomes the same field error.
 */
import {
  CancelledError,
  createContext,
  currentContext,
  type DeadlineContext,
  DeadlineExceededError,
  findDeadlineError,
  type OwnedContext,
  type StopReason,
} from '@deadline/core';
import { AdmissionRoute, monotonicNow } from '@deadline/core/internal';
import { requestStateOf } from '@deadline/server/internal';
import type { GraphQLFieldResolver, GraphQLResolveInfo } from 'graphql';
import { type FieldStop, fieldError } from './field-error.js';
import type { ResolvedFieldLimits } from './field-limits.js';
import { currentSlot } from './request-slots.js';

/** A resolver made by {@link underDeadline}, and the one it wraps. @internal */
export const WRAPPED = Symbol.for('deadline.graphql.wrapped');

/**
 * `resolve` run under the request's deadline (see the module's header).
 * @internal
 */
export function underDeadline(
  resolve: GraphQLFieldResolver<unknown, unknown>,
  limits: ResolvedFieldLimits,
  coordinate: string,
): GraphQLFieldResolver<unknown, unknown> {
  // The field's typical time, learned from its resolver's asynchronous runs (a synchronous one takes no time worth
  // judging), made on the first: most fields never need it.
  let typical: AdmissionRoute | undefined;
  const wrapped = function resolveUnderDeadline(
    this: unknown,
    source: unknown,
    args: Record<string, unknown>,
    contextValue: unknown,
    info: GraphQLResolveInfo,
  ): unknown {
    let context: DeadlineContext | undefined = currentContext();
    let outside = false;
    if (context === undefined) {
      context = currentSlot()?.state?.context;
      // No deadline anywhere: the resolver runs as it would without the plugin.
      if (context === undefined) return resolve.call(this, source, args, contextValue, info);
      outside = true;
    }
    const stopped = context.stopReason;
    if (stopped !== undefined) throw stopError(context, info, stopped);
    let probe = false;
    if (limits.minMs > 0) {
      const leftMs = context.remainingMs();
      if (leftMs < limits.minMs) throw notStarted(context, info, leftMs, limits.minMs);
    } else if (typical !== undefined) {
      const leftMs = context.remainingMs();
      const verdict = typical.judgeFloor(leftMs, 0);
      if (verdict?.admitted === false) throw notStarted(context, info, leftMs, Math.ceil(verdict.neededMs));
      probe = verdict !== undefined;
    }
    const startedAt = monotonicNow();
    const own = Number.isFinite(limits.maxMs)
      ? runIn(context, outside, createContext, { deadline: limits.maxMs })
      : undefined;
    const runsIn = own ?? context;
    let result: unknown;
    try {
      result =
        outside || own !== undefined
          ? (runsIn as OwnedContext).run(() => resolve.call(this, source, args, contextValue, info))
          : resolve.call(this, source, args, contextValue, info);
    } catch (error) {
      own?.end();
      throw failure(runsIn, info, error);
    }
    if (!isThenable(result)) {
      own?.end();
      return result;
    }
    typical ??= new AdmissionRoute(coordinate, TYPICAL_QUANTILE);
    learn(typical, result, startedAt, probe);
    return raced(result, runsIn, info, own);
  };
  Object.defineProperty(wrapped, WRAPPED, { value: resolve });
  return wrapped;
}

/** The percentile of a field's time its estimate follows (its fastest typical time is the 10th, core's admission). */
const TYPICAL_QUANTILE = 0.9;

/**
 * A field not started: less is left than it needs (its `minMs`, or its fastest typical time). Reported as cut, and
 * its request logged as a deadline's.
 */
function notStarted(context: DeadlineContext, info: GraphQLResolveInfo, leftMs: number, needsMs: number) {
  const hop = context.hop ?? 'service';
  noteDeadline(context, hop);
  return fieldError(info, { kind: 'not-started', exceededBy: hop, leftMs, needsMs });
}

/**
 * Teaches the field its time from `result`, the resolver's own promise: what it took to resolve, or to end cut or
 * cancelled (it took at least that). Other errors say nothing of its time (core's admission.ts).
 */
function learn(typical: AdmissionRoute, result: PromiseLike<unknown>, startedAt: number, probe: boolean): void {
  typical.enter();
  result.then(
    () => typical.leave(monotonicNow() - startedAt, true, probe),
    (error: unknown) => typical.leave(monotonicNow() - startedAt, findDeadlineError(error) !== undefined, probe),
  );
}

/**
 * A subscription field's `subscribe` under the request's context: its setup, and each step of the stream it returns
 * (an async generator's body runs on each `next()`, driven by the server), inside the context — entered here where
 * the server runs outside it. Never raced nor cut: a subscription is long-lived (the plugins lift its request's
 * default budget); a caller's budget still bounds the calls its setup makes.
 * @internal
 */
export function subscribeUnderDeadline(
  subscribe: GraphQLFieldResolver<unknown, unknown>,
): GraphQLFieldResolver<unknown, unknown> {
  const wrapped = function subscribeInContext(
    this: unknown,
    source: unknown,
    args: Record<string, unknown>,
    contextValue: unknown,
    info: GraphQLResolveInfo,
  ): unknown {
    if (currentContext() !== undefined) return subscribe.call(this, source, args, contextValue, info);
    const context = currentSlot()?.state?.context as OwnedContext | undefined;
    if (context === undefined) return subscribe.call(this, source, args, contextValue, info);
    const stream = context.run(() => subscribe.call(this, source, args, contextValue, info));
    return isThenable(stream) ? Promise.resolve(stream).then((s) => steppedIn(context, s)) : steppedIn(context, stream);
  };
  Object.defineProperty(wrapped, WRAPPED, { value: subscribe });
  return wrapped;
}

/** `stream`, each of its steps taken inside `context` (anything else, an error result, as it is). */
function steppedIn(context: OwnedContext, stream: unknown): unknown {
  const iterable = stream as AsyncIterable<unknown> | null;
  if (typeof iterable?.[Symbol.asyncIterator] !== 'function') return stream;
  const iterator = iterable[Symbol.asyncIterator]();
  const stepped: AsyncIterableIterator<unknown> = {
    next: (...args: [] | [unknown]) => context.run(() => iterator.next(...args)),
    return: (value?: unknown) =>
      context.run(() => iterator.return?.(value) ?? Promise.resolve({ done: true as const, value: undefined })),
    throw: (error?: unknown) => context.run(() => iterator.throw?.(error) ?? Promise.reject(error)),
    [Symbol.asyncIterator]: () => stepped,
  };
  return stepped;
}

function runIn<A extends unknown[], R>(
  context: DeadlineContext,
  outside: boolean,
  fn: (...args: A) => R,
  ...args: A
): R {
  return outside ? (context as OwnedContext).run(fn, ...args) : fn(...args);
}

/** The field's value, or its field error as soon as `context` stops first. */
function raced(
  result: PromiseLike<unknown>,
  context: DeadlineContext,
  info: GraphQLResolveInfo,
  own: OwnedContext | undefined,
): Promise<unknown> {
  return new Promise((resolve, reject) => {
    let settled = false;
    const off = context.onStop((reason) => {
      if (settled) return;
      settled = true;
      reject(stopError(context, info, reason));
      own?.end();
    });
    result.then(
      (value) => {
        if (settled) return;
        settled = true;
        off();
        own?.end();
        resolve(value);
      },
      (error: unknown) => {
        if (settled) return;
        settled = true;
        off();
        own?.end();
        reject(failure(context, info, error));
      },
    );
  });
}

/** The field error for a context that stopped: cut at a deadline, or its request cancelled. */
function stopError(context: DeadlineContext, info: GraphQLResolveInfo, reason: StopReason) {
  return fieldError(info, stopOf(context, reason));
}

function stopOf(context: DeadlineContext, reason: StopReason): FieldStop {
  if (reason instanceof DeadlineExceededError) {
    const hop = reason.hop ?? context.hop ?? 'service';
    noteDeadline(context, hop, reason);
    return { kind: 'cut', exceededBy: hop };
  }
  return { kind: 'cancelled' };
}

/** What the resolver failed with: a deadline error or a cancellation becomes the field's error, others pass. */
function failure(context: DeadlineContext, info: GraphQLResolveInfo, error: unknown): unknown {
  const typed = findDeadlineError(error);
  if (typed === undefined) return error;
  if (typed instanceof CancelledError) return fieldError(info, { kind: 'cancelled' });
  return stopError(context, info, typed);
}

/** The request is answered with a deadline's error: its hop logs it so, and names whose deadline fired. */
function noteDeadline(context: DeadlineContext, hop: string, error?: DeadlineExceededError): void {
  const state = requestStateOf(context);
  if (state === undefined) return;
  state.outcome ??= 'deadline_exceeded';
  state.exceededBy ??= error?.hop ?? hop;
}

function isThenable(value: unknown): value is PromiseLike<unknown> {
  return typeof (value as PromiseLike<unknown> | null)?.then === 'function';
}
