/**
 * A received message's headers (`MsgHdrs`, or none) as the core's header source. They came off the wire, from any
 * publisher: names in any case (a Go client writes `X-Request-Deadline`), repeated values, anything at all —
 * reading them never throws.
 */
import type { NatsHeadersLike } from './nats-types.js';

/** Headers read by lower-case name: a `HeaderSource` of the core. @internal */
export interface MessageHeaders {
  get(name: string): string | undefined;
}

const NONE: MessageHeaders = { get: () => undefined };

/**
 * `headers` read by lower-case name. Repeated values are joined with commas, as HTTP joins them — and so refused as
 * a budget, which must be one value. Read once, on the first lookup (the budget parser asks for several names).
 * @internal
 */
export function headerSource(headers: NatsHeadersLike | undefined): MessageHeaders {
  if (headers === undefined || headers === null || typeof headers !== 'object') return NONE;
  let table: Map<string, string> | undefined;
  return {
    get(name) {
      table ??= tableOf(headers);
      return table.get(name);
    },
  };
}

function tableOf(headers: NatsHeadersLike): Map<string, string> {
  const table = new Map<string, string>();
  try {
    for (const [key, values] of headers) {
      if (typeof key !== 'string' || !Array.isArray(values)) continue;
      const name = key.toLowerCase();
      const text = values.filter((value) => typeof value === 'string' && value !== '').join(', ');
      if (text === '') continue;
      const before = table.get(name);
      // Two names that differ only in case are one header said twice.
      table.set(name, before === undefined ? text : `${before}, ${text}`);
    }
  } catch {
    // Not the headers of a client we know: what was read so far.
  }
  return table;
}
