/**
 * What a failed call says about its downstream. One table for the breaker (does it count against the
 * downstream?) and for retry (is another attempt worth it?), so the two never disagree about an error.
 */
import { CancelledError, DeadlineExceededError, InvalidArgumentError } from '@deadline/core';
import { CircuitOpenError } from './circuit-open-error.js';

/**
 * How a failure is counted: against the downstream (`failure`), or not at all (`neutral`: the caller's fault,
 * a client error, a cancel, our own too-small budget).
 *
 * @example
 * ```ts
 * const verdict: Verdict = classifyError(error);
 * ```
 */
export type Verdict = 'failure' | 'neutral';

/** Socket and transport errors: the downstream (or the path to it) is down or broke the connection. */
const TRANSPORT_CODES = new Set([
  'ECONNREFUSED',
  'ECONNRESET',
  'ECONNABORTED',
  'EPIPE',
  'ETIMEDOUT',
  'EHOSTUNREACH',
  'ENETUNREACH',
  'EAI_AGAIN',
  'UND_ERR_SOCKET',
  'UND_ERR_CONNECT_TIMEOUT',
  'UND_ERR_HEADERS_TIMEOUT',
  'UND_ERR_BODY_TIMEOUT',
  'UND_ERR_CLOSED',
  // mysql2 and ioredis
  'PROTOCOL_CONNECTION_LOST',
  'ER_CON_COUNT_ERROR',
]);

/** Codes where the request certainly never reached the server: safe to retry even when not idempotent. */
const NOT_SENT_CODES = new Set(['ECONNREFUSED', 'EHOSTUNREACH', 'ENETUNREACH', 'EAI_AGAIN', 'UND_ERR_CONNECT_TIMEOUT']);

/** SQLSTATE classes that mean the server or the connection is in trouble (PostgreSQL, MySQL/MariaDB). */
const SERVER_SQLSTATE_CLASSES = new Set(['08', '53', '57', '58', 'XX', 'HY']);

function codeOf(error: unknown): string | undefined {
  for (let e = error, depth = 0; typeof e === 'object' && e !== null && depth < 5; depth++) {
    const code = (e as { code?: unknown }).code;
    if (typeof code === 'string' && code.length > 0) return code;
    // fetch wraps the socket error: TypeError('fetch failed', { cause })
    e = (e as { cause?: unknown }).cause;
  }
  return undefined;
}

/**
 * The HTTP status an error or a response carries (`statusCode` of undici and of our errors, `status` of a fetch
 * `Response`, axios' `response.status`), or `undefined`.
 *
 * @example
 * ```ts
 * const response = await fetch('http://inventory/stock');
 * if ((statusOf(response) ?? 0) >= 500) breakerPermit.failure();
 * ```
 */
export function statusOf(value: unknown): number | undefined {
  if (typeof value !== 'object' || value === null) return undefined;
  const v = value as { statusCode?: unknown; status?: unknown; response?: { status?: unknown } };
  // Checked in turn, without building an array: this runs on every result a breaker sees.
  if (isStatus(v.statusCode)) return v.statusCode;
  if (isStatus(v.status)) return v.status;
  const nested = v.response?.status;
  return isStatus(nested) ? nested : undefined;
}

function isStatus(value: unknown): value is number {
  return typeof value === 'number' && Number.isInteger(value) && value >= 100 && value <= 599;
}

/**
 * The default classification. Counted against the downstream: socket errors (refused, reset, timeouts),
 * 5xx, driver connection errors (SQLSTATE classes 08, 53, 57, 58, XX), our deadline cutting a call that had at
 * least `deadlineFloorMs` (its answer was late), and errors this table does not know. Neutral: 4xx, other
 * SQLSTATEs (syntax, constraint, data), cancels (the client left), invalid arguments, an open circuit, a
 * deadline that fired on a call that was given less than the floor — our own tiny budget is not the
 * downstream's fault — and a downstream's own 504 naming its hop (`whose: 'downstream:<hop>'`): it answered,
 * honouring the budget, which ran out there.
 *
 * @example
 * ```ts
 * classifyError(new DeadlineExceededError({ phase: 'during-call' }), { givenMs: 20, deadlineFloorMs: 100 }); // 'neutral'
 * ```
 */
export function classifyError(
  thrown: unknown,
  { givenMs = Number.POSITIVE_INFINITY, deadlineFloorMs = 0 }: { givenMs?: number; deadlineFloorMs?: number } = {},
): Verdict {
  const error = unwrapped(thrown);
  if (error instanceof CancelledError || error instanceof InvalidArgumentError || error instanceof CircuitOpenError) {
    return 'neutral';
  }
  if (error instanceof DeadlineExceededError) {
    // Not made, or answered by the downstream itself with a 504 naming its hop: it was up and honouring the
    // budget we gave it, which ran out there — queued behind others, or on its own dependency (which that hop's
    // own breaker counts). Counted, an overloaded downstream that sheds late requests would trip the breaker,
    // and the open circuit would refuse the requests it could still have served.
    if (error.phase === 'before-call' || error.whose !== 'local') return 'neutral';
    return givenMs >= deadlineFloorMs ? 'failure' : 'neutral';
  }
  const status = statusOf(error);
  if (status !== undefined) return status >= 500 ? 'failure' : 'neutral';
  const code = codeOf(error);
  if (code !== undefined) {
    if (TRANSPORT_CODES.has(code)) return 'failure';
    // A five-character SQLSTATE (always with a digit, unlike EBUSY): the class (first two) says whose fault.
    if (/^[0-9A-Z]{5}$/.test(code) && /\d/.test(code)) {
      return SERVER_SQLSTATE_CLASSES.has(code.slice(0, 2)) ? 'failure' : 'neutral';
    }
    if (code.startsWith('ER_')) return 'neutral';
  }
  // ioredis: the server answered with an error about the command (WRONGTYPE, a script's) — unless it says the
  // server itself cannot serve (loading, busy with a script, no master, cluster down, read-only replica).
  if ((error as { name?: unknown } | null)?.name === 'ReplyError') {
    const message = String((error as { message?: unknown }).message);
    return /^(LOADING|BUSY|MASTERDOWN|CLUSTERDOWN|TRYAGAIN|READONLY|NOREPLICAS)\b/.test(message)
      ? 'failure'
      : 'neutral';
  }
  return 'failure';
}

/**
 * The error that matters: the global fetch wraps every dispatcher error (ours included) in
 * `TypeError('fetch failed', { cause })`.
 */
function unwrapped(error: unknown): unknown {
  if (error instanceof TypeError && error.message === 'fetch failed') {
    const cause = (error as { cause?: unknown }).cause;
    if (typeof cause === 'object' && cause !== null) return cause;
  }
  return error;
}

/**
 * Whether the request certainly never reached the server (connection refused, no route, not sent for lack of
 * time), so even a non-idempotent call may be retried.
 *
 * @example
 * ```ts
 * await retry(() => createOrder(order), { idempotent: false }); // retried only when neverSent(error)
 * ```
 */
export function neverSent(thrown: unknown): boolean {
  const error = unwrapped(thrown);
  if (error instanceof DeadlineExceededError) return error.phase === 'before-call';
  const code = codeOf(error);
  return code !== undefined && NOT_SENT_CODES.has(code);
}

/** Whether a failure is worth another attempt (given time, attempts and budget remain). @internal */
export function isRetryableError(thrown: unknown): boolean {
  const error = unwrapped(thrown);
  if (error instanceof CancelledError || error instanceof CircuitOpenError || error instanceof InvalidArgumentError) {
    return false;
  }
  const status = statusOf(error);
  if (status !== undefined) return status === 502 || status === 503 || status === 504;
  const code = codeOf(error);
  if (code !== undefined && TRANSPORT_CODES.has(code)) return true;
  // A deadline error here is the attempt's own (the caller checks the request's separately).
  return error instanceof DeadlineExceededError;
}
