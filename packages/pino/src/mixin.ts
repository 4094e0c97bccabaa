/**
 * pino calls a logger's `mixin` for every line it writes; this one reads the current deadline context. Outside
 * a context it adds nothing, so lines written at startup or in unrelated work stay as they were.
 */
import { currentContext } from '@deadline/core';
import { checkFunction, checkObject } from '@deadline/core/internal';
import { type LogKeys, resolveLogKeys, writeTrace } from './log-keys.js';

/**
 * The fields the mixin adds.
 *
 * @example
 * ```ts
 * // {"level":30,"traceId":"4bf9…","spanId":"00f0…","hop":"orders","budgetMs":800,"remainingMs":612,"msg":"loading order"}
 * const fields: DeadlineLogFields = { traceId: '4bf92f3577b34da6a3ce929d0e0e4736', hop: 'orders', budgetMs: 800, remainingMs: 612 };
 * ```
 */
export interface DeadlineLogFields {
  /** The trace id (under the name `logKeys.traceId` says). */
  traceId?: string;
  /** This hop's span id: the OpenTelemetry server span's when OpenTelemetry made it (name: `logKeys.spanId`). */
  spanId?: string;
  hop?: string;
  /** The context's budget, in whole ms (absent without a deadline). */
  budgetMs?: number;
  /** Time left when the line was written, in whole ms (absent without a deadline). */
  remainingMs?: number;
  /** Present (true) in work detached from its request with `withoutCancel()`. */
  detached?: true;
}

/** A pino mixin: `(mergeObject, level, logger) => object`. */
type Mixin = (mergeObject: object, level: number, logger: unknown) => object;

/**
 * Options of {@link deadlineMixin}.
 *
 * @example
 * ```ts
 * pino({ mixin: deadlineMixin({ mixin: () => ({ region: 'eu-1' }) }) });
 * ```
 */
export interface DeadlineMixinOptions {
  /** Your own mixin; its fields are merged over ours. */
  mixin?: Mixin | undefined;
  /**
   * Names of the trace fields. Default `{ traceId: 'traceId', spanId: 'spanId' }`; `OTEL_LOG_KEYS` writes
   * OpenTelemetry's `trace_id`, `span_id` and `trace_flags`.
   */
  logKeys?: LogKeys | undefined;
}

/**
 * Returns a pino `mixin` that adds {@link DeadlineLogFields} (and the context's log `bindings`) to every line
 * written inside a deadline context, composed with your own mixin.
 *
 * @example
 * ```ts
 * import pino from 'pino';
 * import Fastify from 'fastify';
 * import { deadlineMixin } from '@deadline/pino';
 *
 * const logger = pino({ mixin: deadlineMixin() });              // express + pino-http: pinoHttp({ logger })
 * const app = Fastify({ logger: { mixin: deadlineMixin() } });  // fastify: request.log gets it too
 * ```
 */
export function deadlineMixin(options?: DeadlineMixinOptions): Mixin {
  checkObject('options', options);
  const user = checkFunction<Mixin>('mixin', options?.mixin);
  const keys = resolveLogKeys(options?.logKeys);
  return function deadlineFields(mergeObject: object, level: number, logger: unknown): object {
    // pino merges the line's own fields into the object a mixin returns: it must be a fresh one every time.
    const own = fieldsOfCurrentContext(keys);
    if (user === undefined) return own ?? {};
    const theirs = user(mergeObject, level, logger);
    return own === undefined ? theirs : { ...own, ...theirs };
  };
}

function fieldsOfCurrentContext(keys: LogKeys): DeadlineLogFields | undefined {
  const context = currentContext();
  if (context === undefined) return undefined;
  const fields: DeadlineLogFields & Record<string, unknown> = { ...context.bindings };
  if (context.trace !== undefined) writeTrace(fields, context.trace, keys);
  if (context.hop !== undefined) fields.hop = context.hop;
  const deadline = context.deadline;
  if (!deadline.isNone) {
    fields.budgetMs = Math.round(deadline.budgetMs);
    fields.remainingMs = Math.floor(deadline.remainingMs());
  }
  if (context.detached) fields.detached = true;
  return fields;
}
