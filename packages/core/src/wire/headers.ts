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

/** A header table read by name: {@link tableHeaders}. @internal */
export interface TableHeaders {
  get(name: string): string | undefined;
}

const NO_HEADERS: TableHeaders = { get: () => undefined };

/**
 * A message's header table (AMQP headers, a packet's metadata) as a {@link HeaderSource}: names in any case (a table
 * keeps its sender's), values that are text or finite numbers (AMQP tables are typed: a publisher may send
 * `x-request-deadline` as a number); bytes, objects and anything else are no value. Never throws, whatever the table
 * holds (it came off the wire). Anything but an object is an empty table.
 * @internal
 */
export function tableHeaders(table: unknown): TableHeaders {
  if (typeof table !== 'object' || table === null) return NO_HEADERS;
  const entries = table as Readonly<Record<string, unknown>>;
  return {
    get(name) {
      const exact = Object.hasOwn(entries, name) ? entries[name] : undefined;
      if (exact !== undefined) return textOf(exact);
      for (const key of Object.keys(entries)) if (key.toLowerCase() === name) return textOf(entries[key]);
      return undefined;
    },
  };
}

function textOf(value: unknown): string | undefined {
  if (typeof value === 'string') return value === '' ? undefined : value;
  if (typeof value === 'number' && Number.isFinite(value)) return String(value);
  return undefined;
}
