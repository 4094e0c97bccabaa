/**
 * A mysql2 promise pool under the deadline: `query()` and `execute()` check out a connection within the budget,
 * run the statement bounded, and give the connection back only once any KILL for it has completed.
 */

import { type CheckoutQueue, monotonicNow, type OutgoingCall, storage } from '@deadline/core/internal';
import type { FieldPacket, Pool, QueryResult } from 'mysql2/promise';
import type { Backend } from './backend.js';
import { checkout } from './checkout.js';
import { checkoutQueueOf } from './checkout-queue.js';
import { giveBack, PooledConnection } from './connection.js';
import { type Kind, Session } from './session.js';
import { noteHandshakes } from './sightings.js';
import { type Lease, runTransaction } from './transaction.js';
import type {
  DeadlinePool,
  DeadlinePoolConnection,
  DeadlineTransaction,
  ExecuteValues,
  QueryValues,
  Sql,
} from './types.js';
import { underCall } from './under-call.js';

type Send = (sql: Sql, values?: QueryValues | ExecuteValues) => Promise<[QueryResult, FieldPacket[]]>;

/** @internal */
export class DeadlinePoolImpl implements DeadlinePool {
  readonly pool: Pool;
  readonly #backend: Backend;
  /** The deadline-aware queue in front of the pool's own (checkout-queue.ts); undefined: mysql2's alone. */
  readonly #queue: CheckoutQueue | undefined;
  #ending: Promise<void> | undefined;

  constructor(pool: Pool, backend: Backend, checkoutOrder: 'adaptive' | 'fifo') {
    this.pool = pool;
    this.#backend = backend;
    this.#queue = checkoutOrder === 'fifo' ? undefined : checkoutQueueOf(pool);
    noteHandshakes(pool);
  }

  query<T extends QueryResult = QueryResult>(sql: Sql, values?: QueryValues): Promise<[T, FieldPacket[]]> {
    return this.#run<T>('query', sql, values);
  }

  execute<T extends QueryResult = QueryResult>(sql: Sql, values?: ExecuteValues): Promise<[T, FieldPacket[]]> {
    return this.#run<T>('execute', sql, values);
  }

  async getConnection(): Promise<DeadlinePoolConnection> {
    const backend = this.#backend;
    const queue = this.#queue;
    if (storage.getStore() === undefined) return new PooledConnection(await this.pool.getConnection(), backend, queue);
    return underCall(
      backend,
      async (call) => new PooledConnection(await checkout(this.pool, queue, call), backend, queue),
    );
  }

  transaction<R>(fn: (tx: DeadlineTransaction) => Promise<R>): Promise<R> {
    return runTransaction(this.#backend, (call) => this.#lease(call), fn);
  }

  end(): Promise<void> {
    this.#ending ??= this.#backend.killer.end().then(() => this.pool.end());
    return this.#ending;
  }

  #run<T extends QueryResult>(kind: Kind, sql: Sql, values: QueryValues | ExecuteValues): Promise<[T, FieldPacket[]]> {
    const pool = this.pool;
    if (storage.getStore() === undefined) {
      // Outside any deadline: exactly mysql2's pool.query() / pool.execute().
      const send = (kind === 'query' ? pool.query : pool.execute).bind(pool) as unknown as Send;
      return send(sql, values) as Promise<[T, FieldPacket[]]>;
    }
    const queue = this.#queue;
    return underCall(this.#backend, async (call) => {
      const connection = await checkout(pool, queue, call);
      const session = new Session(connection, this.#backend);
      const acquiredAt = monotonicNow();
      const result = session.run<T>(kind, sql, values, call);
      giveBack(session, connection, queue);
      // What a statement holds its connection for: a waiter with less time left leaves the queue.
      if (queue !== undefined) void result.then(() => queue.observe(monotonicNow() - acquiredAt), noop);
      return result;
    });
  }

  async #lease(call: OutgoingCall | undefined): Promise<Lease> {
    const queue = this.#queue;
    const connection = call === undefined ? await this.pool.getConnection() : await checkout(this.pool, queue, call);
    const session = new Session(connection, this.#backend);
    return { session, finish: () => giveBack(session, connection, queue) };
  }
}

function noop(): void {}
