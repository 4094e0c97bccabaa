/**
 * Which field names carry the trace on a line. Ours by default (`traceId`, `spanId`); OpenTelemetry's pino
 * instrumentation writes `trace_id`, `span_id` and `trace_flags`, and a log pipeline built around it joins
 * lines to spans on those names — {@link OTEL_LOG_KEYS} makes this library's lines use them too.
 */
import type { TraceContext } from '@deadline/core';
import { checkName, checkObject } from '@deadline/core/internal';

/**
 * Field names for the trace's parts; a part whose name is not set is not written. The same shape as
 * `@opentelemetry/instrumentation-pino`'s `logKeys` option.
 *
 * @example
 * ```ts
 * const keys: LogKeys = { traceId: 'trace_id', spanId: 'span_id', traceFlags: 'trace_flags' };
 * ```
 */
export interface LogKeys {
  traceId?: string | undefined;
  spanId?: string | undefined;
  /** The W3C trace flags as two hex digits (`"01"`: sampled), as OpenTelemetry writes them. */
  traceFlags?: string | undefined;
}

/**
 * The names `@opentelemetry/instrumentation-pino` uses: pass them as `logKeys` so that this library's lines join
 * the spans (and the instrumentation's own lines) on the same fields.
 *
 * @example
 * ```ts
 * import { deadlineMixin, logCalls, OTEL_LOG_KEYS } from '@deadline/pino';
 * const logger = pino({ mixin: deadlineMixin({ logKeys: OTEL_LOG_KEYS }) });
 * logCalls(logger, { logKeys: OTEL_LOG_KEYS });
 * ```
 */
export const OTEL_LOG_KEYS: Readonly<Required<LogKeys>> = Object.freeze({
  traceId: 'trace_id',
  spanId: 'span_id',
  traceFlags: 'trace_flags',
});

/** This library's own names. */
const DEFAULT_LOG_KEYS: LogKeys = Object.freeze({ traceId: 'traceId', spanId: 'spanId' });

/** Checks a `logKeys` option: an object of non-empty strings; the default when absent. @internal */
export function resolveLogKeys(value: unknown): LogKeys {
  const keys = checkObject('logKeys', value) as LogKeys | undefined;
  if (keys === undefined) return DEFAULT_LOG_KEYS;
  return {
    traceId: checkName('logKeys.traceId', keys.traceId),
    spanId: checkName('logKeys.spanId', keys.spanId),
    traceFlags: checkName('logKeys.traceFlags', keys.traceFlags),
  };
}

/** Writes the trace's parts under their names. @internal */
export function writeTrace(fields: Record<string, unknown>, trace: TraceContext, keys: LogKeys): void {
  if (keys.traceId !== undefined) fields[keys.traceId] = trace.traceId;
  if (keys.spanId !== undefined) fields[keys.spanId] = trace.spanId;
  if (keys.traceFlags !== undefined) fields[keys.traceFlags] = (trace.flags & 0xff).toString(16).padStart(2, '0');
}
