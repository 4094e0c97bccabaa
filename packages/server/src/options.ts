/**
 * The options a service gives its deadline middleware, checked once at registration: every error names the
 * option and the value received.
 */
import type { IncomingMessage } from 'node:http';
import { type AdmissionOptions, type DeadlineExceededError, InvalidArgumentError } from '@deadline/core';
import {
  checkBoolean,
  checkFunction,
  checkHop,
  checkNumber,
  checkObject,
  MAX_TIMER_DELAY_MS,
  type ResolvedAdmission,
  resolveAdmission,
} from '@deadline/core/internal';
import { ALL_DIALECTS, type DeadlineDialect } from '@deadline/core/wire';
import type { DeadlineAnswer } from './respond.js';

/**
 * A route's service-level budget. Each field falls back to the service-wide option, then to the default.
 *
 * @example
 * ```ts
 * const reports: RouteLimits = { defaultMs: 5_000, maxMs: 10_000 };
 * ```
 */
export interface RouteLimits {
  /**
   * Budget when no valid header came, and the most a caller `trust` does not accept may have, in ms. Default 15,000
   * (Envoy's default route timeout).
   */
  defaultMs?: number | undefined;
  /** A trusted caller can never ask for more, in ms. Default 60,000. */
  maxMs?: number | undefined;
  /** Below this the request is refused at once with 504: work that cannot finish is not started. Default 10. */
  minMs?: number | undefined;
}

/** Route limits after checking, every field set. @internal */
export interface ResolvedLimits {
  defaultMs: number;
  maxMs: number;
  minMs: number;
  /** A long-lived route (SSE, long-poll, websocket): no default budget, never answered 504 nor cut. */
  longLived: boolean;
}

/** What the `onExpire` hook receives. @example `onExpire: ({ hop, budgetMs }) => metrics.expired(hop, budgetMs)` */
export interface ExpiredEvent {
  /** The request (Node's `IncomingMessage`). */
  req: IncomingMessage;
  /** This hop's name. */
  hop: string;
  /** The budget the request ran with, in ms. */
  budgetMs: number;
  /** Time since the request arrived, in ms. */
  elapsedMs: number;
  /** The error the context's signal aborted with. */
  error: DeadlineExceededError;
}

/** The subset of a pino logger the end-of-request line needs. @example `logger: pino()` */
export interface LineLogger {
  info(object: object, message: string): void;
  warn(object: object, message: string): void;
  debug?(object: object, message: string): void;
  /** pino's: lets the line be skipped, not just dropped, when its level is off. */
  isLevelEnabled?(level: string): boolean;
}

/**
 * Options of the server adapters (`@deadline/fastify`, `@deadline/express`, `deadlineHandler`).
 *
 * @example
 * ```ts
 * const options: DeadlineServerOptions = {
 *   serviceName: 'orders',
 *   defaultMs: 2_000,
 *   maxMs: 10_000,
 *   trust: (req) => req.socket.remoteAddress === '127.0.0.1',
 * };
 * ```
 */
export interface DeadlineServerOptions<Req = IncomingMessage> extends RouteLimits {
  /** This hop's name, for logs and `X-Deadline-Exceeded-By` (1–128 visible ASCII characters). Default `'service'`. */
  serviceName?: string | undefined;
  /** Header dialects to accept. Default all: `deadline`, `grpc`, `connect`, `envoy`. */
  headers?: readonly DeadlineDialect[] | undefined;
  /** Also accept `X-Request-Deadline-At` (epoch ms), minus `skewMs`. Default off. */
  absolute?: { skewMs: number } | false | undefined;
  /**
   * Whether this caller may lengthen its budget past the route's `defaultMs` (up to `maxMs`): your own services
   * behind the edge. Any other caller may only shorten it — the request runs with the smaller of its budget and
   * `defaultMs` — so an internet client cannot buy itself more of the service's time. Default: no caller is trusted.
   * A throwing predicate counts as untrusted.
   */
  trust?: ((req: Req) => boolean) | undefined;
  /** Called when a request's deadline passes before its response was sent. A throwing hook is logged, never fatal. */
  onExpire?: ((event: ExpiredEvent) => void) | undefined;
  /**
   * Level of the end-of-request line for requests that ended in time or were cancelled (`false`: no line for
   * those). Lines for `deadline_exceeded` and `error` are always written at `warn`. Default `'info'`.
   */
  logLevel?: 'info' | 'debug' | false | undefined;
  /**
   * Whether work the handler left running when its response was fully sent (a query or a fetch it did not
   * await) is cancelled then — Go's rule. Default `false`: such work runs on, bounded by the request's deadline,
   * and each call that outlives the request is logged (and published on `deadline:call:outlived`). Work of a
   * request that failed — its deadline passed, its client left — is cancelled either way.
   */
  cancelOnEnd?: boolean | undefined;
  /**
   * Which requests are long-lived — server-sent events, long polls, streams — and run without the route's
   * default budget: not answered 504, not cut. A caller's budget, if one came, still bounds their outgoing
   * calls. Websocket upgrades always are. For one route, fastify's `config: { deadline: false }` and express's
   * `longLived()` middleware say the same. Default: none besides websocket upgrades.
   */
  longLived?: ((req: Req) => boolean) | undefined;
  /**
   * How this hop answers a deadline: status, headers and body. Default: 504 with a small JSON body
   * ({@link DeadlineExceededBody}) and `X-Deadline-Exceeded-By`. A GraphQL endpoint answers in GraphQL's shape
   * (`graphqlDeadlineAnswer` of `@deadline/graphql`). A throwing shape falls back to the default.
   */
  answer?: DeadlineAnswerShape | undefined;
  /**
   * Admission: refuse at arrival — before the body is read and before any of the app's hooks or handlers run — a
   * request that cannot finish in what is left of its budget. Each route learns its own time; the server measures
   * its queue (event-loop delay). Under load, a request whose remaining budget cannot cover the queue (twice) plus
   * its route's expected time is answered 503 with `Retry-After` and `X-Deadline-Refused-By`; one with less left than its
   * route's fastest typical time, 504 as this hop's deadline. Long-lived requests and `exempt` ones are never
   * refused. `true` takes the defaults ({@link AdmissionOptions}). Default off.
   */
  admission?: boolean | AdmissionOptions<Req> | undefined;
}

/**
 * What a hop's deadline answer is made of, for the `answer` option.
 *
 * @example
 * ```ts
 * const answer: DeadlineAnswerShape = (error, { hop }) => ({
 *   statusCode: 504,
 *   headers: { 'content-type': 'application/problem+json', 'x-deadline-exceeded-by': error.hop ?? hop },
 *   body: JSON.stringify({ type: 'about:blank', title: 'Gateway Timeout', status: 504 }),
 * });
 * ```
 */
export type DeadlineAnswerShape = (error: DeadlineExceededError, details: DeadlineAnswerDetails) => DeadlineAnswer;

/**
 * What a hop knows when it answers a deadline.
 *
 * @example
 * ```ts
 * const body = (error: DeadlineExceededError, { hop, elapsedMs }: DeadlineAnswerDetails) => `${hop}: ${elapsedMs} ms`;
 * ```
 */
export interface DeadlineAnswerDetails {
  /** This hop's name. */
  hop: string;
  /** The budget the request ran with, in ms. */
  budgetMs: number;
  /** From the request's arrival to the answer, in ms. */
  elapsedMs: number;
}

/** @internal Options after checking, with defaults applied. */
export interface ResolvedOptions<Req> {
  hop: string;
  limits: ResolvedLimits;
  dialects: readonly DeadlineDialect[];
  absolute: { skewMs: number } | false;
  trust: ((req: Req) => boolean) | undefined;
  onExpire: ((event: ExpiredEvent) => void) | undefined;
  logLevel: 'info' | 'debug' | false;
  cancelOnEnd: boolean;
  longLived: ((req: Req) => boolean) | undefined;
  /** `limits` for a long-lived request. */
  longLivedLimits: ResolvedLimits;
  answer: DeadlineAnswerShape | undefined;
  /** Admission, when on. */
  admission: ResolvedAdmission<Req> | undefined;
}

const DEFAULT_LIMITS: ResolvedLimits = Object.freeze({ defaultMs: 15_000, maxMs: 60_000, minMs: 10, longLived: false });

/**
 * Checks route limits and fills them from `base`. Throws `InvalidArgumentError` naming the option.
 * @internal
 */
export function resolveLimits(
  limits: RouteLimits | false | undefined,
  base: ResolvedLimits = DEFAULT_LIMITS,
  prefix = '',
): ResolvedLimits {
  if (limits === false) return longLivedLimits(base);
  const given = checkObject(`${prefix}limits`, limits) as RouteLimits | undefined;
  const range = { min: 1, max: MAX_TIMER_DELAY_MS };
  const maxMs = checkNumber(`${prefix}maxMs`, given?.maxMs, range) ?? base.maxMs;
  // A route that only lowers maxMs lowers its default with it.
  const defaultMs = checkNumber(`${prefix}defaultMs`, given?.defaultMs, range) ?? Math.min(base.defaultMs, maxMs);
  const minMs =
    checkNumber(`${prefix}minMs`, given?.minMs, { min: 0, max: MAX_TIMER_DELAY_MS }) ?? Math.min(base.minMs, defaultMs);
  if (defaultMs > maxMs) {
    throw new InvalidArgumentError(`${prefix}defaultMs`, `at most maxMs (${maxMs})`, defaultMs);
  }
  if (minMs > defaultMs) {
    throw new InvalidArgumentError(`${prefix}minMs`, `at most defaultMs (${defaultMs})`, minMs);
  }
  return { defaultMs, maxMs, minMs, longLived: false };
}

/** `base` for a long-lived route: the same clamp for a caller's budget, no default. @internal */
export function longLivedLimits(base: ResolvedLimits): ResolvedLimits {
  return base.longLived ? base : Object.freeze({ ...base, longLived: true });
}

/**
 * Checks the service-wide options once, at registration.
 * @internal
 */
export function resolveOptions<Req>(options: DeadlineServerOptions<Req> | undefined): ResolvedOptions<Req> {
  const given = (checkObject('options', options) ?? {}) as DeadlineServerOptions<Req>;
  const dialects = given.headers ?? ALL_DIALECTS;
  if (!Array.isArray(dialects) || dialects.some((d) => !ALL_DIALECTS.includes(d))) {
    throw new InvalidArgumentError('headers', `an array of ${ALL_DIALECTS.map((d) => `'${d}'`).join(', ')}`, dialects);
  }
  const absolute = given.absolute ?? false;
  if (absolute !== false) {
    checkObject('absolute', absolute);
    checkNumber('absolute.skewMs', absolute.skewMs, { optional: false, max: 60_000 });
  }
  const logLevel = given.logLevel ?? 'info';
  if (logLevel !== 'info' && logLevel !== 'debug' && logLevel !== false) {
    throw new InvalidArgumentError('logLevel', "'info', 'debug' or false", logLevel);
  }
  const limits = resolveLimits(given);
  return {
    hop: checkHop(given.serviceName, 'serviceName') ?? 'service',
    limits,
    dialects,
    absolute,
    trust: checkFunction<(req: Req) => boolean>('trust', given.trust),
    onExpire: checkFunction<(event: ExpiredEvent) => void>('onExpire', given.onExpire),
    logLevel,
    cancelOnEnd: checkBoolean('cancelOnEnd', given.cancelOnEnd) ?? false,
    longLived: checkFunction<(req: Req) => boolean>('longLived', given.longLived),
    longLivedLimits: longLivedLimits(limits),
    answer: checkFunction<DeadlineAnswerShape>('answer', given.answer),
    admission: resolveAdmission<Req>(given.admission),
  };
}
