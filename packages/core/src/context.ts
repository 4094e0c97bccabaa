/**
 * The context API: create a context, run code in it, and read the current one from anywhere below.
 */
import { type ContextValue, detachValues, mergeValues } from './context-key.js';
import { Deadline } from './deadline.js';
import { publishStart } from './diagnostics.js';
import { InvalidArgumentError } from './errors.js';
import { activeSpan } from './opentelemetry/active.js';
import { traceOfSpan } from './opentelemetry/span-trace.js';
import { type DeadlineContext, type OwnedContext, Scope } from './scope.js';
import { storage } from './storage.js';
import type { TraceContext } from './trace.js';
import { checkHop, checkObject } from './validate.js';

/**
 * What a new context starts with. Everything not given is inherited from the current context.
 *
 * @example
 * ```ts
 * const init: ContextInit = { deadline: 800, hop: 'orders', trace: traceFrom(req.headers.traceparent), root: true };
 * const ctx = createContext(init);
 * ```
 */
export interface ContextInit {
  /** A budget in ms or a {@link Deadline}; the earlier of it and the parent's wins. Default: the parent's (or none). */
  deadline?: Deadline | number | undefined;
  /**
   * The W3C trace; default: the parent's, or, in a root context, the active OpenTelemetry span's (when
   * `@opentelemetry/api` is installed and a span is active).
   */
  trace?: TraceContext | undefined;
  /** This hop's name (the service; 1–128 visible ASCII characters, as it is sent in headers); default: the parent's. */
  hop?: string | undefined;
  /** Merged over the parent's baggage. At most 64 entries of strings. */
  baggage?: Readonly<Record<string, string>> | undefined;
  /** Merged over the parent's log bindings. */
  bindings?: Readonly<Record<string, unknown>> | undefined;
  /** Values under keys of their own (`key.with(value)`, see {@link createContextKey}), set over the parent's. */
  values?: readonly ContextValue[] | undefined;
  /** An outside cancellation source (the host's request signal): when it aborts, the context is cancelled. */
  signal?: AbortSignal | undefined;
  /**
   * Start a new tree: inherit nothing from the current context. Servers use it per request, so a server that
   * happened to be started inside some context does not make every request its child.
   */
  root?: boolean | undefined;
}

const MAX_BAGGAGE_ENTRIES = 64;

function toDeadline(value: Deadline | number | undefined): Deadline {
  if (value === undefined) return Deadline.NONE;
  if (typeof value === 'number') return Deadline.fromNow(value);
  if (value instanceof Deadline) return value;
  throw new InvalidArgumentError('deadline', 'a number of milliseconds or a Deadline', value);
}

function checkBaggage(value: unknown): Readonly<Record<string, string>> | undefined {
  const baggage = checkObject('baggage', value);
  if (baggage === undefined) return undefined;
  const keys = Object.keys(baggage);
  if (keys.length > MAX_BAGGAGE_ENTRIES) {
    throw new InvalidArgumentError('baggage', `at most ${MAX_BAGGAGE_ENTRIES} entries`, value);
  }
  for (const key of keys) {
    if (typeof baggage[key] !== 'string') throw new InvalidArgumentError(`baggage.${key}`, 'a string', baggage[key]);
  }
  return baggage as Readonly<Record<string, string>>;
}

function merge<T>(parent: Readonly<Record<string, T>> | undefined, own: Readonly<Record<string, T>> | undefined) {
  if (own === undefined) return parent;
  if (parent === undefined || Object.keys(parent).length === 0) return Object.freeze({ ...own });
  return Object.freeze({ ...parent, ...own });
}

function mergeBaggage(
  parent: Readonly<Record<string, string>> | undefined,
  own: Readonly<Record<string, string>> | undefined,
) {
  const merged = merge(parent, own);
  // The limit holds for what the context carries, not per call: nesting must not grow it without bound.
  if (merged !== undefined && merged !== parent && Object.keys(merged).length > MAX_BAGGAGE_ENTRIES) {
    throw new InvalidArgumentError('baggage', `at most ${MAX_BAGGAGE_ENTRIES} entries, with the parent's`, own);
  }
  return merged;
}

/**
 * Creates a context (a child of the current one unless `root` is set) without entering it. The owner runs
 * work in it with `ctx.run(fn)`, may `ctx.cancel(reason)`, and must call `ctx.end()` when the work is done.
 * Server adapters use this; application code usually wants {@link runWithDeadline}.
 *
 * @example
 * ```ts
 * import { createContext, traceFrom } from '@deadline/core';
 * const ctx = createContext({ deadline: 800, hop: 'orders', trace: traceFrom(req.headers.traceparent), root: true });
 * res.once('close', () => ctx.end());
 * ctx.run(next);
 * ```
 */
export function createContext(init: ContextInit = {}): OwnedContext {
  if (typeof init !== 'object' || init === null) throw new InvalidArgumentError('init', 'an object', init);
  const parent = init.root === true ? undefined : storage.getStore();
  const own = toDeadline(init.deadline);
  const hop = checkHop(init.hop);
  const baggage = checkBaggage(init.baggage);
  const bindings = checkObject('bindings', init.bindings) as Readonly<Record<string, unknown>> | undefined;
  if (init.signal !== undefined && !(init.signal instanceof AbortSignal)) {
    throw new InvalidArgumentError('signal', 'an AbortSignal', init.signal);
  }
  const scope = new Scope(
    parent,
    parent === undefined ? own : parent.deadline.earlier(own),
    {
      trace: init.trace ?? parent?.trace ?? spanTrace(),
      hop: hop ?? parent?.hop,
      baggage: mergeBaggage(parent?.baggage, baggage),
      bindings: merge(parent?.bindings, bindings),
      values: mergeValues(parent?._values, init.values),
    },
    parent?.detached ?? false,
    true,
  );
  publishStart(scope);
  if (init.signal !== undefined) scope._follow(init.signal);
  return scope;
}

/** The trace of the active OpenTelemetry span, for a context that has no other. */
function spanTrace(): TraceContext | undefined {
  const span = activeSpan();
  return span === undefined ? undefined : traceOfSpan(span);
}

function endWhenSettled<R>(scope: OwnedContext, result: R): R {
  if (result instanceof Promise) {
    // A new promise, not a handler on the caller's: an unawaited rejection must still be reported as unhandled.
    return result.then(
      (value) => {
        scope.end();
        return value;
      },
      (error: unknown) => {
        scope.end();
        throw error;
      },
    ) as R;
  }
  scope.end();
  return result;
}

function settleInside<R>(fn: (ctx: OwnedContext) => R, scope: OwnedContext): R {
  const result = fn(scope);
  // A foreign thenable (a query builder) runs its work when `then` is called: call it exactly once, here,
  // inside the context, so the work runs in it and the context lives until it settles.
  if (
    result !== null &&
    typeof result === 'object' &&
    !(result instanceof Promise) &&
    typeof (result as { then?: unknown }).then === 'function'
  ) {
    return Promise.resolve(result) as R;
  }
  return result;
}

/**
 * Runs `fn` in a new child context and ends the context when `fn` returns or its promise settles. Ending
 * cancels whatever `fn` started and left running (use {@link withoutCancel} for work meant to outlive it).
 *
 * @example
 * ```ts
 * import { runWithContext, traceFrom } from '@deadline/core';
 * await runWithContext({ deadline: 500, hop: 'billing', trace: traceFrom() }, async (ctx) => {
 *   await charge(ctx.signal);
 * });
 * ```
 */
export function runWithContext<R>(init: ContextInit, fn: (ctx: OwnedContext) => R): R {
  const scope = createContext(init);
  let result: R;
  try {
    result = storage.run(scope as Scope, settleInside, fn, scope);
  } catch (error) {
    scope.end();
    throw error;
  }
  return endWhenSettled(scope, result);
}

/**
 * Runs `fn` with a deadline: `ms` from now (or the given {@link Deadline}), or the current deadline if that is
 * earlier — nesting never extends. `fn` receives the context it runs in, to cancel it early if it wants.
 *
 * @example
 * ```ts
 * import { runWithDeadline, remainingMs } from '@deadline/core';
 * const rows = await runWithDeadline(300, async () => {
 *   console.log(remainingMs()); // ≈ 300
 *   return db.query('select 1');
 * });
 * ```
 */
export function runWithDeadline<R>(deadlineOrMs: Deadline | number, fn: (ctx: OwnedContext) => R): R {
  return runWithContext({ deadline: deadlineOrMs }, fn);
}

/**
 * Go's `context.WithoutCancel`: runs `fn` in a context that keeps the current metadata (trace, hop, baggage,
 * log bindings) but has no deadline and cannot be cancelled from above — for work that must outlive the
 * request (an audit record, an event). Inside it, `runWithDeadline` sets a fresh, independent budget.
 *
 * @example
 * ```ts
 * import { withoutCancel, runWithDeadline } from '@deadline/core';
 * withoutCancel(() => runWithDeadline(5_000, () => audit.insert(event))).catch(log.error);
 * ```
 */
export function withoutCancel<R>(fn: () => R): R {
  const current = storage.getStore();
  const scope = new Scope(
    undefined,
    Deadline.NONE,
    {
      trace: current?.trace,
      hop: current?.hop,
      baggage: current?.baggage,
      bindings: current?.bindings,
      // Each value as its key says (an idempotency sequence branches: the detached work's calls get the same
      // keys however they interleave with the request's).
      values: detachValues(current?._values),
    },
    true,
    false,
  );
  return storage.run(scope, fn);
}

/**
 * The current context, or `undefined` outside any.
 *
 * @example
 * ```ts
 * const ctx = currentContext();
 * if (ctx?.stopReason) return; // nobody is waiting any more
 * ```
 */
export function currentContext(): DeadlineContext | undefined {
  return storage.getStore();
}

/**
 * The current deadline; {@link Deadline.NONE} outside any context.
 *
 * @example
 * ```ts
 * const callDeadline = currentDeadline().child(1_000);
 * ```
 */
export function currentDeadline(): Deadline {
  return storage.getStore()?.deadline ?? Deadline.NONE;
}

/**
 * Milliseconds left on the current deadline (fractional, never negative); `Infinity` without one.
 *
 * @example
 * ```ts
 * if (remainingMs() < 50) return cachedAnswer();
 * ```
 */
export function remainingMs(): number {
  const scope = storage.getStore();
  return scope === undefined ? Number.POSITIVE_INFINITY : scope.deadline.remainingMs();
}

/**
 * An AbortSignal for the current context: it aborts with a `DeadlineExceededError` when the deadline passes,
 * or a `CancelledError` when the context is cancelled or ends. `undefined` when nothing can abort it (no
 * context, or detached work without its own budget). Created on first use; pass it to anything that takes one.
 *
 * @example
 * ```ts
 * const res = await fetch(url, { signal: currentSignal() });
 * ```
 */
export function currentSignal(): AbortSignal | undefined {
  return storage.getStore()?.signal;
}

/**
 * A cooperative cancellation point for CPU-bound loops: throws the context's stop reason
 * (`DeadlineExceededError` with phase `in-handler`, or `CancelledError`) once it has stopped. Cheap: one clock
 * read.
 *
 * @example
 * ```ts
 * for (const row of rows) {
 *   throwIfExpired();
 *   score(row);
 * }
 * ```
 */
export function throwIfExpired(): void {
  const reason = storage.getStore()?.stopReason;
  if (reason !== undefined) throw reason;
}

/**
 * Binds `fn` to the current context, for callbacks that fire from elsewhere — an EventEmitter emitting outside
 * the request, a connection pool's callback, a queue. Returns `fn` itself outside any context.
 *
 * @example
 * ```ts
 * emitter.on('data', bindContext((chunk) => log.info({ remainingMs: remainingMs() }, 'chunk')));
 * ```
 */
export function bindContext<A extends unknown[], R>(fn: (...args: A) => R): (...args: A) => R {
  const scope = storage.getStore();
  if (scope === undefined) return fn;
  return function boundToContext(this: unknown, ...args: A): R {
    return storage.run(scope, () => fn.apply(this, args));
  };
}
