/**
 * The answers the middleware gives itself, as RFC 9457 problem documents (`application/problem+json`), the form
 * the IETF draft asks for. Each `type` is a URN of this package: stable, for clients to match on; the two a client
 * must expect when it retries (409 in use, 422 reused) carry the family's `code` too (`ErrorCode` of `@deadline/core`).
 */
import { ErrorCode } from '@deadline/core';

/**
 * An answer: status, headers and body.
 *
 * @example
 * ```ts
 * const answer: Answer = conflict(1_200);
 * reply.code(answer.status).headers(answer.headers).send(answer.body);
 * ```
 */
export interface Answer {
  readonly status: number;
  readonly headers: Readonly<Record<string, string>>;
  readonly body: string | Buffer;
}

/**
 * The `type` of each problem this package answers with.
 *
 * @example
 * ```ts
 * if (body.type === IdempotencyProblem.InUse) await sleep(Number(response.headers.get('retry-after')) * 1000);
 * ```
 */
export const IdempotencyProblem = {
  Missing: 'urn:deadline:idempotency:key-missing',
  Invalid: 'urn:deadline:idempotency:key-invalid',
  InUse: 'urn:deadline:idempotency:key-in-use',
  Reused: 'urn:deadline:idempotency:key-reused',
  StoreUnavailable: 'urn:deadline:idempotency:store-unavailable',
  BodyNotStored: 'urn:deadline:idempotency:body-not-stored',
} as const;

const PROBLEM = 'application/problem+json';

function problem(
  status: number,
  type: string,
  title: string,
  detail: string,
  extra: Record<string, unknown> = {},
  headers: Record<string, string> = {},
): Answer {
  return {
    status,
    headers: { 'content-type': PROBLEM, ...headers },
    body: JSON.stringify({ type, title, status, detail, ...extra }),
  };
}

/** @internal 400: a key is required on this request and none came. */
export const missing = (): Answer =>
  problem(
    400,
    IdempotencyProblem.Missing,
    'Idempotency-Key is missing',
    'This request needs an Idempotency-Key header.',
  );

/** @internal 400: the header is not a key. */
export const invalid = (reason: string): Answer =>
  problem(400, IdempotencyProblem.Invalid, 'Idempotency-Key is not valid', `${reason}.`);

/** @internal 409: a request with this key is still in flight. */
export const conflict = (lockLeftMs: number): Answer =>
  problem(
    409,
    IdempotencyProblem.InUse,
    'A request with this Idempotency-Key is in progress',
    'Retry after the time given: the first request will have finished or given up its key.',
    { code: ErrorCode.IdempotencyConflict },
    { 'retry-after': String(Math.max(1, Math.ceil(lockLeftMs / 1_000))) },
  );

/** @internal 422: the key was used with a different payload. */
export const reused = (): Answer =>
  problem(
    422,
    IdempotencyProblem.Reused,
    'Idempotency-Key reused with a different payload',
    'This key was first used with another request body; a retry must send the same one. Use a new key for a new request.',
    { code: ErrorCode.IdempotencyMismatch },
  );

/** @internal 503: the store could not be reached (fail closed). */
export const storeUnavailable = (): Answer =>
  problem(
    503,
    IdempotencyProblem.StoreUnavailable,
    'Idempotency store unavailable',
    'The request was not run: whether it already ran under this key cannot be checked now. Retry later with the same key.',
    {},
    { 'retry-after': '1' },
  );

/** @internal The replay of a result whose body was not stored whole: its status, and a body that says so. */
export const bodyNotStored = (status: number, bodyBytes: number, headers: Record<string, string>): Answer =>
  problem(
    status,
    IdempotencyProblem.BodyNotStored,
    'The original response body was not stored',
    bodyBytes < 0
      ? 'The request ran to completion with this status; its body was streamed and cannot be replayed.'
      : `The request ran to completion with this status; its body (${bodyBytes} bytes) was too large to store.`,
    { bodyBytes },
    { ...headers, 'content-type': PROBLEM },
  );
