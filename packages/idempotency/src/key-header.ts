/**
 * The `Idempotency-Key` request header (draft-ietf-httpapi-idempotency-key-header): a structured-field string,
 * `"8e03978e-40d5-43e8-bc93-6894a57f9324"`. Many clients send the value unquoted; that is accepted too.
 */

/**
 * The header's name, lower-case as Node gives request headers.
 *
 * @example
 * ```ts
 * const value = request.headers[IDEMPOTENCY_KEY_HEADER];
 * ```
 */
export const IDEMPOTENCY_KEY_HEADER = 'idempotency-key';

/**
 * The longest key accepted (the draft recommends that servers set a limit; Stripe's is 255).
 *
 * @example
 * ```ts
 * if (key.length > MAX_KEY_LENGTH) throw new Error('key too long');
 * ```
 */
export const MAX_KEY_LENGTH = 255;

const PRINTABLE = /^[\x20-\x7e]*$/;

/**
 * What a request's `Idempotency-Key` headers say: no key, a key, or why the value is not one.
 *
 * @example
 * ```ts
 * const read: KeyHeader = parseIdempotencyKey(request.headersDistinct['idempotency-key']);
 * if (read.kind === 'invalid') reply.code(400).send(read.reason);
 * ```
 */
export type KeyHeader =
  | { readonly kind: 'absent' }
  | { readonly kind: 'key'; readonly key: string }
  | { readonly kind: 'invalid'; readonly reason: string };

/**
 * Reads the key from the header's values (Node's `headersDistinct`, or a single value). Never throws.
 *
 * @example
 * ```ts
 * parseIdempotencyKey('"a1b2"'); // { kind: 'key', key: 'a1b2' }
 * parseIdempotencyKey('a1b2'); // the same, unquoted
 * parseIdempotencyKey(['a', 'b']); // { kind: 'invalid', reason: 'more than one Idempotency-Key header' }
 * ```
 */
export function parseIdempotencyKey(values: string | readonly string[] | undefined): KeyHeader {
  if (values === undefined) return { kind: 'absent' };
  if (typeof values !== 'string') {
    if (!Array.isArray(values) || values.length === 0) return { kind: 'absent' };
    if (values.length > 1) return { kind: 'invalid', reason: 'more than one Idempotency-Key header' };
    return parseIdempotencyKey(values[0]);
  }
  const value = values.trim();
  if (value.length === 0) return { kind: 'invalid', reason: 'the Idempotency-Key header is empty' };
  const key = value.startsWith('"') ? parseQuoted(value) : value;
  if (typeof key !== 'string') return key;
  if (key.length === 0) return { kind: 'invalid', reason: 'the Idempotency-Key is an empty string' };
  if (key.length > MAX_KEY_LENGTH) {
    return { kind: 'invalid', reason: `the Idempotency-Key is longer than ${MAX_KEY_LENGTH} characters` };
  }
  if (!PRINTABLE.test(key)) {
    return { kind: 'invalid', reason: 'the Idempotency-Key holds characters other than visible ASCII and space' };
  }
  return { kind: 'key', key };
}

/** An sf-string (RFC 9651 §4.2.5), with any parameters after it ignored. */
function parseQuoted(value: string): string | KeyHeader {
  let key = '';
  for (let i = 1; i < value.length; i++) {
    const char = value[i] as string;
    if (char === '\\') {
      const next = value[++i];
      if (next !== '"' && next !== '\\') {
        return { kind: 'invalid', reason: 'the quoted Idempotency-Key has an escape other than \\" or \\\\' };
      }
      key += next;
    } else if (char === '"') {
      const rest = value.slice(i + 1).trimStart();
      if (rest.length === 0 || rest.startsWith(';')) return key;
      return { kind: 'invalid', reason: 'the Idempotency-Key has text after its closing quote' };
    } else {
      key += char;
    }
  }
  return { kind: 'invalid', reason: 'the quoted Idempotency-Key has no closing quote' };
}
