/**
 * `@deadline/core/wire` — how a budget travels between hops: the header names, each dialect's codec
 * (`X-Request-Deadline`, `grpc-timeout`, `Connect-Timeout-Ms`, Envoy's), the parser that picks the smallest
 * budget among them, and W3C `traceparent`. For proxies, gateways and adapter authors; an application reads
 * and sends budgets through its framework's adapter instead. docs/reference/wire-format.md has the rules.
 * @packageDocumentation
 */

export {
  formatTraceparent,
  newSpanId,
  newTraceId,
  type ParsedTraceparent,
  parseTraceparent,
} from './trace.js';
export { parseExceededBy } from './wire/exceeded-by.js';
export { type BudgetHeaders, formatBudgetHeaders } from './wire/format-budget.js';
export { formatGrpcTimeout, parseGrpcTimeout } from './wire/grpc-timeout.js';
export {
  ALL_DIALECTS,
  type BudgetHeader,
  CONNECT_TIMEOUT_HEADER,
  DEADLINE_EXCEEDED_BY_HEADER,
  DEADLINE_REFUSED_BY_HEADER,
  type DeadlineDialect,
  ENVOY_EXPECTED_TIMEOUT_HEADER,
  ENVOY_UPSTREAM_TIMEOUT_HEADER,
  GRPC_RETRY_PUSHBACK_HEADER,
  GRPC_TIMEOUT_HEADER,
  REQUEST_DEADLINE_AT_HEADER,
  REQUEST_DEADLINE_HEADER,
} from './wire/header-names.js';
export type { HeaderSource } from './wire/headers.js';
export { formatRequestDeadline, parseRequestDeadline } from './wire/milliseconds.js';
export {
  type BudgetParser,
  type BudgetParserOptions,
  createBudgetParser,
  type IgnoredHeader,
  type ParsedBudget,
  parseBudget,
} from './wire/parse-budget.js';
export { DEFAULT_URGENCY, PRIORITY_HEADER, parseUrgency } from './wire/priority.js';
export { formatDeadlineAt, waitedMs } from './wire/queue-time.js';
