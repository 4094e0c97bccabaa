/**
 * `withDeadline(pool)`: the pool a service already has, wrapped (never the module patched). Inside a deadline
 * context every query and transaction is one `OutgoingCall`: not started without time left, the checkout
 * bounded, the statement bounded on the server (`statement_timeout`) and cancelled from here at the stop.
 * Outside a context everything passes straight through.
 */
import { type CheckoutQueue, monotonicNow, OutgoingCall, storage } from '@deadline/core/internal';
import { checkoutFrom } from './checkout.js';
import { checkoutQueueOf } from './checkout-queue.js';
import { clientAsPool, isClient, type PgClient } from './client-as-pool.js';
import { typedError } from './errors.js';
import { connectionFailure, holdConnection, queryHeld } from './held-connection.js';
import { type PgDeadlineOptions, type ResolvedPgOptions, resolvePgOptions } from './options.js';
import { CANNOT_DESTROY, type PgClientLike, Session } from './session.js';
import { beltMs, CLEANUP } from './statement-belt.js';

/**
 * The parts of a `pg.PoolClient` used.
 *
 * @example
 * ```ts
 * const client: PgPoolClientLike = await pool.connect();
 * client.release();
 * ```
 */
export interface PgPoolClientLike extends PgClientLike {
  release(destroy?: boolean | Error): void;
  /** @internal */
  [CANNOT_DESTROY]?: boolean;
}

/**
 * The parts of a `pg.Pool` used (a `pg.Pool` fits; pg is not imported).
 *
 * @example
 * ```ts
 * import pg from 'pg';
 * const pool: PgPoolLike = new pg.Pool({ connectionString: process.env.DATABASE_URL });
 * ```
 */
export interface PgPoolLike {
  connect(): Promise<PgPoolClientLike>;
  query(text: string, values?: unknown[]): Promise<unknown>;
  end(): Promise<void>;
  options?:
    | { database?: string | undefined; connectionString?: string | undefined; max?: number | undefined }
    | undefined;
}

/**
 * A query's result as node-postgres returns it.
 *
 * @example
 * ```ts
 * const { rows }: PgResult<{ id: number }> = await db.query('SELECT id FROM orders');
 * ```
 */
export interface PgResult<R = Record<string, unknown>> {
  rows: R[];
  rowCount: number | null;
  command: string;
  fields: unknown[];
}

/**
 * The statements of a transaction, run by {@link DeadlinePool.transaction}.
 *
 * @example
 * ```ts
 * await db.transaction(async (tx: PgTransaction) => tx.query('UPDATE stock SET n = n - 1 WHERE id = $1', [42]));
 * ```
 */
export interface PgTransaction {
  query<R = Record<string, unknown>>(text: string, values?: unknown[]): Promise<PgResult<R>>;
}

/**
 * A connection checked out with {@link DeadlinePool.connect}: each query is bounded by the deadline current
 * when it is made; `release()` hands it back.
 *
 * @example
 * ```ts
 * const client: DeadlinePoolClient = await db.connect();
 * try { await client.query('SELECT 1'); } finally { client.release(); }
 * ```
 */
export interface DeadlinePoolClient {
  query<R = Record<string, unknown>>(text: string, values?: unknown[]): Promise<PgResult<R>>;
  release(destroy?: boolean | Error): void;
}

/**
 * What {@link withDeadline} returns: the pool's `query`, `connect` and `end`, under the current deadline, and
 * `transaction()`.
 *
 * @example
 * ```ts
 * const db: DeadlinePool = withDeadline(new pg.Pool());
 * const { rows } = await db.query('SELECT * FROM orders WHERE id = $1', [id]);
 * ```
 */
export interface DeadlinePool<P extends PgPoolLike | PgClient = PgPoolLike> {
  /** The wrapped pool (or client). */
  readonly pool: P;
  query<R = Record<string, unknown>>(text: string, values?: unknown[]): Promise<PgResult<R>>;
  connect(): Promise<DeadlinePoolClient>;
  /**
   * Runs `fn` in a transaction (`BEGIN` … `COMMIT`, `ROLLBACK` if it throws) on one connection, the whole of
   * it bounded by the deadline (`SET LOCAL statement_timeout` on the server, a cancel from here).
   */
  transaction<T>(fn: (tx: PgTransaction) => Promise<T>): Promise<T>;
  end(): Promise<void>;
}

/**
 * Wraps a `pg.Pool` (or a single `pg.Client`, whose users then take turns): inside a deadline context its
 * queries, checkouts and transactions are bounded by the request's remaining budget and cancelled on the
 * server when it runs out or the request is cancelled.
 *
 * @example
 * ```ts
 * import pg from 'pg';
 * import { withDeadline } from '@deadline/pg';
 *
 * const db = withDeadline(new pg.Pool({ connectionString: process.env.DATABASE_URL }), { name: 'orders-db' });
 * app.get('/orders/:id', async (request) => {
 *   const { rows } = await db.query('SELECT * FROM orders WHERE id = $1', [request.params.id]);
 *   return rows[0];
 * });
 * ```
 */
export function withDeadline<P extends PgPoolLike | PgClient>(
  poolOrClient: P,
  options?: PgDeadlineOptions,
): DeadlinePool<P> {
  const pool: PgPoolLike = isClient(poolOrClient) ? clientAsPool(poolOrClient) : (poolOrClient as PgPoolLike);
  const resolved = resolvePgOptions(options, databaseOf(pool.options));
  const queue = resolved.checkoutOrder === 'fifo' ? undefined : checkoutQueueOf(pool);
  const checkout = (call: OutgoingCall) => checkoutFrom(pool, queue, call);
  const inContext = () => storage.getStore() !== undefined;
  return {
    pool: poolOrClient,
    query<R>(text: string, values?: unknown[]) {
      if (!inContext()) return pool.query(text, values) as Promise<PgResult<R>>;
      return bounded(checkout, queue, resolved, 'statement', (session, timeout) =>
        statement<R>(session, text, values, timeout),
      );
    },
    async connect() {
      if (!inContext()) return passedThrough(await pool.connect());
      const call = OutgoingCall.start(resolved.target, resolved, resolved.guard);
      const client = await checkout(call);
      call.end();
      return checkedOut(client, resolved);
    },
    transaction<T>(fn: (tx: PgTransaction) => Promise<T>) {
      if (!inContext()) return plainTransaction(pool, fn);
      return bounded(checkout, queue, resolved, 'transaction', async (session, timeout) => {
        await session.query('BEGIN');
        if (timeout !== undefined) await session.query(`SET LOCAL statement_timeout = ${timeout()}`);
        const result = await fn({ query: (text, values) => session.query(text, values) });
        await session.query('COMMIT');
        return result;
      });
    },
    end: () => pool.end(),
  };
}

/** One statement with the `statement_timeout` belt around it, reset before the connection is handed back. */
async function statement<R>(
  session: Session,
  text: string,
  values: unknown[] | undefined,
  timeout: (() => number) | undefined,
): Promise<PgResult<R>> {
  if (timeout === undefined) return session.query<PgResult<R>>(text, values);
  await session.query(`SET statement_timeout = ${timeout()}`);
  const result = await session.query<PgResult<R>>(text, values);
  await session.query('RESET statement_timeout');
  return result;
}

/**
 * A whole unit of work — a statement, or a transaction — on one connection under one call. Outside a context
 * a transaction still runs (unbounded); a statement never gets here.
 */
async function bounded<T>(
  checkout: (call: OutgoingCall) => Promise<PgPoolClientLike>,
  queue: CheckoutQueue | undefined,
  resolved: ResolvedPgOptions,
  kind: 'statement' | 'transaction',
  work: (session: Session, timeout: (() => number) | undefined) => Promise<T>,
): Promise<T> {
  const call = OutgoingCall.start(resolved.target, resolved, resolved.guard);
  const client = await checkout(call);
  const release = held(client);
  const session = new Session(client, call);
  const timeout = resolved.statementTimeout && call.timeoutMs !== undefined ? () => beltMs(call) : undefined;
  const acquiredAt = monotonicNow();
  try {
    const result = await work(session, timeout);
    queue?.observe(monotonicNow() - acquiredAt);
    call.end();
    if (session.cancelSent) {
      // The work finished as the deadline passed and a cancel is on its way: it must not land on the next
      // borrower's statement. Hand the connection back once it is delivered (or destroy it).
      void restore(
        session,
        client,
        release,
        kind === 'transaction' ? undefined : timeout ? 'RESET statement_timeout' : undefined,
      );
    } else {
      release();
    }
    return result;
  } catch (error) {
    const typed = typedError(error, call, session.stopped);
    call.end(typed);
    // The caller has its answer; the connection is handed back once it is known clean (or destroyed).
    void restore(
      session,
      client,
      release,
      kind === 'transaction' ? 'ROLLBACK' : timeout ? 'RESET statement_timeout' : undefined,
    );
    throw typed;
  }
}

/**
 * Holds a checked-out connection (our 'error' listener on it, see held-connection.ts) and returns how to hand
 * it back: released to the pool, or destroyed when asked to or when its connection failed meanwhile. The
 * listener comes off only after the release, once pg-pool's own is back on: the client is never without one.
 */
function held(client: PgPoolClientLike): (destroy?: boolean | Error) => void {
  const letGo = holdConnection(client);
  return (destroy) => {
    client.release(connectionFailure(client) ?? destroy);
    letGo();
  };
}

/**
 * Outside a context the app gets the pool's own client, as without the wrapper — with our 'error' listener on
 * it until its release (the app may have added none: the wrapper's type offers no `on`). The release is
 * pg-pool's, replaced for this checkout only (pg-pool sets a fresh one at every checkout).
 */
function passedThrough(client: PgPoolClientLike): DeadlinePoolClient {
  const letGo = holdConnection(client);
  const release = client.release;
  client.release = (destroy) => {
    release.call(client, destroy);
    letGo();
  };
  return client as unknown as DeadlinePoolClient;
}

/**
 * After a failure or a stop: wait until our statement settled and the cancel was delivered, undo what the unit
 * left on the connection (an open transaction, a session setting), then release — or destroy it when its state
 * cannot be vouched for. A connection that failed meanwhile has no state left to undo: it is destroyed.
 */
async function restore(
  session: Session,
  client: PgPoolClientLike,
  release: (destroy?: boolean | Error) => void,
  undo: string | undefined,
): Promise<void> {
  const clean = await session.quiet();
  if (connectionFailure(client) !== undefined) {
    release();
    return;
  }
  if (!clean && client[CANNOT_DESTROY] !== true) {
    release(true);
    return;
  }
  try {
    if (undo !== undefined) await queryHeld(client, undo);
    release();
  } catch (error) {
    release(error instanceof Error ? error : true);
  }
}

/** A connection from `connect()`: each query its own call, under the deadline current when it is made. */
function checkedOut(client: PgPoolClientLike, resolved: ResolvedPgOptions): DeadlinePoolClient {
  const handBackNow = held(client);
  let released = false;
  /** A session setting of ours is on the connection (reset before anything unbounded, and at release). */
  let dirty = false;
  /** A stopped statement's cancel, until delivered: the next statement waits for it. */
  let settling: Promise<boolean> | undefined;
  /** A cancel may not have been spent on our statement: the connection is destroyed at release. */
  let poisoned = false;
  const settle = async () => {
    if (settling === undefined) return;
    const clean = await settling;
    settling = undefined;
    if (!clean) poisoned = true;
  };
  const unbounded = async (text: unknown, values?: unknown[]) => {
    await settle();
    if (dirty && !CLEANUP.test(String(text))) {
      await queryHeld(client, 'RESET statement_timeout');
      dirty = false;
    }
    return queryHeld(client, text as string, values);
  };
  return {
    async query<R>(text: string, values?: unknown[]) {
      // Outside a deadline (no context, or one without a deadline), cursors and streams (submittables), and
      // cleanup: as the driver would.
      const scope = storage.getStore();
      if (scope === undefined || scope.deadline.isNone || typeof text !== 'string' || CLEANUP.test(text)) {
        return (await unbounded(text, values)) as PgResult<R>;
      }
      await settle();
      const call = OutgoingCall.start(resolved.target, resolved, resolved.guard);
      const session = new Session(client, call);
      try {
        if (resolved.statementTimeout && call.timeoutMs !== undefined) {
          dirty = true;
          await session.query(`SET statement_timeout = ${beltMs(call)}`);
        }
        const result = await session.query<PgResult<R>>(text, values);
        call.end();
        if (session.cancelSent) settling = session.quiet();
        return result;
      } catch (error) {
        const typed = typedError(error, call, session.stopped);
        call.end(typed);
        if (session.cancelSent) settling = session.quiet();
        throw typed;
      }
    },
    release(destroy) {
      // Idempotent: a second release (pg-pool would throw, here inside a promise) changes nothing.
      if (released) return;
      released = true;
      const handBack = async () => {
        await settle();
        if (destroy || poisoned) {
          handBackNow(destroy || true);
          return;
        }
        // The session setting this wrapper made must not reach the next borrower. (On a failed connection the
        // RESET is not sent: it rejects, and the connection is destroyed.)
        if (dirty) await queryHeld(client, 'RESET statement_timeout');
        handBackNow();
      };
      handBack().catch((error: unknown) => handBackNow(error instanceof Error ? error : true));
    },
  };
}

/** A transaction outside any deadline: what the caller would write by hand (with our 'error' listener on). */
async function plainTransaction<T>(pool: PgPoolLike, fn: (tx: PgTransaction) => Promise<T>): Promise<T> {
  const client = await pool.connect();
  const release = held(client);
  try {
    await queryHeld(client, 'BEGIN');
    const result = await fn({ query: (text, values) => queryHeld(client, text, values) });
    await queryHeld(client, 'COMMIT');
    release();
    return result;
  } catch (error) {
    try {
      await queryHeld(client, 'ROLLBACK');
      release();
    } catch (rollbackError) {
      release(rollbackError instanceof Error ? rollbackError : true);
    }
    throw error;
  }
}

/** The database a pool connects to: its `database` option, or the path of its connection string. */
function databaseOf(options: PgPoolLike['options']): string | undefined {
  if (options?.database !== undefined) return options.database;
  const url = options?.connectionString;
  if (url === undefined) return undefined;
  try {
    const name = decodeURIComponent(new URL(url).pathname.slice(1));
    return name === '' ? undefined : name;
  } catch {
    return undefined;
  }
}
