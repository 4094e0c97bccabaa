/**
 * Puts the call's budget and trace headers onto a request's headers in whatever shape undici was given them
 * (object, flat array, pairs, `Headers`/`Map`), **replacing** any of the same name the caller set: a stale
 * budget sent twice would let the next hop pick the wrong one.
 */

type HeaderValue = string | string[] | number | undefined | null;
/** The header shapes undici's dispatch accepts. @internal */
export type DispatchHeaders =
  | Record<string, HeaderValue>
  | readonly (string | Buffer)[]
  | Iterable<readonly [string, HeaderValue]>
  | null
  | undefined;

/** @internal */
export function replaceHeaders(
  headers: DispatchHeaders,
  add: Readonly<Record<string, string>>,
): Record<string, HeaderValue> | string[] {
  const names = Object.keys(add);
  if (names.length === 0 && headers != null) return headers as Record<string, HeaderValue>;
  if (headers == null) return { ...add };
  if (Array.isArray(headers)) {
    // A flat [name, value, name, value…] list, or a list of pairs.
    if (headers.length > 0 && Array.isArray(headers[0])) return fromPairs(headers as never, add, names);
    const out: string[] = [];
    for (let i = 0; i + 1 < headers.length; i += 2) {
      const name = String(headers[i]);
      if (!isOneOf(name, names)) out.push(name, String(headers[i + 1]));
    }
    for (const name of names) out.push(name, add[name] as string);
    return out;
  }
  if (typeof (headers as Iterable<unknown>)[Symbol.iterator] === 'function') {
    return fromPairs(headers as Iterable<readonly [string, HeaderValue]>, add, names);
  }
  const record = headers as Record<string, HeaderValue>;
  for (const name in record) {
    if (Object.hasOwn(record, name) && isOneOf(name, names)) return recordWithout(record, names, add);
  }
  // What fetch hands over nearly always: a fresh record of its own headers, none of ours among them. One copy,
  // not a store per header (each a megamorphic one: the records' shapes vary with their names).
  return Object.assign({ ...record }, add);
}

/** Whether `name` is one of `names` (lower case), in any case. Lengths first: nearly every name differs in length. */
function isOneOf(name: string, names: readonly string[]): boolean {
  for (const candidate of names) {
    if (candidate.length === name.length && name.toLowerCase() === candidate) return true;
  }
  return false;
}

/** `record`'s headers but those named in `names` (any case), then `add`. */
function recordWithout(
  record: Readonly<Record<string, HeaderValue>>,
  names: readonly string[],
  add: Readonly<Record<string, string>>,
): Record<string, HeaderValue> {
  const out: Record<string, HeaderValue> = {};
  for (const name in record) {
    if (Object.hasOwn(record, name) && !isOneOf(name, names)) out[name] = record[name];
  }
  return Object.assign(out, add);
}

function fromPairs(
  pairs: Iterable<readonly [string, HeaderValue]>,
  add: Readonly<Record<string, string>>,
  names: readonly string[],
): string[] {
  const out: string[] = [];
  for (const [name, value] of pairs) {
    if (isOneOf(name, names) || value == null) continue;
    if (Array.isArray(value)) for (const v of value) out.push(name, String(v));
    else out.push(name, String(value));
  }
  for (const [name, value] of Object.entries(add)) out.push(name, value);
  return out;
}

/** Whether `headers`, in any shape undici takes, has a header `name` (lower-case). @internal */
export function hasHeader(headers: DispatchHeaders, name: string): boolean {
  if (headers == null) return false;
  const matches = (candidate: unknown) => {
    const text = String(candidate);
    return text.length === name.length && text.toLowerCase() === name;
  };
  if (Array.isArray(headers)) {
    if (headers.length > 0 && Array.isArray(headers[0])) {
      return (headers as unknown as (readonly [string, HeaderValue])[]).some(
        ([key, value]) => matches(key) && value != null,
      );
    }
    for (let i = 0; i + 1 < headers.length; i += 2) if (matches(headers[i])) return true;
    return false;
  }
  if (typeof (headers as Iterable<unknown>)[Symbol.iterator] === 'function') {
    for (const [key, value] of headers as Iterable<readonly [string, HeaderValue]>) {
      if (matches(key) && value != null) return true;
    }
    return false;
  }
  const record = headers as Record<string, HeaderValue>;
  for (const key in record) if (Object.hasOwn(record, key) && matches(key) && record[key] != null) return true;
  return false;
}
