/**
 * The budget one request runs with: the caller's, if valid, else the route's default. A caller the service
 * trusts may ask for up to the route's maximum; any other caller may only shorten the route's default, never
 * lengthen it (an internet client cannot buy itself more of the service's time).
 */
import type { IncomingHttpHeaders } from 'node:http';
import { MAX_TIMER_DELAY_MS, ourBudgetAlone } from '@deadline/core/internal';
import {
  type BudgetHeader,
  type BudgetParser,
  createBudgetParser,
  type IgnoredHeader,
  REQUEST_DEADLINE_HEADER,
} from '@deadline/core/wire';
import { requestLogger } from './engine-paths.js';
import type { LineLogger, ResolvedLimits, ResolvedOptions } from './options.js';
import { reportHookError } from './request-deadline.js';

/**
 * Where a request's budget came from and what was done to it — the facts its log line reports.
 *
 * @example
 * ```ts
 * const { budgetMs, source, header, requestedMs } = request.deadline.budget;
 * ```
 */
export interface RequestBudget {
  /** The budget the request runs with, in ms. */
  budgetMs: number;
  /**
   * `header`: the caller's; `default`: the route's (no valid header, or an untrusted caller asking for more than
   * the default); `none`: a long-lived route without a caller's budget (`budgetMs` is then `Infinity`).
   */
  source: 'header' | 'default' | 'none';
  /** The header it came from, with its raw value. */
  header: BudgetHeader | undefined;
  value: string | undefined;
  /**
   * What the caller asked for, when it was more than this hop allowed: the route's `maxMs`, or its `defaultMs` for a
   * caller not trusted.
   */
  requestedMs: number | undefined;
  /** Whether the service's `trust` accepted the caller: it may lengthen the budget up to `maxMs`. */
  trusted: boolean;
  /** Budget headers present but refused, with the reason. */
  ignored: readonly IgnoredHeader[];
}

/**
 * Whether a request is long-lived (see `longLived` in the options): a websocket upgrade, or one the service's
 * predicate names. A throwing predicate is reported and the request runs with the route's budget.
 * @internal
 */
export function isLongLived<Req>(
  predicate: ((req: Req) => boolean) | undefined,
  req: Req,
  headers: IncomingHttpHeaders,
  logger: LineLogger | undefined,
  hop: string,
): boolean {
  // A websocket lives as long as its socket, not as long as a request budget. (Only websocket: curl asks every
  // plain request to upgrade to h2c, which a Node HTTP/1 server ignores.)
  const upgrade = headers.upgrade;
  if (upgrade !== undefined && upgrade.toLowerCase() === 'websocket') return true;
  // The predicate apart: a call never made (no predicate, the usual case) costs the request's start nothing of what
  // V8 will inline into it.
  return predicate !== undefined && askLongLived(predicate, req, logger, hop);
}

function askLongLived<Req>(
  predicate: (req: Req) => boolean,
  req: Req,
  logger: LineLogger | undefined,
  hop: string,
): boolean {
  try {
    return Boolean(predicate(req));
  } catch (error) {
    reportHookError(logger, 'longLived', error, hop);
    return false;
  }
}

/**
 * Asks the service's `trust` predicate about a caller; without one, no caller is trusted. A throwing predicate is
 * reported and the caller is treated as untrusted (it may only shorten the route's default): a user callback never
 * breaks the request.
 * @internal
 */
export function isTrusted<Req>(
  trust: ((req: Req) => boolean) | undefined,
  req: Req,
  logger: LineLogger | undefined,
  hop: string,
): boolean {
  if (trust === undefined) return false;
  try {
    return Boolean(trust(req));
  } catch (error) {
    reportHookError(logger, 'trust', error, hop);
    return false;
  }
}

/**
 * @internal A service's budget parser (its dialects are fixed at registration, the clamp is per route), and whether
 * it accepts our header: then `ourBudgetAlone()`'s budget may be taken without it.
 */
export interface ServiceParser {
  parse: BudgetParser;
  acceptsOurs: boolean;
}

/** @internal One parser per service. */
export function createParser(options: ResolvedOptions<never>): ServiceParser {
  return {
    parse: createBudgetParser({ dialects: options.dialects, absolute: options.absolute, maxMs: MAX_TIMER_DELAY_MS }),
    acceptsOurs: options.dialects.includes('deadline'),
  };
}

const NO_IGNORED: readonly IgnoredHeader[] = Object.freeze([]);

/**
 * @internal How a middleware whose `trust` receives Node's request reads a request's budget (Express, Koa): its
 * headers, whether `trust` accepts the caller — asked with the request's own logger (`req.log`) at hand, to report
 * a predicate that throws — and the route's limits. `trustedBefore`: what the app's own mount decided of this caller,
 * for a router's or a route's mount that has no `trust` of its own.
 */
export function budgetReader<Req extends object>(
  options: ResolvedOptions<Req>,
  parser: ServiceParser,
  logger: LineLogger | undefined,
): (req: Req, headers: IncomingHttpHeaders, limits: ResolvedLimits, trustedBefore?: boolean) => RequestBudget {
  const trust = options.trust;
  const hop = options.hop;
  return (req, headers, limits, trustedBefore = false) => {
    const trusted = trust === undefined ? trustedBefore : isTrusted(trust, req, requestLogger(req, logger), hop);
    return resolveBudget(headers, trusted, parser, limits);
  };
}

/** @internal */
export function resolveBudget(
  headers: IncomingHttpHeaders,
  trusted: boolean,
  parser: ServiceParser,
  limits: ResolvedLimits,
): RequestBudget {
  // The common request (no budget header, or only ours: a hop of ours calling the next) is read without the
  // parser, which V8 never inlines (too large): its call alone was 0.25k instructions a request (Node 20, callgrind),
  // and its result was copied into a second object. The rest is a call apart: this is inlined where a request
  // starts, and what it brings counts against what V8 inlines there (a path not taken counts, a call does not).
  const ours = ourBudgetAlone(headers);
  if (ours > 0 && parser.acceptsOurs) {
    return headerBudget(
      ours,
      REQUEST_DEADLINE_HEADER,
      headers['x-request-deadline'] as string,
      undefined,
      NO_IGNORED,
      limits,
      trusted,
    );
  }
  return ours === 0 ? defaultBudget(limits, trusted, NO_IGNORED) : parsedBudget(headers, trusted, parser, limits);
}

/** Any other request: budget headers only the parser reads (and reports on). */
function parsedBudget(
  headers: IncomingHttpHeaders,
  trusted: boolean,
  parser: ServiceParser,
  limits: ResolvedLimits,
): RequestBudget {
  const parsed = parser.parse(headers);
  if (parsed.budgetMs === undefined) return defaultBudget(limits, trusted, parsed.ignored);
  return headerBudget(
    parsed.budgetMs,
    parsed.header,
    parsed.value,
    parsed.requestedMs,
    parsed.ignored,
    limits,
    trusted,
  );
}

/**
 * A caller's budget, clamped to the route's maximum — or, for a caller not trusted, to the route's default: it may
 * shorten the budget, not lengthen it (a long-lived route has no default, so any budget shortens it).
 * `requestedMs`: what the caller asked for when the parser's own clamp (2^31−1 ms) cut it already; else the budget
 * itself when this clamp does.
 */
function headerBudget(
  ms: number,
  header: BudgetHeader | undefined,
  value: string | undefined,
  requestedMs: number | undefined,
  ignored: readonly IgnoredHeader[],
  limits: ResolvedLimits,
  trusted: boolean,
): RequestBudget {
  if (!trusted && !limits.longLived && ms > limits.defaultMs) {
    return { ...defaultBudget(limits, false, ignored), requestedMs: requestedMs ?? ms };
  }
  const clamped = ms > limits.maxMs;
  return {
    budgetMs: clamped ? limits.maxMs : ms,
    source: 'header',
    header,
    value,
    requestedMs: requestedMs ?? (clamped ? ms : undefined),
    trusted,
    ignored,
  };
}

function defaultBudget(limits: ResolvedLimits, trusted: boolean, ignored: readonly IgnoredHeader[]): RequestBudget {
  return {
    budgetMs: limits.longLived ? Number.POSITIVE_INFINITY : limits.defaultMs,
    source: limits.longLived ? 'none' : 'default',
    header: undefined,
    value: undefined,
    requestedMs: undefined,
    trusted,
    ignored,
  };
}
