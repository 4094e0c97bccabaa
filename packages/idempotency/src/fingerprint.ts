/**
 * The fingerprint of a request's payload: what tells a retry (same key, same payload) from a reuse of the key for
 * something else (422). Taken once, at claim time, from the parsed body in canonical form: a JSON object's keys
 * sorted, so that a client that serialises the same order differently on a retry is not refused. Headers are left
 * out unless named (`fingerprintHeaders`), and the budget and trace headers never go in: they change on every
 * retry by design.
 */
import { createHash } from 'node:crypto';

/**
 * The canonical text of a parsed body: JSON with sorted keys for objects and arrays; strings and bytes tagged so
 * that `"1"` and `1` differ. `undefined` and `null` (no body) are the empty text.
 *
 * @example
 * ```ts
 * canonicalBody({ b: 1, a: [true, null] }) === canonicalBody({ a: [true, null], b: 1 }); // true
 * ```
 */
export function canonicalBody(body: unknown): string {
  if (body === undefined || body === null) return '';
  if (typeof body === 'string') return `s:${body}`;
  if (Buffer.isBuffer(body)) return `b:${body.toString('base64')}`;
  if (body instanceof Uint8Array)
    return `b:${Buffer.from(body.buffer, body.byteOffset, body.byteLength).toString('base64')}`;
  return `j:${canonicalJson(body)}`;
}

function canonicalJson(value: unknown): string {
  if (typeof value === 'bigint') return `${value}n`;
  if (value === null || typeof value !== 'object') {
    // JSON has no undefined, function or symbol: as JSON.stringify drops them in objects, they are null here.
    const text = JSON.stringify(value);
    return text === undefined ? 'null' : text;
  }
  if (typeof (value as { toJSON?: unknown }).toJSON === 'function') {
    return canonicalJson((value as { toJSON(): unknown }).toJSON());
  }
  if (Array.isArray(value)) return `[${value.map(canonicalJson).join(',')}]`;
  const record = value as Record<string, unknown>;
  const keys = Object.keys(record)
    .filter((key) => {
      const type = typeof record[key];
      return type !== 'undefined' && type !== 'function' && type !== 'symbol';
    })
    .sort();
  return `{${keys.map((key) => `${JSON.stringify(key)}:${canonicalJson(record[key])}`).join(',')}}`;
}

/**
 * The fingerprint: SHA-256 of the canonical body and the named headers, base64url.
 *
 * @example
 * ```ts
 * const fingerprint = fingerprintOf(request.body, {});
 * ```
 */
export function fingerprintOf(body: unknown, headers: Readonly<Record<string, string | undefined>>): string {
  const hash = createHash('sha256').update(canonicalBody(body));
  for (const name of Object.keys(headers).sort()) hash.update(`\n${name}:${headers[name] ?? ''}`);
  return hash.digest('base64url');
}
