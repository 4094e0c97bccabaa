/**
 * `@deadline/pino` — a pino mixin that puts the current request's trace id, hop, budget and remaining time
 * on every log line written inside a deadline context.
 * @packageDocumentation
 */

export { type CallLogFields, type LogCallsOptions, logCalls } from './call-log.js';
export { type LogKeys, OTEL_LOG_KEYS } from './log-keys.js';
export { type DeadlineLogFields, type DeadlineMixinOptions, deadlineMixin } from './mixin.js';
