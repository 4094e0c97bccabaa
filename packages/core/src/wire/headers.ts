/**
 * Reading one header from whatever the host hands us: Node's `IncomingHttpHeaders` (lower-case keys, a
 * string or an array), a WHATWG `Headers`, or a `Map`.
 */

/**
 * Headers as hosts provide them. Plain records must use lower-case names, as Node's do.
 *
 * @example
 * ```ts
 * parseBudget(req.headers);           // Node's IncomingHttpHeaders
 * parseBudget(new Headers(init));     // WHATWG Headers (fetch, undici)
 * ```
 */
export type HeaderSource =
  | Readonly<Record<string, string | readonly string[] | number | undefined>>
  | { get(name: string): string | null | undefined };

/** The raw value of header `name` (lower case), or `undefined`. */
export function readHeader(headers: HeaderSource, name: string): unknown {
  if (typeof (headers as { get?: unknown }).get === 'function') {
    const value = (headers as { get(name: string): string | null | undefined }).get(name);
    return value ?? undefined;
  }
  return (headers as Readonly<Record<string, unknown>>)[name];
}
