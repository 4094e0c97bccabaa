/**
 * The middleware's options, checked once at registration with messages that name the option.
 */
import { InvalidArgumentError } from '@deadline/core';
import { checkBoolean, checkFunction, checkNumber } from '@deadline/core/internal';
import {
  CONNECT_TIMEOUT_HEADER,
  ENVOY_EXPECTED_TIMEOUT_HEADER,
  ENVOY_UPSTREAM_TIMEOUT_HEADER,
  GRPC_TIMEOUT_HEADER,
  REQUEST_DEADLINE_AT_HEADER,
  REQUEST_DEADLINE_HEADER,
} from '@deadline/core/wire';
import type { IdempotencyStore } from './store.js';

/**
 * Options of `fastifyIdempotency` and `idempotency()`; `Req` is the host's request.
 *
 * @example
 * ```ts
 * const options: IdempotencyOptions<FastifyRequest> = {
 *   store: pgStore(pool),
 *   required: true,
 *   tenant: (request) => request.headers['x-api-client'] as string,
 * };
 * ```
 */
export interface IdempotencyOptions<Req = unknown> {
  /** Where records are kept: `pgStore(pool)`, `redisStore(redis)` or your own. */
  store: IdempotencyStore;
  /** The methods whose requests are made idempotent by a key. Default `['POST', 'PATCH']`. */
  methods?: readonly string[] | undefined;
  /** Answer 400 to a request on those methods without a key. Default false: it runs as it would without this. */
  required?: boolean | undefined;
  /**
   * The client's identity: keys are looked up together with it (and the method and route), so two clients that
   * pick the same key never see each other's answers. Default: none (one key space for everybody).
   */
  tenant?: ((request: Req) => string | undefined) | undefined;
  /**
   * A request whose key is in flight in another request: `'wait'` (default) for that one's answer within its own
   * budget, then 409 with `Retry-After` if the budget ends first; `'reject'`: 409 at once.
   */
  onBusy?: 'wait' | 'reject' | undefined;
  /**
   * The lock ends at the request's deadline plus this (ms): a request that died (a crash, a kill) holds its key
   * no longer than it could have run. Default 1 000.
   */
  lockGraceMs?: number | undefined;
  /** The lock of a request with no deadline (no server adapter, a long-lived route), ms. Default 60 000. */
  lockMs?: number | undefined;
  /** How long a key's record is kept, from its first claim (ms). Default 24 h. */
  ttlMs?: number | undefined;
  /** The largest response body stored whole (bytes); a larger one is replayed as "not stored". Default 256 KiB. */
  maxBodyBytes?: number | undefined;
  /**
   * The response headers stored and replayed (any case). Default `content-type`, `content-encoding`,
   * `content-location`, `location`, `etag`, `last-modified`.
   */
  storeHeaders?: readonly string[] | undefined;
  /** Request headers that are part of the payload's fingerprint (any case). Default none: the body only. */
  fingerprintHeaders?: readonly string[] | undefined;
  /**
   * Which statuses are a result to store. Default: all but 408, 409, 425, 429, 499, 502, 503 and 504, which say
   * the work was not done or not finished; for those the key is released, and the next retry runs (skipping the
   * steps recorded).
   */
  storeStatus?: ((status: number) => boolean) | undefined;
  /**
   * When the store cannot be reached: false (default) answers 503; true lets the request run without
   * idempotency (a retry may then repeat it).
   */
  failOpen?: boolean | undefined;
  /** The budget of each write made after the request's own deadline may have passed (result, step), ms. Default 2 000. */
  storeTimeoutMs?: number | undefined;
}

/** @internal */
export interface ResolvedOptions<Req> {
  store: IdempotencyStore;
  methods: ReadonlySet<string>;
  required: boolean;
  tenant: ((request: Req) => string | undefined) | undefined;
  onBusy: 'wait' | 'reject';
  lockGraceMs: number;
  lockMs: number;
  ttlMs: number;
  maxBodyBytes: number;
  storeHeaders: readonly string[];
  fingerprintHeaders: readonly string[];
  storeStatus: (status: number) => boolean;
  failOpen: boolean;
  storeTimeoutMs: number;
}

const NOT_A_RESULT = new Set([408, 409, 425, 429, 499, 502, 503, 504]);
/**
 * With `content-encoding`: a body stored as a compression middleware mounted after this one sent it (compressed)
 * is replayed with the encoding that says so.
 */
const DEFAULT_STORE_HEADERS = [
  'content-type',
  'content-encoding',
  'content-location',
  'location',
  'etag',
  'last-modified',
];
/** Headers that change from one retry to the next by design: never part of a fingerprint. */
const VOLATILE = new Set([
  REQUEST_DEADLINE_HEADER,
  REQUEST_DEADLINE_AT_HEADER,
  GRPC_TIMEOUT_HEADER,
  CONNECT_TIMEOUT_HEADER,
  ENVOY_EXPECTED_TIMEOUT_HEADER,
  ENVOY_UPSTREAM_TIMEOUT_HEADER,
  'traceparent',
  'tracestate',
  'baggage',
  'idempotency-key',
]);
const TOKEN = /^[!#$%&'*+.^_`|~0-9A-Za-z-]+$/;

function headerList(option: string, value: unknown, fallback: readonly string[]): readonly string[] {
  if (value === undefined) return fallback;
  if (!Array.isArray(value) || !value.every((name) => typeof name === 'string' && TOKEN.test(name))) {
    throw new InvalidArgumentError(option, 'an array of header names', value);
  }
  return value.map((name: string) => name.toLowerCase());
}

/** @internal */
export function resolveOptions<Req>(options: IdempotencyOptions<Req>): ResolvedOptions<Req> {
  if (typeof options !== 'object' || options === null) throw new InvalidArgumentError('options', 'an object', options);
  const store = options.store;
  for (const method of ['claim', 'complete', 'saveStep', 'release'] as const) {
    if (typeof store?.[method] !== 'function') {
      throw new InvalidArgumentError('store', 'an IdempotencyStore (pgStore(pool), redisStore(redis))', store);
    }
  }
  const methods = options.methods ?? ['POST', 'PATCH'];
  if (!Array.isArray(methods) || !methods.every((m) => typeof m === 'string' && TOKEN.test(m))) {
    throw new InvalidArgumentError('methods', 'an array of HTTP methods', methods);
  }
  const onBusy = options.onBusy ?? 'wait';
  if (onBusy !== 'wait' && onBusy !== 'reject') throw new InvalidArgumentError('onBusy', "'wait' or 'reject'", onBusy);
  const fingerprintHeaders = headerList('fingerprintHeaders', options.fingerprintHeaders, []);
  const volatile = fingerprintHeaders.find((name) => VOLATILE.has(name));
  if (volatile !== undefined) {
    throw new InvalidArgumentError(
      'fingerprintHeaders',
      'headers that stay the same on a retry (budget, trace and key headers change by design)',
      volatile,
    );
  }
  return {
    store,
    methods: new Set(methods.map((m) => m.toUpperCase())),
    required: checkBoolean('required', options.required) ?? false,
    tenant: checkFunction('tenant', options.tenant),
    onBusy,
    lockGraceMs: checkNumber('lockGraceMs', options.lockGraceMs, { min: 0, max: 3_600_000 }) ?? 1_000,
    lockMs: checkNumber('lockMs', options.lockMs, { min: 1, max: 2 ** 31 - 1 }) ?? 60_000,
    ttlMs: checkNumber('ttlMs', options.ttlMs, { min: 1_000, max: 366 * 86_400_000 }) ?? 86_400_000,
    maxBodyBytes: checkNumber('maxBodyBytes', options.maxBodyBytes, { min: 0, max: 64 * 1024 * 1024 }) ?? 256 * 1024,
    storeHeaders: headerList('storeHeaders', options.storeHeaders, DEFAULT_STORE_HEADERS),
    fingerprintHeaders,
    storeStatus: checkFunction('storeStatus', options.storeStatus) ?? ((status) => !NOT_A_RESULT.has(status)),
    failOpen: checkBoolean('failOpen', options.failOpen) ?? false,
    storeTimeoutMs: checkNumber('storeTimeoutMs', options.storeTimeoutMs, { min: 1, max: 600_000 }) ?? 2_000,
  };
}
