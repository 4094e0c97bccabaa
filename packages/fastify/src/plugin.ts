/**
 * The plugin: one `onRequest` hook that starts the request's deadline and runs the rest of the chain inside
 * its context (`als.run`, never `enterWith`), and one `preValidation` hook that re-enters the context if a hook
 * of the app's left it. fastify 5 itself keeps it through body parsing (an AsyncResource of the request's);
 * without the hook, 0.2k instructions per request less (Node 20, callgrind), and a callback-style hook of the
 * app's would leave the rest of the chain outside the context.
 */
import { type DeadlineContext, DeadlineExceededError, findDeadlineError, isDeadlineError } from '@deadline/core';
import { findCircuitRefusal, monotonicNow, type Scope, storage } from '@deadline/core/internal';
import type { DeadlineServerOptions, RequestDeadline, RouteLimits } from '@deadline/server';
import {
  createParser,
  isLongLived,
  isTrusted,
  longLivedLimits,
  type RequestState,
  type ResolvedLimits,
  resolveBudget,
  resolveLimits,
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
import { fastifyHost } from './host.js';

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
export type FastifyDeadlineOptions = DeadlineServerOptions<FastifyRequest>;

const plugin: FastifyPluginCallback<FastifyDeadlineOptions> = (fastify, options, done) => {
  let resolved: ReturnType<typeof resolveOptions<FastifyRequest>>;
  try {
    resolved = resolveOptions<FastifyRequest>(options);
  } catch (error) {
    // Fails the registration (and `ready()`/`listen()`) with the error naming the option.
    done(error as Error);
    return;
  }
  const parser = createParser(resolved as never);
  const trust = resolved.trust;
  // Route limits are checked when the route is added (a bad value fails at startup) and cached per route.
  const routeLimits = new WeakMap<object, ResolvedLimits>();
  const limitsOf = (
    config: { deadline?: RouteLimits | false; url?: string; method?: string } | undefined,
  ): ResolvedLimits => {
    if (config?.deadline === undefined) return resolved.limits;
    let limits = routeLimits.get(config);
    if (limits === undefined) {
      limits = resolveLimits(config.deadline, resolved.limits);
      routeLimits.set(config, limits);
    }
    return limits;
  };

  fastify.decorateRequest('deadline', null);

  // fastify has no route listing; its printed tree says "(empty tree)" when there are none (tested both ways).
  if (!fastify.printRoutes().includes('(empty tree)')) {
    fastify.log.warn(
      '@deadline/fastify was registered after some routes: they run with its deadline, but their config.deadline is not read. Register the plugin before your routes.',
    );
  }
  // fastify builds a fresh object on every `request.routeOptions` read: only read it if a route has limits.
  let anyRouteLimits = false;
  // Upgrade headers are read per request only once a route could be upgraded, or the app names its own.
  let checkLongLived = resolved.longLived !== undefined;
  fastify.addHook('onRoute', (route) => {
    if ((route as { websocket?: unknown }).websocket === true) checkLongLived = true;
    const limits = route.config?.deadline;
    if (limits === undefined) return;
    resolveLimits(limits, resolved.limits, `route ${route.method} ${route.url}: config.deadline.`);
    anyRouteLimits = true;
  });

  // The request whose chain runs now, synchronously inside its context's run(): its preValidation hook is still
  // in the context, known without asking AsyncLocalStorage (on Node 20 and 22, ~0.35k instructions a request).
  let chainInContext: RequestState | undefined;

  const onRequest: onRequestHookHandler = (request, reply, next) => {
    const arrivedAt = monotonicNow();
    let limits = anyRouteLimits ? limitsOf(request.routeOptions.config as never) : resolved.limits;
    if (checkLongLived && isLongLived(resolved.longLived, request, request.headers, request.log, resolved.hop)) {
      limits = longLivedLimits(limits);
    }
    // Asked only when there is a predicate: a call never made is not inlined into the hook (response-end.ts).
    const trusted = trust === undefined || isTrusted(trust, request, request.log, resolved.hop);
    const headers = request.headers;
    const budget = resolveBudget(headers, trusted, parser, limits);
    const state = startRequest(
      request.raw,
      reply.raw,
      headers,
      resolved as never,
      fastifyHost,
      budget,
      arrivedAt,
      limits,
      reply,
    );
    request.deadline = state;
    // Refused (the budget is below the route's minimum): the 504 is on its way; the chain must not run.
    if (state.outcome !== undefined) return;
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

  // Deadline errors escaping a handler are answered by fastify's error handling (they carry statusCode 504/499
  // and X-Deadline-Exceeded-By); this notes it for the request's log line. fastify runs onError hooks before
  // the error handler, which is what lets a deadline error wrapped by someone else (global fetch's
  // `TypeError: fetch failed`) lend the wrapper its status and header, so the answer still names the hop.
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
 * The fastify plugin. Register it once, at the root; every route registered after it runs with a deadline.
 * Per-route limits go in the route's `config.deadline`.
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

/** Gives an error that wraps a deadline error (and has no status of its own) that error's status and headers. */
function lendStatus(error: Error & { statusCode?: unknown; status?: unknown }): void {
  if (error.statusCode !== undefined || error.status !== undefined || isDeadlineError(error)) return;
  const typed = findDeadlineError(error) ?? findCircuitRefusal(error);
  if (typed === undefined) return;
  try {
    Object.defineProperty(error, 'statusCode', { value: typed.statusCode, configurable: true, writable: true });
    // A deadline error names the hop whose deadline fired; a breaker's refusal says when to come back.
    const headers = typed instanceof DeadlineExceededError || !isDeadlineError(typed) ? typed.headers : undefined;
    if (headers !== undefined) {
      Object.defineProperty(error, 'headers', { value: headers, configurable: true, writable: true });
    }
  } catch {
    // A frozen error keeps its 500.
  }
}
