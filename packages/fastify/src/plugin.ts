/**
 * The plugin: one `onRequest` hook that starts the request's deadline and runs the rest of the chain inside
 * its context (`als.run`, never `enterWith`), and one `preValidation` hook that re-enters the context if a hook
 * of the app's left it. fastify 5 itself keeps it through body parsing (an AsyncResource of the request's);
 * without the hook, 0.2k instructions per request less (Node 20, callgrind), and a callback-style hook of the
 * app's would leave the rest of the chain outside the context. Every route gets them, added before the plugin or
 * after (fastify binds a context's hooks to its routes when it starts): the order of registration does not matter.
 */
import type { DeadlineContext } from '@deadline/core';
import { checkObject, monotonicNow, type Scope, storage } from '@deadline/core/internal';
import type { DeadlineServerOptions, LineLogger, RequestDeadline, RouteLimits } from '@deadline/server';
import {
  admitRequest,
  createParser,
  isLongLived,
  isTrusted,
  longLivedLimits,
  type RequestHost,
  type RequestState,
  resolveBudget,
  resolveOptions,
  startRequest,
} from '@deadline/server/internal';
import type {
  FastifyPluginCallback,
  FastifyRequest,
  onErrorHookHandler,
  onRequestHookHandler,
  preValidationHookHandler,
} from 'fastify';
import fp from 'fastify-plugin';
import { answerDeadlineErrors, lendStatus } from './deadline-errors.js';
import { fastifyHost, fastifyHostLoggingTo } from './host.js';
import { RequestSignals } from './request-signal.js';
import { RoutePlans } from './route-plans.js';

declare module 'fastify' {
  interface FastifyRequest {
    /** The request's deadline: its context, budget and remaining time. `null` only before the plugin's hook ran. */
    deadline: RequestDeadline | null;
  }
  interface FastifyContextConfig {
    /**
     * This route's budget limits (its SLA), over the plugin's options; `false` for a long-lived route (server-sent
     * events, a long poll, a stream): no default budget, never answered 504 nor cut. A caller's budget, if one
     * came, still bounds its outgoing calls. Websocket routes (`@fastify/websocket`) are long-lived by themselves.
     */
    deadline?: RouteLimits | false;
  }
}

/**
 * Options of {@link fastifyDeadline}: the server options; `trust` receives the fastify request.
 *
 * @example
 * ```ts
 * const options: FastifyDeadlineOptions = { serviceName: 'gateway', defaultMs: 3_000, maxMs: 10_000 };
 * ```
 */
export interface FastifyDeadlineOptions extends DeadlineServerOptions<FastifyRequest> {
  /** Where the end-of-request line goes. Default: the request's own logger (`request.log`). */
  logger?: LineLogger | undefined;
}

const plugin: FastifyPluginCallback<FastifyDeadlineOptions> = (fastify, options, done) => {
  let resolved: ReturnType<typeof resolveOptions<FastifyRequest>>;
  let host: RequestHost;
  try {
    resolved = resolveOptions<FastifyRequest>(options);
    const logger = checkObject('logger', options?.logger) as LineLogger | undefined;
    host = logger === undefined ? fastifyHost : fastifyHostLoggingTo(logger);
  } catch (error) {
    // Fails the registration (and `ready()`/`listen()`) with the error naming the option.
    done(error as Error);
    return;
  }
  const parser = createParser(resolved as never);
  const trust = resolved.trust;
  const admission = resolved.admission;
  // fastify has no route listing; its printed tree says "(empty tree)" when there are none (tested both ways). Routes
  // added before the plugin (`@fastify/cors`'s `OPTIONS *`) are not seen by `onRoute`: their plans are looked up.
  const routesBefore = !fastify.printRoutes().includes('(empty tree)');
  const plans = new RoutePlans(resolved.limits, routesBefore, fastify.initialConfig as { handlerTimeout?: number });
  const signals = new RequestSignals();

  fastify.decorateRequest('deadline', null);
  signals.install(fastify);

  // Upgrade headers are read per request only once a route could be upgraded, or the app names its own.
  let checkLongLived = resolved.longLived !== undefined;
  fastify.addHook('onRoute', (route) => {
    if ((route as { websocket?: unknown }).websocket === true) checkLongLived = true;
    // A bad config.deadline throws from app.get() / app.route(): the startup fails, naming the route.
    plans.check(route);
    // First in fastify's chain of error handlers: deadline errors are answered, the rest go on (deadline-errors.ts).
    route.errorHandler ??= answerDeadlineErrors;
  });

  // The request whose chain runs now, synchronously inside its context's run(): its preValidation hook is still
  // in the context, known without asking AsyncLocalStorage (on Node 20 and 22, ~0.35k instructions a request).
  let chainInContext: RequestState | undefined;

  const onRequest: onRequestHookHandler = (request, reply, next) => {
    const arrivedAt = monotonicNow();
    // The route is looked up only once some route may differ from the plugin's options (route-plans.ts).
    const plan = plans.varies ? plans.of(request) : plans.common;
    if (plan.error !== undefined) {
      // A route added before the plugin, with a bad config.deadline: fastify answers 500 with the error naming it.
      next(plan.error);
      return;
    }
    let limits = plan.limits;
    if (checkLongLived && isLongLived(resolved.longLived, request, request.headers, request.log, resolved.hop)) {
      limits = longLivedLimits(limits);
    }
    // Asked only when there is a predicate: a call never made is not inlined into the hook (response-end.ts).
    const trusted = trust !== undefined && isTrusted(trust, request, request.log, resolved.hop);
    const headers = request.headers;
    const budget = resolveBudget(headers, trusted, parser, limits);
    const state = startRequest(
      request.raw,
      reply.raw,
      headers,
      resolved as never,
      host,
      budget,
      arrivedAt,
      limits,
      reply,
    );
    request.deadline = state;
    // Refused (the budget is below the route's minimum): the 504 is on its way; the chain must not run.
    if (state.outcome !== undefined) return;
    if (admission !== undefined && !admitRequest(admission, state, request, headers, routeKey(request), request.log)) {
      return;
    }
    if (plan.handlerTimeoutMs > 0 && !state.longLived) signals.followHandlerTimeout(request, state);
    const outer = chainInContext;
    chainInContext = state;
    try {
      state.context.run(next);
    } finally {
      chainInContext = outer;
    }
  };

  const preValidation: preValidationHookHandler = (request, _reply, next) => {
    const state = request.deadline as RequestState | null;
    // Nearly always still in the context: reached without a pause from onRequest (a GET), or after fastify parsed
    // the body in an AsyncResource of the request's. Else a hook of the app's called back from elsewhere (an event
    // emitter, a pooled socket).
    if (state === null || state === chainInContext || withinRequest(storage.getStore(), state.context)) next();
    else state.context.run(next);
  };

  // fastify runs onError hooks before the error handlers: the outcome is noted for the request's log line, and a
  // deadline error wrapped by someone else (global fetch's `TypeError: fetch failed`) lends the wrapper its status
  // and header, for the error handlers of routes the plugin did not see.
  const onError: onErrorHookHandler = (request, _reply, error, next) => {
    (request.deadline as RequestState | null)?.recordError(error);
    lendStatus(error);
    next();
  };

  fastify.addHook('onRequest', onRequest);
  fastify.addHook('preValidation', preValidation);
  fastify.addHook('onError', onError);
  done();
};

/**
 * The fastify plugin. Register it once, at the root, before or after the root's routes: each of them, and each
 * route of a plugin registered after it, runs with a deadline. Per-route limits go in the route's `config.deadline`.
 *
 * @example
 * ```ts
 * import Fastify from 'fastify';
 * import fastifyDeadline from '@deadline/fastify';
 *
 * const app = Fastify({ logger: true });
 * await app.register(fastifyDeadline, { serviceName: 'gateway', defaultMs: 3_000 });
 * app.get('/report', { config: { deadline: { defaultMs: 10_000, maxMs: 20_000 } } }, async (request) => {
 *   return { left: request.deadline?.remainingMs() };
 * });
 * ```
 */
export const fastifyDeadline = fp(plugin, { fastify: '5.x', name: '@deadline/fastify' });

/**
 * Whether `store` is the request's context, one a hook of the app's made inside it (a child), or one detached from
 * it on purpose: each is kept.
 */
function withinRequest(store: Scope | undefined, context: DeadlineContext): boolean {
  if (store === context) return true;
  if (store === undefined) return false;
  if (store.detached) return true;
  for (let at = store.parent; at !== undefined; at = at.parent) if (at === context) return true;
  return false;
}

/** The route a request is of, for admission: its method and the route's pattern (`*` when no route matched). */
function routeKey(request: FastifyRequest): string {
  return `${request.method} ${request.routeOptions.url ?? '*'}`;
}
