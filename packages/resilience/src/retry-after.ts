/**
 * `Retry-After` (RFC 9110 §10.2.3): delay-seconds or an HTTP-date. A server that says when to come back is
 * honoured; one that says something unreadable is ignored (the backoff decides), never trusted blindly.
 */

/** Longest wait honoured: beyond it the answer is treated as "not within any budget we have". */
const MAX_RETRY_AFTER_MS = 24 * 60 * 60 * 1000;

/**
 * The wait a `Retry-After` value asks for, in ms, or `undefined` when absent or malformed. `now` is the wall
 * clock (ms since the epoch) an HTTP-date is measured from.
 *
 * @example
 * ```ts
 * parseRetryAfter('120'); // 120000
 * parseRetryAfter('Wed, 21 Oct 2015 07:28:00 GMT', Date.parse('Wed, 21 Oct 2015 07:27:00 GMT')); // 60000
 * parseRetryAfter('soon'); // undefined
 * ```
 */
export function parseRetryAfter(value: unknown, now: number = Date.now()): number | undefined {
  const text = Array.isArray(value) ? value[0] : value;
  if (typeof text !== 'string') return undefined;
  const trimmed = text.trim();
  if (/^\d{1,10}$/.test(trimmed)) return Math.min(Number(trimmed) * 1000, MAX_RETRY_AFTER_MS);
  // An HTTP-date: IMF-fixdate (and the obsolete forms Date.parse reads); a bare number or junk is not a date.
  if (!/^[A-Za-z]{3},? /.test(trimmed) || trimmed.length > 64) return undefined;
  const at = Date.parse(trimmed);
  if (Number.isNaN(at)) return undefined;
  return Math.min(Math.max(0, at - now), MAX_RETRY_AFTER_MS);
}

/** The `Retry-After` of a response or an error carrying one (fetch `Response`, undici, axios), if any. @internal */
export function retryAfterOf(value: unknown): number | undefined {
  if (typeof value !== 'object' || value === null) return undefined;
  const v = value as { headers?: unknown; response?: { headers?: unknown } };
  for (const headers of [v.headers, v.response?.headers]) {
    if (typeof headers !== 'object' || headers === null) continue;
    const raw =
      typeof (headers as { get?: unknown }).get === 'function'
        ? (headers as { get(name: string): unknown }).get('retry-after')
        : (headers as Record<string, unknown>)['retry-after'];
    const ms = parseRetryAfter(raw);
    if (ms !== undefined) return ms;
  }
  return undefined;
}
