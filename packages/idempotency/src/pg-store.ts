/**
 * The PostgreSQL store: one row per key in a table of its own (created on first use unless told not to). Each
 * operation is one statement, atomic by itself, with time read from the server's clock (`clock_timestamp()`).
 * The claim is an `INSERT … ON CONFLICT DO UPDATE … WHERE`: of many requests racing with one key, exactly one
 * inserts (or takes over an expired lock); the others' conflict is decided on the committed row.
 */
import { InvalidArgumentError } from '@deadline/core';
import type { Claim, ClaimInput, IdempotencyStore, StoredResponse } from './store.js';

/**
 * What `pgStore()` needs of a pool: node-postgres' `Pool` or `Client`, or `@deadline/pg`'s `withDeadline(pool)`.
 *
 * @example
 * ```ts
 * const queryable: PgQueryable = new pg.Pool({ connectionString: process.env.DATABASE_URL });
 * ```
 */
export interface PgQueryable {
  query(text: string, values?: unknown[]): Promise<{ rows: unknown[]; rowCount: number | null }>;
}

/**
 * Options of {@link pgStore}.
 *
 * @example
 * ```ts
 * const options: PgStoreOptions = { table: 'billing.idempotency_keys', createTable: false };
 * ```
 */
export interface PgStoreOptions {
  /** The table (optionally schema-qualified). Default `deadline_idempotency`. */
  table?: string | undefined;
  /** Create the table and its index on first use (`CREATE … IF NOT EXISTS`). Default true. */
  createTable?: boolean | undefined;
}

/**
 * The PostgreSQL store, with `purgeExpired()` to delete records past their time to live (run it now and then;
 * an expired record is also replaced when its key is claimed again).
 *
 * @example
 * ```ts
 * const store: PgIdempotencyStore = pgStore(pool);
 * setInterval(() => store.purgeExpired().catch(log.error), 3_600_000).unref();
 * ```
 */
export interface PgIdempotencyStore extends IdempotencyStore {
  /** Deletes the records past their time to live. Resolves how many. */
  purgeExpired(): Promise<number>;
  /** The statements that create the table and its index (for a migration, with `createTable: false`). */
  readonly ddl: string;
}

const IDENTIFIER = /^[A-Za-z_][A-Za-z0-9_]{0,62}(\.[A-Za-z_][A-Za-z0-9_]{0,62})?$/;

/**
 * A store in PostgreSQL, on the pool given (its queries are the app's own: wrap the pool with `@deadline/pg` and
 * the claim is bounded by the request's budget too).
 *
 * @example
 * ```ts
 * import pg from 'pg';
 * import { fastifyIdempotency, pgStore } from '@deadline/idempotency';
 *
 * const pool = new pg.Pool({ connectionString: process.env.DATABASE_URL });
 * await app.register(fastifyIdempotency, { store: pgStore(pool) });
 * ```
 */
export function pgStore(pool: PgQueryable, options: PgStoreOptions = {}): PgIdempotencyStore {
  if (typeof pool?.query !== 'function') throw new InvalidArgumentError('pool', 'a pg Pool or Client', pool);
  const table = options.table ?? 'deadline_idempotency';
  if (typeof table !== 'string' || !IDENTIFIER.test(table)) {
    throw new InvalidArgumentError('table', 'a table name, optionally schema-qualified (letters, digits, _)', table);
  }
  const index = `${table.replace('.', '_')}_expires`;
  const ddl = `CREATE TABLE IF NOT EXISTS ${table} (
  scope text PRIMARY KEY,
  fingerprint text NOT NULL,
  token text NOT NULL,
  secret text NOT NULL,
  state text NOT NULL,
  owners integer NOT NULL DEFAULT 1,
  locked_until timestamptz NOT NULL,
  expires_at timestamptz NOT NULL,
  steps jsonb NOT NULL DEFAULT '{}',
  status integer,
  headers jsonb,
  body bytea,
  body_bytes integer
);
CREATE INDEX IF NOT EXISTS ${index} ON ${table} (expires_at)`;
  let ready: Promise<void> | undefined = options.createTable === false ? Promise.resolve() : undefined;
  const query = async (text: string, values: unknown[]) => {
    // Created once; a failed creation is tried again by the next operation.
    ready ??= pool.query(ddl).then(
      () => undefined,
      (error: unknown) => {
        // Another process created it at the same moment (CREATE … IF NOT EXISTS is not atomic across sessions).
        const code = (error as { code?: unknown } | null)?.code;
        if (code === '23505' || code === '42P07') return;
        ready = undefined;
        throw error;
      },
    );
    await ready;
    return pool.query(text, values);
  };

  const claimOnce = async (input: ClaimInput): Promise<Claim | undefined> => {
    const inserted = await query(
      `INSERT INTO ${table} AS r (scope, fingerprint, token, secret, state, locked_until, expires_at)
       VALUES ($1, $2, $3, $4, 'running', clock_timestamp() + $5 * interval '1 millisecond',
               clock_timestamp() + $6 * interval '1 millisecond')
       ON CONFLICT (scope) DO UPDATE SET
         token = EXCLUDED.token,
         state = 'running',
         locked_until = EXCLUDED.locked_until,
         fingerprint = EXCLUDED.fingerprint,
         secret = CASE WHEN r.expires_at <= clock_timestamp() THEN EXCLUDED.secret ELSE r.secret END,
         expires_at = CASE WHEN r.expires_at <= clock_timestamp() THEN EXCLUDED.expires_at ELSE r.expires_at END,
         steps = CASE WHEN r.expires_at <= clock_timestamp() THEN '{}'::jsonb ELSE r.steps END,
         owners = CASE WHEN r.expires_at <= clock_timestamp() THEN 1 ELSE r.owners + 1 END,
         status = NULL, headers = NULL, body = NULL, body_bytes = NULL
       WHERE r.expires_at <= clock_timestamp()
          OR (r.state = 'running' AND r.locked_until <= clock_timestamp() AND r.fingerprint = EXCLUDED.fingerprint)
       RETURNING secret, steps, owners`,
      [input.scope, input.fingerprint, input.token, input.secret, input.lockMs, input.ttlMs],
    );
    const mine = inserted.rows[0] as { secret: string; steps: Record<string, string>; owners: number } | undefined;
    if (mine !== undefined)
      return { kind: 'claimed', secret: mine.secret, steps: mine.steps, resumed: mine.owners > 1 };
    const found = await query(
      `SELECT fingerprint = $2 AS same, state, status, headers, body, body_bytes,
              extract(epoch FROM locked_until - clock_timestamp()) * 1000 AS lock_left_ms
         FROM ${table} WHERE scope = $1 AND expires_at > clock_timestamp()`,
      [input.scope, input.fingerprint],
    );
    const row = found.rows[0] as ExistingRow | undefined;
    // Gone (expired, purged) or unlocked since the insert looked: claim again.
    if (row === undefined) return undefined;
    if (!row.same) return { kind: 'mismatch' };
    if (row.state === 'completed') return { kind: 'completed', response: responseOf(row) };
    const lockLeftMs = Number(row.lock_left_ms);
    return lockLeftMs > 0 ? { kind: 'busy', lockLeftMs } : undefined;
  };

  return {
    ddl,
    async claim(input) {
      // A row that changes between the two statements (unlocked, expired) is looked at again; a few times at most.
      for (let i = 0; i < 5; i++) {
        const claim = await claimOnce(input);
        if (claim !== undefined) return claim;
      }
      return { kind: 'busy', lockLeftMs: 1 };
    },
    async complete(scope, token, response) {
      const result = await query(
        `UPDATE ${table} SET state = 'completed', status = $3, headers = $4, body = $5, body_bytes = $6,
                locked_until = clock_timestamp()
          WHERE scope = $1 AND token = $2 AND state = 'running'`,
        [scope, token, response.status, JSON.stringify(response.headers), response.body ?? null, response.bodyBytes],
      );
      return result.rowCount === 1;
    },
    async saveStep(scope, token, name, result) {
      const saved = await query(
        `UPDATE ${table} SET steps = steps || jsonb_build_object($3::text, $4::text)
          WHERE scope = $1 AND token = $2 AND state = 'running'`,
        [scope, token, name, result],
      );
      return saved.rowCount === 1;
    },
    async release(scope, token) {
      await query(
        `UPDATE ${table} SET locked_until = clock_timestamp() WHERE scope = $1 AND token = $2 AND state = 'running'`,
        [scope, token],
      );
    },
    async purgeExpired() {
      const result = await query(`DELETE FROM ${table} WHERE expires_at <= clock_timestamp()`, []);
      return result.rowCount ?? 0;
    },
  };
}

interface ExistingRow {
  same: boolean;
  state: string;
  status: number | null;
  headers: Record<string, string> | null;
  body: Buffer | null;
  body_bytes: number | null;
  lock_left_ms: number | string;
}

function responseOf(row: ExistingRow): StoredResponse {
  return {
    status: row.status ?? 500,
    headers: row.headers ?? {},
    body: row.body ?? undefined,
    bodyBytes: row.body_bytes ?? -1,
  };
}
