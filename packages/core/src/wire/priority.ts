/**
 * A caller's priority, for admission: the urgency of RFC 9218's `Priority` header (HTTP's Extensible Priorities), a
 * Structured Fields dictionary such as `u=5, i`. Urgency runs from 0 (most urgent) to 7 (background); a request
 * without it has 3. Servers read it only from callers they trust: anyone else could buy a place ahead.
 */

/**
 * RFC 9218's header name.
 *
 * @example
 * ```ts
 * const urgency = parseUrgency(req.headers[PRIORITY_HEADER]);
 * ```
 */
export const PRIORITY_HEADER = 'priority';

/**
 * Urgency when the header, or its `u` member, is absent or not an integer 0–7 (RFC 9218 §4.1).
 *
 * @example
 * ```ts
 * const shedFirst = parseUrgency(header) > DEFAULT_URGENCY;
 * ```
 */
export const DEFAULT_URGENCY = 3;

/**
 * The urgency in a `Priority` header value (0 most urgent … 7), or {@link DEFAULT_URGENCY} when it carries none that
 * is valid. Repeated headers are one dictionary (joined by commas): the last `u` wins, as Structured Fields say.
 * Never throws.
 *
 * @example
 * ```ts
 * parseUrgency('u=5, i'); // 5
 * parseUrgency(undefined); // 3
 * ```
 */
export function parseUrgency(value: string | readonly string[] | undefined): number {
  if (value === undefined) return DEFAULT_URGENCY;
  const text = typeof value === 'string' ? value : value.join(',');
  // Bounded: a header of any size is read up to its first few members' worth.
  if (text.length > 1_024) return DEFAULT_URGENCY;
  let urgency = DEFAULT_URGENCY;
  for (const member of text.split(',')) {
    const equals = member.indexOf('=');
    const key = (equals === -1 ? member : member.slice(0, equals)).trim();
    if (key !== 'u') continue;
    // A member's parameters (`;…`) belong to it, not to its value.
    const raw = equals === -1 ? '' : (member.slice(equals + 1).split(';')[0] as string).trim();
    // `u` alone is the boolean true: not an integer, so it is ignored (RFC 9218 §4).
    urgency = /^[0-7]$/.test(raw) ? Number(raw) : DEFAULT_URGENCY;
  }
  return urgency;
}
