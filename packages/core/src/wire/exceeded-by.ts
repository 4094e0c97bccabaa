/**
 * `X-Deadline-Exceeded-By: <hop>` on a 504: the hop whose deadline fired. Read from a downstream's answer, it
 * is untrusted input: anything but one plausible hop name is ignored rather than passed on.
 */

/** Visible ASCII, as `checkHop` accepts for our own names: what Node lets us send back in a header. */
const HOP = /^[\x21-\x7e]{1,128}$/;

/**
 * The hop named by an `X-Deadline-Exceeded-By` value, or `undefined` when there is none or it is not a valid
 * hop name (empty, too long, control or non-ASCII characters, several different values).
 *
 * @example
 * ```ts
 * import { parseExceededBy } from '@deadline/core/wire';
 * parseExceededBy('orders'); // 'orders'
 * parseExceededBy(['orders', 'orders']); // 'orders'
 * parseExceededBy('or ders'); // undefined
 * ```
 */
export function parseExceededBy(value: string | readonly string[] | undefined | null): string | undefined {
  if (typeof value === 'string') {
    const hop = value.trim();
    return HOP.test(hop) ? hop : undefined;
  }
  if (!Array.isArray(value) || value.length === 0) return undefined;
  // Repeated headers must agree; two different names say nothing reliable.
  const first = parseExceededBy(value[0] as string);
  for (const other of value) if (parseExceededBy(other) !== first) return undefined;
  return first;
}
