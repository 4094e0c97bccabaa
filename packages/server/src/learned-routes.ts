/**
 * Routes for admission where the deadline's middleware runs before the framework's router has matched the request
 * (express, Koa): that is the point — nothing of the app runs before the verdict — but the route is not known yet
 * when the request arrives. It is known once answered: each path is remembered with the route that answered it, and
 * the next request for the same path is judged by that route's time. A path not seen yet (or a route whose paths
 * carry ids, each new) is judged by its method's time across the app's other such requests. So is whether the route
 * is long-lived (express's and Koa's `longLived()` are route middleware): a path once answered as long-lived is never
 * judged again; until then, only the `longLived` option (or `admission.exempt`) keeps it from being refused.
 */
import type { ServerResponse } from 'node:http';

/** How many paths are remembered: the oldest is forgotten first. */
const MAX_PATHS = 1_000;

/** What admission knows of a request's route before the router ran. @internal */
export interface LearnedRoute {
  /** Its method and route pattern once learned, else its method and `*`. */
  readonly key: string;
  /** Whether a request for the same path was long-lived. */
  readonly longLived: boolean;
}

/**
 * The paths an app's routes answered, for its admission. `routeOf` reads the route that answered a request off the
 * framework's object for it (`subject`), once its response is over (express: `req.baseUrl + req.route.path`; Koa:
 * `ctx._matchedRoute`), `undefined` when none did; `longLivedOf`, whether the request turned long-lived.
 *
 * @example
 * ```ts
 * const routes = new LearnedRoutes<Request>((req) => req.route?.path, (req) => req.deadline?.longLived === true);
 * const { key } = routes.of(req.method, req.originalUrl, res, req); // 'GET /orders/:id' once learned, else 'GET *'
 * ```
 * @internal
 */
export class LearnedRoutes<Subject> {
  readonly #byPath = new Map<string, LearnedRoute>();
  readonly #routeOf: (subject: Subject) => string | undefined;
  readonly #longLivedOf: (subject: Subject) => boolean;

  constructor(routeOf: (subject: Subject) => string | undefined, longLivedOf: (subject: Subject) => boolean) {
    this.#routeOf = routeOf;
    this.#longLivedOf = longLivedOf;
  }

  /** The route of a request for `url`, as far as is known; learns its real one when its response is over. */
  of(method: string, url: string | undefined, res: ServerResponse, subject: Subject): LearnedRoute {
    const target = url ?? '/';
    const query = target.indexOf('?');
    const path = `${method} ${query === -1 ? target : target.slice(0, query)}`;
    const known = this.#byPath.get(path);
    if (known !== undefined) return known;
    res.once('close', () => this.#learn(path, method, subject));
    return { key: `${method} *`, longLived: false };
  }

  #learn(path: string, method: string, subject: Subject): void {
    let route: string | undefined;
    let longLived: boolean;
    try {
      route = this.#routeOf(subject);
      longLived = this.#longLivedOf(subject);
    } catch {
      return;
    }
    // A path no route answered (a 404, a middleware's own answer) stays with its method.
    if (typeof route !== 'string') return;
    if (this.#byPath.size >= MAX_PATHS) {
      const oldest = this.#byPath.keys().next().value;
      if (oldest !== undefined) this.#byPath.delete(oldest);
    }
    this.#byPath.set(path, { key: `${method} ${route}`, longLived });
  }
}
