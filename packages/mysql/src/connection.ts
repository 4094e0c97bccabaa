/**
 * Connections under the deadline: one checked out of a wrapped pool, and a single connection wrapped on its own.
 * Both run their statements through a {@link Session}, so the gate orders them after a KILL's cleanup.
 */
import { type CheckoutQueue, storage } from '@deadline/core/internal';
import type { Connection, FieldPacket, PoolConnection, QueryResult } from 'mysql2/promise';
import type { Backend } from './backend.js';
import { STUCK_KILL_MS } from './killer.js';
import { type Kind, Session } from './session.js';
import { runTransaction } from './transaction.js';
import type {
  DeadlineConnection,
  DeadlinePoolConnection,
  DeadlineQueryable,
  DeadlineTransaction,
  ExecuteValues,
  QueryValues,
  Sql,
} from './types.js';
import { underCall } from './under-call.js';

/**
 * @internal Back to the pool once the session's cleanup is done; destroyed if it cannot be vouched for. A KILL the
 * server holds up (seen in CI: for seconds) does not hold the connection with it: once its statement is over
 * and the KILL has been out for STUCK_KILL_MS, the connection is destroyed and the pool opens another. Waiting
 * instead kept each such connection from the pool for up to KILL_TIMEOUT_MS, and a stream of expiring requests
 * took every connection of the pool that way.
 */
export function giveBack(session: Session, connection: PoolConnection, queue: CheckoutQueue | undefined): void {
  void session.idleWithin(STUCK_KILL_MS).then((idle) => {
    if (!idle || session.dirty) connection.destroy();
    else connection.release();
    // A destroyed connection leaves room for a new one, and mysql2 says nothing of it.
    queue?.pump();
  });
}

/** `query()` and `execute()` on one session: bounded inside a deadline context, mysql2's own outside. */
abstract class SessionStatements implements DeadlineQueryable {
  protected readonly session: Session;
  protected readonly backend: Backend;

  constructor(session: Session, backend: Backend) {
    this.session = session;
    this.backend = backend;
  }

  query<T extends QueryResult = QueryResult>(sql: Sql, values?: QueryValues): Promise<[T, FieldPacket[]]> {
    return this.#run<T>('query', sql, values);
  }

  execute<T extends QueryResult = QueryResult>(sql: Sql, values?: ExecuteValues): Promise<[T, FieldPacket[]]> {
    return this.#run<T>('execute', sql, values);
  }

  #run<T extends QueryResult>(kind: Kind, sql: Sql, values: QueryValues | ExecuteValues): Promise<[T, FieldPacket[]]> {
    if (storage.getStore() === undefined) return this.session.run<T>(kind, sql, values, undefined);
    return underCall(this.backend, (call) => this.session.run<T>(kind, sql, values, call));
  }
}

/** @internal */
export class PooledConnection extends SessionStatements implements DeadlinePoolConnection {
  readonly connection: PoolConnection;
  readonly #queue: CheckoutQueue | undefined;
  #returned = false;

  constructor(connection: PoolConnection, backend: Backend, queue: CheckoutQueue | undefined) {
    super(new Session(connection, backend), backend);
    this.connection = connection;
    this.#queue = queue;
  }

  release(): void {
    if (this.#returned) return;
    this.#returned = true;
    giveBack(this.session, this.connection, this.#queue);
  }

  destroy(): void {
    this.#returned = true;
    this.connection.destroy();
    this.#queue?.pump();
  }
}

/** @internal */
export class SingleConnection extends SessionStatements implements DeadlineConnection {
  readonly connection: Connection;
  #ending: Promise<void> | undefined;

  constructor(connection: Connection, backend: Backend) {
    super(new Session(connection, backend), backend);
    this.connection = connection;
  }

  transaction<R>(fn: (tx: DeadlineTransaction) => Promise<R>): Promise<R> {
    // No checkout and nothing to give back: the one connection is the transaction's. One that a KILL left in an
    // unknown state cannot be replaced; the gate has kept the next statement behind the KILL, which is enough
    // for a server that drops a KILL QUERY finding the thread idle (MariaDB does; the tests check it).
    return runTransaction(this.backend, async () => ({ session: this.session, finish: () => {} }), fn);
  }

  end(): Promise<void> {
    this.#ending ??= (async () => {
      await this.backend.killer.end();
      await this.session.idle();
      await this.connection.end();
    })();
    return this.#ending;
  }
}
