/**
 * One log line per outgoing call (HTTP, database, cache), written from the core's diagnostics events: the
 * adapters publish, this subscribes, and no adapter knows about logging.
 */
import diagnostics from 'node:diagnostics_channel';
import {
  type CallEndMessage,
  type DeadlineContext,
  DeadlineExceededError,
  DiagnosticsChannel,
  type ExceededMessage,
} from '@deadline/core';
import { checkObject, runInSpanOf } from '@deadline/core/internal';
import { type LogKeys, resolveLogKeys, writeTrace } from './log-keys.js';

/** The logger methods used: pino's, or anything with the same shape. */
interface CallLogger {
  info(fields: object, message: string): void;
  warn(fields: object, message: string): void;
  debug?(fields: object, message: string): void;
}

/**
 * Options of {@link logCalls}.
 *
 * @example
 * ```ts
 * logCalls(logger, { level: 'debug' }); // calls that went well at debug; the others stay at warn
 * ```
 */
export interface LogCallsOptions {
  /** Level of calls that ended `ok` or `cancelled`. Default `'info'`. Deadline and other failures: `'warn'`. */
  level?: 'info' | 'debug' | undefined;
  /** Names of the trace fields, as in `deadlineMixin` (`OTEL_LOG_KEYS` for OpenTelemetry's). */
  logKeys?: LogKeys | undefined;
}

/**
 * The fields of a call's line.
 *
 * @example
 * ```ts
 * // {"level":30,"traceId":"4bf9…","hop":"orders","target":"GET http://inventory/stock","remainingMs":742,
 * //  "timeoutMs":722,"elapsedMs":31.4,"statusCode":200,"outcome":"ok","msg":"deadline: call ok"}
 * ```
 */
export interface CallLogFields {
  /** The trace id (under the name `logKeys.traceId` says). */
  traceId?: string;
  /** The span id of the calling hop's request (under the name `logKeys.spanId` says). */
  spanId?: string;
  hop?: string;
  target: string;
  /** Time left on the request before the call, in ms (absent without a deadline). */
  remainingMs?: number;
  /** The timeout the call was given, in ms (absent if unbounded). */
  timeoutMs?: number;
  elapsedMs?: number;
  statusCode?: number;
  outcome: CallEndMessage['outcome'];
  /** When a deadline stopped the call: `before-call` (not made) or `during-call` (cut off). */
  phase?: string;
  /** When a deadline stopped the call: `local` or `downstream:<hop>`. */
  whose?: string;
  /** The error's message, when it failed. */
  error?: string;
}

/**
 * Writes one structured line per outgoing call made under a deadline (and per call refused for lack of
 * time): target, time left before, timeout given, elapsed, status, outcome. Returns a function that stops it.
 *
 * @example
 * ```ts
 * import pino from 'pino';
 * import { logCalls } from '@deadline/pino';
 *
 * const logger = pino();
 * logCalls(logger); // every fetch/query/command inside a request now logs its line
 * ```
 */
export function logCalls(logger: CallLogger, options?: LogCallsOptions): () => void {
  checkObject('logger', logger, false);
  checkObject('options', options);
  const okLevel = options?.level ?? 'info';
  const keys = resolveLogKeys(options?.logKeys);
  const onEnd = (message: unknown) => {
    const call = message as CallEndMessage;
    const fields: CallLogFields = {
      ...contextFields(call.context, keys),
      target: call.target,
      outcome: call.outcome,
      elapsedMs: Math.round(call.elapsedMs * 10) / 10,
    };
    if (Number.isFinite(call.remainingMs)) fields.remainingMs = Math.floor(call.remainingMs);
    if (call.timeoutMs !== undefined) fields.timeoutMs = call.timeoutMs;
    if (call.statusCode !== undefined) fields.statusCode = call.statusCode;
    describeError(fields, call.error);
    const level = call.outcome === 'ok' || call.outcome === 'cancelled' ? okLevel : 'warn';
    // The end of a call is heard where its socket's callbacks run, which may be another request's flow.
    runInSpanOf(call.context?.trace, () => write(logger, level, fields));
  };
  const onExceeded = (message: unknown) => {
    const { context, error } = message as ExceededMessage;
    // Calls cut off are logged when they end; a call refused never started, so this is its only trace.
    if (error.phase !== 'before-call' || error.target === undefined) return;
    const fields: CallLogFields = {
      ...contextFields(context, keys),
      target: error.target,
      outcome: 'deadline_exceeded',
    };
    if (context !== undefined && !context.deadline.isNone) {
      fields.remainingMs = Math.max(0, Math.floor(context.deadline.remainingMs()));
    }
    describeError(fields, error);
    runInSpanOf(context?.trace, () => write(logger, 'warn', fields));
  };
  diagnostics.subscribe(DiagnosticsChannel.CallEnd, onEnd);
  diagnostics.subscribe(DiagnosticsChannel.Exceeded, onExceeded);
  return function stopLoggingCalls() {
    diagnostics.unsubscribe(DiagnosticsChannel.CallEnd, onEnd);
    diagnostics.unsubscribe(DiagnosticsChannel.Exceeded, onExceeded);
  };
}

function contextFields(context: DeadlineContext | undefined, keys: LogKeys): Record<string, unknown> {
  const fields: Record<string, unknown> = {};
  if (context?.trace !== undefined) writeTrace(fields, context.trace, keys);
  if (context?.hop !== undefined) fields.hop = context.hop;
  return fields;
}

function describeError(fields: CallLogFields, error: unknown): void {
  if (error === undefined) return;
  if (error instanceof DeadlineExceededError) {
    fields.phase = error.phase;
    fields.whose = error.whose;
  }
  fields.error = error instanceof Error ? error.message : String(error);
}

function write(logger: CallLogger, level: 'info' | 'debug' | 'warn', fields: CallLogFields): void {
  try {
    if (level === 'debug') logger.debug?.(fields, `deadline: call ${fields.outcome}`);
    else logger[level](fields, `deadline: call ${fields.outcome}`);
  } catch {
    // A broken logger must not break the call path (diagnostics subscribers run inside it).
  }
}
