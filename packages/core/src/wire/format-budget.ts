/**
 * From a budget to outgoing headers: ours always, the other dialects when asked.
 */
import { InvalidArgumentError } from '../errors.js';
import { formatGrpcTimeout } from './grpc-timeout.js';
import {
  CONNECT_TIMEOUT_HEADER,
  type DeadlineDialect,
  ENVOY_UPSTREAM_TIMEOUT_HEADER,
  GRPC_TIMEOUT_HEADER,
  REQUEST_DEADLINE_HEADER,
} from './header-names.js';
import { formatRequestDeadline } from './milliseconds.js';

/**
 * Headers carrying a budget, by lower-case name.
 *
 * @example
 * ```ts
 * const headers: BudgetHeaders = formatBudgetHeaders(250); // { 'x-request-deadline': '250' }
 * ```
 */
export type BudgetHeaders = Record<string, string>;

/**
 * The headers that carry `ms` (the budget granted to the next hop: remaining − margin) onto an outgoing
 * request. `X-Request-Deadline` is always set; `grpc`, `connect` and `envoy` add their dialect's header.
 * Values are rounded down and never `0`. Throws `InvalidArgumentError` unless `ms` is positive and finite —
 * with nothing left the call must not be made.
 *
 * @example
 * ```ts
 * import { formatBudgetHeaders } from '@deadline/core/wire';
 * formatBudgetHeaders(2499.6, ['grpc']);
 * // → { 'x-request-deadline': '2499', 'grpc-timeout': '2499600u' }
 * ```
 */
export function formatBudgetHeaders(ms: number, dialects: readonly DeadlineDialect[] = []): BudgetHeaders {
  // The name written out (REQUEST_DEADLINE_HEADER): a literal key gives the object a shape V8 builds at once; a
  // computed one is defined through a keyed store on every call (~1k instructions per fetch, Node 24).
  const headers: BudgetHeaders = { 'x-request-deadline': formatRequestDeadline(ms) };
  for (const dialect of dialects) {
    switch (dialect) {
      case 'deadline':
        break;
      case 'grpc':
        headers[GRPC_TIMEOUT_HEADER] = formatGrpcTimeout(ms);
        break;
      case 'connect':
        headers[CONNECT_TIMEOUT_HEADER] = headers[REQUEST_DEADLINE_HEADER] as string;
        break;
      case 'envoy':
        headers[ENVOY_UPSTREAM_TIMEOUT_HEADER] = headers[REQUEST_DEADLINE_HEADER] as string;
        break;
      default:
        throw new InvalidArgumentError('dialects', "'deadline', 'grpc', 'connect' or 'envoy'", dialect);
    }
  }
  return headers;
}
