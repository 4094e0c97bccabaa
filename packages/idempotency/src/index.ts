/**
 * `@deadline/idempotency` — a side effect happens once, even when the caller times out and retries: requests
 * with an `Idempotency-Key` are claimed atomically in PostgreSQL or Redis under a lock that follows the request's
 * deadline, their results are stored and replayed, `step()` records recovery points, and the request's outgoing
 * POST/PATCH calls carry keys derived from its own.
 *
 * Every export is named here; nothing is re-exported wholesale.
 * @packageDocumentation
 */

export { REPLAYED_HEADER } from './admission.js';
export { IdempotencyKeyLostError, isIdempotencyKeyLostError } from './errors.js';
export { type ExpressIdempotencyOptions, idempotency } from './express.js';
export { type FastifyIdempotencyOptions, fastifyIdempotency } from './fastify.js';
export { IDEMPOTENCY_KEY_HEADER } from './key-header.js';
export { IDEMPOTENCY_KEYS, IdempotencyKeys } from './keys.js';
export type { IdempotencyOptions } from './options.js';
export { type PgIdempotencyStore, type PgQueryable, type PgStoreOptions, pgStore } from './pg-store.js';
export { type Answer, IdempotencyProblem } from './problems.js';
export { type NodeRedisScripting, type RedisScripting, type RedisStoreOptions, redisStore } from './redis-store.js';
export { step } from './step.js';
export type { Claim, ClaimInput, IdempotencyStore, StoredResponse } from './store.js';

import { fastifyIdempotency } from './fastify.js';
export default fastifyIdempotency;
