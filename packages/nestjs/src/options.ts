/**
 * The module's options, checked once, and what the module's providers share of them: the options as the platform's
 * adapter takes them, and how a route's `@Deadline()` limits are read against them.
 */
import type { IncomingHttpHeaders } from 'node:http';
import {
  checkFunction,
  checkObject,
  type ResolvedIncomingOptions,
  resolveIncomingOptions,
} from '@deadline/core/internal';
import { type BudgetParser, createBudgetParser } from '@deadline/core/wire';
import type { DeadlineServerOptions, LineLogger, RequestBudget } from '@deadline/server';
import {
  budgetReader,
  createParser,
  type ResolvedLimits,
  type ResolvedOptions,
  resolveOptions,
} from '@deadline/server/internal';
import type { ExecutionContext } from '@nestjs/common';
import { nestLineLogger } from './nest-logger.js';

/**
 * The request as the platform gives it to `trust` and `longLived`: express's `Request` (Node's `IncomingMessage`) or
 * fastify's `FastifyRequest`; both have these.
 *
 * @example
 * ```ts
 * const trust = (req: NestRequest) => req.headers['x-internal'] === '1';
 * ```
 */
export interface NestRequest {
  headers: IncomingHttpHeaders;
  method?: string | undefined;
  url?: string | undefined;
}

/**
 * Options of {@link DeadlineModule.forRoot}: the server options (`trust` and `longLived` receive the platform's
 * request), plus where the end-of-request line goes.
 *
 * @example
 * ```ts
 * DeadlineModule.forRoot({ serviceName: 'orders', defaultMs: 2_000, maxMs: 10_000 });
 * ```
 */
export interface DeadlineModuleOptions extends DeadlineServerOptions<NestRequest> {
  /**
   * Where the end-of-request line goes. Default: Nest's `Logger` (context `Deadline`), so the app's logger — Nest's
   * own, or the one given to `app.useLogger()` — writes it; on express a `req.log` (pino-http) is preferred.
   */
  logger?: LineLogger | undefined;
  /**
   * Whether a microservice's message may lengthen its budget past `defaultMs` (up to `maxMs`), shown the handler's
   * `ExecutionContext`. Any other message may only shorten it. Default: none may (as for HTTP callers).
   */
  trustMessage?: ((context: ExecutionContext) => boolean) | undefined;
  /**
   * For NATS and RabbitMQ messages: how far apart their publishers' clocks and this one's may be, in ms. The time a
   * message surely waited in the broker (read off its `x-request-deadline-at`, less this allowance) is taken off its
   * budget; `false`: not read. Default 10.
   */
  clockSkewMs?: number | false | undefined;
}

/** What the module's providers share: the options checked, the platform's options and the reading of a budget. */
export interface ModuleSetup {
  resolved: ResolvedOptions<NestRequest>;
  /** The options as the platform's adapter takes them, the logger set. */
  platform: DeadlineModuleOptions & { logger: LineLogger };
  budgetOf: (
    req: NestRequest,
    headers: IncomingHttpHeaders,
    limits: ResolvedLimits,
    trustedBefore?: boolean,
  ) => RequestBudget;
  /** A microservice's messages: the same limits, hop and logger; `trustMessage` as their `trust`. */
  messages: ResolvedIncomingOptions<ExecutionContext>;
  messageParser: BudgetParser;
}

/** The token of the module's options as given. @internal */
export const DEADLINE_OPTIONS = Symbol('deadline.nestjs.options');
/** The token of {@link ModuleSetup}. @internal */
export const DEADLINE_SETUP = Symbol('deadline.nestjs.setup');

/** Checks `options` (an `InvalidArgumentError` naming the option) and makes what the providers share. @internal */
export function setUp(options: DeadlineModuleOptions | undefined): ModuleSetup {
  const resolved = resolveOptions<NestRequest>(options);
  const logger = (checkObject('logger', options?.logger) as LineLogger | undefined) ?? nestLineLogger();
  const parser = createParser(resolved as never);
  const messages = resolveIncomingOptions<ExecutionContext>({
    serviceName: resolved.hop,
    defaultMs: resolved.limits.defaultMs,
    maxMs: resolved.limits.maxMs,
    minMs: resolved.limits.minMs,
    headers: resolved.dialects,
    trust: checkFunction('trustMessage', options?.trustMessage) as DeadlineModuleOptions['trustMessage'],
    cancelOnEnd: resolved.cancelOnEnd,
    logger: resolved.logLevel === false ? undefined : logger,
    clockSkewMs: options?.clockSkewMs,
  });
  return {
    resolved,
    platform: { ...options, logger },
    budgetOf: budgetReader<NestRequest>(resolved, parser, logger),
    messages,
    messageParser: createBudgetParser({ dialects: messages.dialects }),
  };
}
