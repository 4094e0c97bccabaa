/**
 * The header dialects this project reads and writes. All values are relative budgets in some unit; the
 * absolute form is a separate header, read only when the receiver opts in.
 */

/**
 * Ours: the remaining budget in whole milliseconds, e.g. `X-Request-Deadline: 2500`.
 *
 * @example
 * ```ts
 * const raw = req.headers[REQUEST_DEADLINE_HEADER]; // '2500'
 * ```
 */
export const REQUEST_DEADLINE_HEADER = 'x-request-deadline';
/**
 * Ours, absolute form (epoch ms). Read as a budget only with the parser's `absolute` option; written only on
 * messages, beside `X-Request-Deadline`, for their consumer to learn how long they waited in the broker
 * (`waitedMs()`).
 *
 * @example
 * ```ts
 * headers[REQUEST_DEADLINE_AT_HEADER] = String(Date.now() + 2_500);
 * ```
 */
export const REQUEST_DEADLINE_AT_HEADER = 'x-request-deadline-at';
/**
 * gRPC over HTTP/2: 1–8 digits and a unit (`H M S m u n`), e.g. `grpc-timeout: 2500m`.
 *
 * @example
 * ```ts
 * const ms = parseGrpcTimeout(req.headers[GRPC_TIMEOUT_HEADER]);
 * ```
 */
export const GRPC_TIMEOUT_HEADER = 'grpc-timeout';
/**
 * Connect protocol: whole milliseconds, at most 10 digits; `0` is a timeout that has already expired.
 *
 * @example
 * ```ts
 * const { budgetMs } = parseBudget({ [CONNECT_TIMEOUT_HEADER]: '0' }); // 0: nothing left
 * ```
 */
export const CONNECT_TIMEOUT_HEADER = 'connect-timeout-ms';
/**
 * Set by Envoy on the request it forwards: the route timeout it will enforce, in ms. Read only.
 *
 * @example
 * ```ts
 * const envoyMs = parseRequestDeadline(req.headers[ENVOY_EXPECTED_TIMEOUT_HEADER]);
 * ```
 */
export const ENVOY_EXPECTED_TIMEOUT_HEADER = 'x-envoy-expected-rq-timeout-ms';
/**
 * Asks an Envoy in front of the next hop to time the request out after this many ms. Written only.
 *
 * @example
 * ```ts
 * formatBudgetHeaders(900, ['envoy'])[ENVOY_UPSTREAM_TIMEOUT_HEADER]; // '900'
 * ```
 */
export const ENVOY_UPSTREAM_TIMEOUT_HEADER = 'x-envoy-upstream-rq-timeout-ms';
/**
 * Sent back with a 504 by a hop whose deadline fired, naming that hop.
 *
 * @example
 * ```ts
 * res.writeHead(504, { [DEADLINE_EXCEEDED_BY_HEADER]: 'orders' });
 * ```
 */
export const DEADLINE_EXCEEDED_BY_HEADER = 'x-deadline-exceeded-by';

/**
 * Sent back with a 503 by a hop that refused a request at arrival because it was overloaded (admission), naming
 * that hop; `Retry-After` comes with it.
 *
 * @example
 * ```ts
 * if (response.status === 503) log.warn({ by: response.headers.get(DEADLINE_REFUSED_BY_HEADER) }, 'shed');
 * ```
 */
export const DEADLINE_REFUSED_BY_HEADER = 'x-deadline-refused-by';

/**
 * gRPC's trailer for how long a client's retry policy should wait before trying again, in ms ("server pushback",
 * gRPC A6): sent by a gRPC or Connect server with the `UNAVAILABLE` of a call refused because it was overloaded.
 *
 * @example
 * ```ts
 * const waitMs = Number(status.metadata.get(GRPC_RETRY_PUSHBACK_HEADER)[0] ?? 0);
 * ```
 */
export const GRPC_RETRY_PUSHBACK_HEADER = 'grpc-retry-pushback-ms';

/**
 * A header dialect: `deadline` (ours), `grpc`, `connect`, `envoy`.
 * Reading `envoy` means `x-envoy-expected-rq-timeout-ms`; writing it means `x-envoy-upstream-rq-timeout-ms`.
 *
 * @example
 * ```ts
 * const accept: DeadlineDialect[] = ['deadline', 'grpc'];
 * const parse = createBudgetParser({ dialects: accept });
 * ```
 */
export type DeadlineDialect = 'deadline' | 'grpc' | 'connect' | 'envoy';

/**
 * Every dialect, in the order headers are read and reported.
 *
 * @example
 * ```ts
 * const parse = createBudgetParser({ dialects: ALL_DIALECTS.filter((d) => d !== 'envoy') });
 * ```
 */
export const ALL_DIALECTS: readonly DeadlineDialect[] = Object.freeze(['deadline', 'grpc', 'connect', 'envoy']);

/**
 * A header a budget can be read from.
 *
 * @example
 * ```ts
 * const { header }: { header: BudgetHeader | undefined } = parseBudget(req.headers);
 * ```
 */
export type BudgetHeader =
  | typeof REQUEST_DEADLINE_HEADER
  | typeof REQUEST_DEADLINE_AT_HEADER
  | typeof GRPC_TIMEOUT_HEADER
  | typeof CONNECT_TIMEOUT_HEADER
  | typeof ENVOY_EXPECTED_TIMEOUT_HEADER;
