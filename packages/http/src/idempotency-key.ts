/**
 * The `Idempotency-Key` of an outgoing call that changes something, inside work that has keys (an idempotent
 * request, a keyed `retry()`): `IdempotencyKeys` (`@deadline/idempotency`) gives one per call, in order, so that an attempt that
 * takes the work over sends the same keys as the attempt before it. A key the caller set is left as it is.
 */
import { IDEMPOTENCY_KEYS } from '@deadline/idempotency/keys';

/** The header, lower-case as undici and node:http send it. */
export const IDEMPOTENCY_KEY_HEADER = 'idempotency-key';

/**
 * The key for a call of `method` in the current context, or `undefined`: no keys here, a method that needs
 * none (only POST and PATCH are not idempotent by themselves; PUT and DELETE are), or the caller has its own
 * (`callerHasKey(headers)`, a function of the module so that no call allocates one: every call of every request
 * comes through here, and almost none has keys).
 * @internal
 */
export function outgoingKey<H>(
  method: string | undefined,
  headers: H,
  callerHasKey: (headers: H) => boolean,
): string | undefined {
  const keys = IDEMPOTENCY_KEYS.get();
  if (keys === undefined || method === undefined) return undefined;
  const upper = method.length === 4 || method.length === 5 ? method.toUpperCase() : '';
  if (upper !== 'POST' && upper !== 'PATCH') return undefined;
  return callerHasKey(headers) ? undefined : keys.next();
}

/** Whether a header record has an `Idempotency-Key` (any case). @internal */
export function recordHasKey(headers: Readonly<Record<string, unknown>> | undefined): boolean {
  if (headers === undefined) return false;
  for (const key of Object.keys(headers)) {
    if (key.length === IDEMPOTENCY_KEY_HEADER.length && key.toLowerCase() === IDEMPOTENCY_KEY_HEADER) {
      if (headers[key] != null) return true;
    }
  }
  return false;
}
