/**
 * What a store keeps per key, and the four operations the middleware needs from it. Each is atomic on the
 * store's side and reads time from the store's own clock, so that instances with skewed clocks agree on when a
 * lock has expired. `pgStore()` and `redisStore()` implement it; another backend can too (the conformance tests
 * in test/conformance.ts say what it must do).
 */

/**
 * A response as stored, and as replayed.
 *
 * @example
 * ```ts
 * const response: StoredResponse = { status: 201, headers: { 'content-type': 'application/json' }, body: Buffer.from('{"id":7}'), bodyBytes: 8 };
 * ```
 */
export interface StoredResponse {
  readonly status: number;
  /** The allow-listed headers (`storeHeaders`), lower-case names. */
  readonly headers: Readonly<Record<string, string>>;
  /** The body, or `undefined` when it was not stored whole (over `maxBodyBytes`, or streamed). */
  readonly body: Buffer | undefined;
  /** The size of the body that was sent (bytes); -1 when unknown (a stream). */
  readonly bodyBytes: number;
}

/**
 * One claim: the key's scope (already hashed with its tenant, method and route), the payload's fingerprint and
 * how long the lock and the record last.
 *
 * @example
 * ```ts
 * const input: ClaimInput = { scope, fingerprint, token: randomUUID(), secret: randomUUID(), lockMs: 1_500, ttlMs: 86_400_000 };
 * ```
 */
export interface ClaimInput {
  readonly scope: string;
  readonly fingerprint: string;
  /** The owner's token, compared on every later write. */
  readonly token: string;
  /** Kept with a new record: what the request's outgoing keys are derived from. */
  readonly secret: string;
  /** The lock holds this long from now (the store's now). */
  readonly lockMs: number;
  /** The record lasts this long from its creation. */
  readonly ttlMs: number;
}

/**
 * What a claim found. `claimed`: the caller owns the key now (a new record, or one whose lock had expired or been
 * released, with the steps it recorded); `completed`: the stored response; `busy`: another request holds the lock
 * for `lockLeftMs` more; `mismatch`: the key was used with another payload.
 *
 * @example
 * ```ts
 * const claim: Claim = await store.claim(input);
 * if (claim.kind === 'busy') console.log(`in flight for ${claim.lockLeftMs} ms more`);
 * ```
 */
export type Claim =
  | {
      readonly kind: 'claimed';
      readonly secret: string;
      /** The results of the steps recorded by earlier owners, as JSON texts. */
      readonly steps: Readonly<Record<string, string>>;
      /** True when an earlier owner had the key (a retry taking it over). */
      readonly resumed: boolean;
    }
  | { readonly kind: 'completed'; readonly response: StoredResponse }
  | { readonly kind: 'busy'; readonly lockLeftMs: number }
  | { readonly kind: 'mismatch' };

/**
 * A place to keep idempotency records: PostgreSQL (`pgStore`), Redis (`redisStore`), or your own.
 *
 * @example
 * ```ts
 * const store: IdempotencyStore = redisStore(new Redis());
 * await fastify.register(fastifyIdempotency, { store });
 * ```
 */
export interface IdempotencyStore {
  /** Claims the key, atomically: see {@link Claim}. */
  claim(input: ClaimInput): Promise<Claim>;
  /** Stores the response and ends the lock, only while `token` owns the key. Resolves whether it did. */
  complete(scope: string, token: string, response: StoredResponse): Promise<boolean>;
  /** Records a step's result (JSON text), only while `token` owns the key. Resolves whether it did. */
  saveStep(scope: string, token: string, name: string, result: string): Promise<boolean>;
  /** Ends the lock now (the steps stay), only while `token` owns the key: the next request takes over at once. */
  release(scope: string, token: string): Promise<void>;
}
