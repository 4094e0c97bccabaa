/**
 * The cls-hooked bridge: for apps whose request state lives in a cls-hooked namespace (Sequelize's CLS, older
 * middleware), the current deadline context made visible through that namespace. AsyncLocalStorage stays the one
 * source of truth: the namespace receives references (the context, its live Deadline, a signal getter), never
 * copies of the time, so `remainingMs()` read through it keeps counting.
 *
 * cls-hooked is an optional peer: nothing here imports it. The namespace is the user's own object.
 */
import { currentContext, type Deadline, type DeadlineContext, InvalidArgumentError } from '@deadline/core';
import { checkFunction, checkObject } from '@deadline/core/internal';

/**
 * The keys the bridge sets in the namespace. Prefixed, so they cannot collide with Sequelize's `transaction` or
 * the app's own keys.
 *
 * @example
 * ```ts
 * import { CLS_KEYS } from '@deadline/jobs/cls-hooked';
 * const deadline = ns.get(CLS_KEYS.deadline); // a Deadline, or undefined outside a request
 * log.info({ traceId: ns.get(CLS_KEYS.traceId), remainingMs: deadline?.remainingMs() });
 * ```
 */
export const CLS_KEYS = Object.freeze({
  context: 'deadline.context',
  deadline: 'deadline.deadline',
  getSignal: 'deadline.getSignal',
  traceId: 'deadline.traceId',
} as const);

/**
 * What each of {@link CLS_KEYS} holds: a type argument for a typed namespace. Every value is `undefined` when the
 * namespace was entered outside a deadline context.
 *
 * @example
 * ```ts
 * import { createNamespace } from 'cls-hooked';
 * const ns = createNamespace<ClsDeadlineValues>('app');
 * const signal = ns.get(CLS_KEYS.getSignal)?.(); // AbortSignal | undefined
 * ```
 */
export interface ClsDeadlineValues {
  /** The deadline context itself (the same object `currentContext()` returned when the namespace was entered). */
  'deadline.context': DeadlineContext | undefined;
  /** Its effective Deadline: a live value, `remainingMs()` keeps counting. */
  'deadline.deadline': Deadline | undefined;
  /** Reads the context's AbortSignal. A function because the signal is created on first use, and costs. */
  'deadline.getSignal': (() => AbortSignal | undefined) | undefined;
  /** The W3C trace id (32 hex digits) of the request. */
  'deadline.traceId': string | undefined;
}

/**
 * The part of a cls-hooked (or continuation-local-storage) namespace the bridge uses: `run` and `set`.
 *
 * @example
 * ```ts
 * import { createNamespace } from 'cls-hooked';
 * const ns: ClsNamespaceLike = createNamespace('app');
 * ```
 */
export interface ClsNamespaceLike {
  run(fn: () => void): unknown;
  set(key: string, value: unknown): unknown;
}

function checkNamespace(value: unknown): ClsNamespaceLike {
  const namespace = checkObject('namespace', value, false) as Partial<ClsNamespaceLike>;
  if (typeof namespace.run !== 'function' || typeof namespace.set !== 'function') {
    throw new InvalidArgumentError('namespace', 'a cls-hooked namespace (with run and set)', value);
  }
  return namespace as ClsNamespaceLike;
}

function enter<R>(namespace: ClsNamespaceLike, fn: () => R): R {
  const context = currentContext();
  let result: R | undefined;
  namespace.run(() => {
    // Set even outside a context: a child namespace context inherits its parent's keys, and stale values from
    // an enclosing run must not show through.
    namespace.set(CLS_KEYS.context, context);
    namespace.set(CLS_KEYS.deadline, context?.deadline);
    namespace.set(CLS_KEYS.getSignal, context === undefined ? undefined : () => context.signal);
    namespace.set(CLS_KEYS.traceId, context?.trace?.traceId);
    result = fn();
  });
  return result as R;
}

/**
 * Runs `fn` in a new context of `namespace` holding the current deadline context under {@link CLS_KEYS}, and
 * returns what `fn` returns (its promise, if async: cls-hooked carries the values into its continuations).
 * Outside a deadline context `fn` still runs, with every key set to `undefined`. Use it where a context starts
 * that the framework hooks do not cover: a background task, a queue worker, a script.
 *
 * @example
 * ```ts
 * import { runInBackground } from '@deadline/jobs';
 * import { CLS_KEYS, runInClsNamespace } from '@deadline/jobs/cls-hooked';
 * runInBackground('reindex', () =>
 *   runInClsNamespace(ns, async () => {
 *     await Product.update(fields, { where }); // Sequelize's hooks see ns.get(CLS_KEYS.traceId)
 *   }),
 * );
 * ```
 */
export function runInClsNamespace<R>(namespace: ClsNamespaceLike, fn: () => R): R {
  checkNamespace(namespace);
  checkFunction('fn', fn, false);
  return enter(namespace, fn);
}

/** The per-request step shared by the express middleware and the fastify hook. */
function perRequest(namespace: ClsNamespaceLike, name: string): (next: () => void) => void {
  checkNamespace(namespace);
  let warned = false;
  return (next) => {
    // Mounted before the deadline middleware (or plugin) it would silently set nothing: say so, once.
    if (!warned && currentContext() === undefined) {
      warned = true;
      process.emitWarning(
        `${name} ran outside a deadline context: the namespace's deadline keys are undefined for such requests. Add it after the @deadline middleware or plugin.`,
        { type: 'DeadlineWarning', code: 'DEADLINE_CLS_OUTSIDE_CONTEXT' },
      );
    }
    enter(namespace, next);
  };
}

/**
 * Express (4 and 5) and connect middleware: the rest of the request runs in a context of `namespace` holding the
 * request's deadline context under {@link CLS_KEYS}. Mount it after `@deadline/express`'s `deadline()`; mounted
 * before it, it finds no context, sets the keys to `undefined` and emits one `DeadlineWarning`. A router that
 * narrows the deadline with its own `deadline()` needs its own `clsMiddleware` after that.
 *
 * @example
 * ```ts
 * import { createNamespace } from 'cls-hooked';
 * import { deadline } from '@deadline/express';
 * import { clsMiddleware } from '@deadline/jobs/cls-hooked';
 *
 * const ns = createNamespace('app');
 * Sequelize.useCLS(ns);
 * app.use(deadline({ serviceName: 'orders' }));
 * app.use(clsMiddleware(ns));
 * ```
 */
export function clsMiddleware(namespace: ClsNamespaceLike): (req: unknown, res: unknown, next: () => void) => void {
  const step = perRequest(namespace, 'clsMiddleware');
  return function deadlineClsMiddleware(_req, _res, next) {
    step(next);
  };
}

/**
 * A fastify hook with the same effect as {@link clsMiddleware}, for `onRequest` (or `preValidation`,
 * `preHandler`). Add it after registering `@deadline/fastify`: fastify queues `addHook` behind earlier `register`
 * calls, so the plugin's `onRequest` hook runs first even without `await`. Added before it, the hook finds no
 * context, sets the keys to `undefined` and emits one `DeadlineWarning`.
 *
 * @example
 * ```ts
 * import Fastify from 'fastify';
 * import fastifyDeadline from '@deadline/fastify';
 * import { clsFastifyHook } from '@deadline/jobs/cls-hooked';
 *
 * const app = Fastify();
 * await app.register(fastifyDeadline, { serviceName: 'gateway' });
 * app.addHook('onRequest', clsFastifyHook(ns));
 * ```
 */
export function clsFastifyHook(
  namespace: ClsNamespaceLike,
): (request: unknown, reply: unknown, done: () => void) => void {
  const step = perRequest(namespace, 'clsFastifyHook');
  return function deadlineClsHook(_request, _reply, done) {
    step(done);
  };
}
