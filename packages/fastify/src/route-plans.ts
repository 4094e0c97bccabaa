/**
 * What the plugin does for one route, whatever the order the app registered its routes and plugins in: the route's
 * limits (its `config.deadline` over the plugin's options) and fastify's own `handlerTimeout` for it (fastify 5.8 and
 * later), which bounds the request like a deadline.
 *
 * A route added after the plugin is checked as it is added (`onRoute`: a bad `config.deadline` fails the startup).
 * One added before it (`@fastify/cors`'s `OPTIONS *`, a plugin loaded first by `@fastify/autoload`) was never seen:
 * its plan is worked out at its first request, from the route's own context, and kept. fastify has no public, cheap
 * way to that context per request — `request.routeOptions` builds a fresh object on every read — so the plan is
 * looked up only once some route may differ from the plugin's options, and through the symbol fastify keeps the
 * context under on the request, found once by comparing with `request.routeOptions` (where fastify keeps it there no
 * longer, `request.routeOptions` is read instead).
 */
import { InvalidArgumentError } from '@deadline/core';
import type { RouteLimits } from '@deadline/server';
import { type ResolvedLimits, resolveLimits } from '@deadline/server/internal';
import type { FastifyRequest } from 'fastify';

/** What the plugin reads of a route: fastify's route context and `request.routeOptions` both have these. */
interface RouteFacts {
  config?: { deadline?: RouteLimits | false; url?: string; method?: string | string[] } | undefined;
  /** The route's, else the server's; fastify before 5.8 has none. */
  handlerTimeout?: number | undefined;
}

/**
 * The plan of one route.
 *
 * @example
 * ```ts
 * const plan: RoutePlan = { limits, handlerTimeoutMs: 0, error: undefined };
 * ```
 */
export interface RoutePlan {
  /** The route's limits, capped by its handler timeout. */
  readonly limits: ResolvedLimits;
  /** fastify's handler timeout for the route (the route's, else the server's), in ms; 0 for none. */
  readonly handlerTimeoutMs: number;
  /** The route's `config.deadline` is bad (a route added before the plugin): each of its requests fails with it. */
  readonly error: InvalidArgumentError | undefined;
}

/**
 * The plans of one registration's routes.
 *
 * @example
 * ```ts
 * const plans = new RoutePlans(resolved.limits, routesBefore, fastify.initialConfig);
 * fastify.addHook('onRoute', (route) => plans.check(route));
 * const plan = plans.varies ? plans.of(request) : plans.common;
 * ```
 */
export class RoutePlans {
  /** The plugin's own: a route that sets nothing, with no handler timeout. */
  readonly common: RoutePlan;
  /**
   * Whether a route may differ from `common`: one was added before the plugin (unseen), or one has its own limits
   * or a handler timeout. Until then no request looks its route up.
   */
  varies: boolean;
  readonly #base: ResolvedLimits;
  /** Per route, by its config object (the one fastify keeps for the route: the same from either way to it). */
  readonly #plans = new WeakMap<object, RoutePlan>();
  /** The key of the request's route context: undefined until found, null where fastify has none. */
  #contextKey: symbol | null | undefined;

  constructor(base: ResolvedLimits, routesBefore: boolean, server: { handlerTimeout?: number | undefined }) {
    this.#base = base;
    this.common = { limits: base, handlerTimeoutMs: 0, error: undefined };
    this.varies = routesBefore || (server.handlerTimeout ?? 0) > 0;
  }

  /** A route being added (`onRoute`): its `config.deadline` checked now, so a bad one fails the startup. */
  check(route: RouteFacts & { method: string | string[]; url: string }): void {
    const limits = route.config?.deadline;
    if (limits !== undefined) {
      resolveLimits(limits, this.#base, prefix(route.method, route.url));
      this.varies = true;
    }
    if ((route.handlerTimeout ?? 0) > 0) this.varies = true;
  }

  /** The plan of the request's route. */
  of(request: FastifyRequest): RoutePlan {
    let key = this.#contextKey;
    if (key === undefined) key = this.#contextKey = contextKeyOf(request);
    const route = (key == null ? request.routeOptions : (request as unknown as Record<symbol, unknown>)[key]) as
      | RouteFacts
      | undefined;
    const config = route?.config;
    return (config !== undefined && this.#plans.get(config)) || this.#planOf(route);
  }

  #planOf(route: RouteFacts | undefined): RoutePlan {
    const config = route?.config;
    const handlerTimeoutMs = route?.handlerTimeout ?? 0;
    let plan: RoutePlan;
    try {
      const limits =
        config?.deadline === undefined
          ? this.#base
          : resolveLimits(config.deadline, this.#base, prefix(config.method, config.url));
      plan =
        handlerTimeoutMs > 0 || limits !== this.#base
          ? { limits: cappedBy(limits, handlerTimeoutMs), handlerTimeoutMs, error: undefined }
          : this.common;
    } catch (error) {
      if (!(error instanceof InvalidArgumentError)) throw error;
      plan = { limits: this.#base, handlerTimeoutMs: 0, error };
    }
    if (config !== undefined) this.#plans.set(config, plan);
    return plan;
  }
}

/** How an error about a route's `config.deadline` starts: `route GET /reports: config.deadline.`. */
function prefix(method: string | string[] | undefined, url: string | undefined): string {
  return `route ${method} ${url}: config.deadline.`;
}

/**
 * A route's limits under fastify's handler timeout: the request is bounded by the smaller of its budget and the
 * timeout, so neither a default nor a caller's budget goes past it. A long-lived route keeps its own (no budget):
 * fastify's timeout is left to fastify there.
 */
function cappedBy(limits: ResolvedLimits, handlerTimeoutMs: number): ResolvedLimits {
  if (handlerTimeoutMs <= 0 || limits.longLived || limits.maxMs <= handlerTimeoutMs) return limits;
  return Object.freeze({
    defaultMs: Math.min(limits.defaultMs, handlerTimeoutMs),
    maxMs: handlerTimeoutMs,
    minMs: Math.min(limits.minMs, handlerTimeoutMs),
    longLived: false,
  });
}

/**
 * The symbol fastify keeps the request's route context under (its `kRouteContext`): the one whose value has the
 * config `request.routeOptions` gives. Undefined to look again at the next request (this one's route has no config
 * object to compare); null when there is none.
 */
function contextKeyOf(request: FastifyRequest): symbol | null | undefined {
  const config = request.routeOptions.config as unknown;
  if (typeof config !== 'object' || config === null) return undefined;
  const fields = request as unknown as Record<symbol, { config?: unknown } | null | undefined>;
  for (const key of Object.getOwnPropertySymbols(request)) {
    const value = fields[key];
    if (typeof value === 'object' && value !== null && value.config === config) return key;
  }
  return null;
}
