/**
 * `transaction(fn)`: START TRANSACTION, `fn`, COMMIT — or ROLLBACK when `fn` throws. Under a deadline the whole of
 * it, checkout included, is one call: at the stop, the statement running is killed, the caller is answered at once,
 * and behind it the transaction is rolled back once that statement has settled.
 */
import { checkFunction, OutgoingCall, storage } from '@deadline/core/internal';
import type { FieldPacket, QueryResult } from 'mysql2/promise';
import type { Backend } from './backend.js';
import type { Kind, Session } from './session.js';
import type { DeadlineTransaction, ExecuteValues, QueryValues, Sql } from './types.js';

/** @internal What a transaction runs on, and what becomes of its connection afterwards (release, destroy, nothing). */
export interface Lease {
  session: Session;
  finish(): void;
}

/** @internal */
export async function runTransaction<R>(
  backend: Backend,
  acquire: (call: OutgoingCall | undefined) => Promise<Lease>,
  fn: (tx: DeadlineTransaction) => Promise<R>,
): Promise<R> {
  checkFunction('fn', fn, false);
  if (storage.getStore() === undefined) return unbounded(await acquire(undefined), fn);
  const call = OutgoingCall.start(backend.target, backend.callOptions, backend.guard);
  backend.prepare();
  let lease: Lease;
  try {
    lease = await acquire(call);
  } catch (error) {
    call.end(error);
    throw error;
  }
  return bounded(lease, call, fn);
}

async function unbounded<R>(lease: Lease, fn: (tx: DeadlineTransaction) => Promise<R>): Promise<R> {
  const { session } = lease;
  const tx = new Transaction(session, undefined);
  try {
    await session.plain('START TRANSACTION');
    const value = await fn(tx);
    await session.plain('COMMIT');
    return value;
  } catch (error) {
    await rollback(session);
    throw error;
  } finally {
    tx.close();
    lease.finish();
  }
}

function bounded<R>(lease: Lease, call: OutgoingCall, fn: (tx: DeadlineTransaction) => Promise<R>): Promise<R> {
  const { session } = lease;
  const tx = new Transaction(session, call);
  return new Promise<R>((resolve, reject) => {
    let answered = false;
    let failure: { error: unknown } | undefined;
    let cleaning: Promise<void> | undefined;
    // Once, whoever gets there first: the stop, or `fn` failing.
    const cleanup = () => {
      cleaning ??= rollback(session).then(() => lease.finish());
      return cleaning;
    };
    const off = call.onStop((reason) => {
      if (answered) return;
      answered = true;
      tx.close();
      call.end(reason);
      // `fn` failed and its rollback outlasted the budget: its own error says more than the deadline's.
      reject(failure === undefined ? reason : failure.error);
      // Behind the caller: the killed statement settles (the gate), then the transaction is rolled back.
      void cleanup();
    });
    const body = async (): Promise<R> => {
      await session.plain('START TRANSACTION');
      // Answered already: do not run the callback, or commit, behind the caller's back.
      if (call.stopReason !== undefined) throw call.stopReason;
      const value = await fn(tx);
      if (call.stopReason !== undefined) throw call.stopReason;
      await session.plain('COMMIT');
      return value;
    };
    body().then(
      (value) => {
        if (answered) return;
        answered = true;
        off();
        tx.close();
        call.end();
        resolve(value);
        lease.finish();
      },
      (error: unknown) => {
        if (answered) return;
        failure = { error };
        tx.close();
        // Rolled back before the caller hears, as without a deadline; a stop meanwhile answers at once.
        void cleanup().then(() => {
          if (answered) return;
          answered = true;
          off();
          call.end(error);
          reject(error);
        });
      },
    );
  });
}

/** ROLLBACK after the gate; a connection that cannot roll back cannot be vouched for. Never rejects. */
async function rollback(session: Session): Promise<void> {
  try {
    await session.plain('ROLLBACK');
  } catch {
    session.invalidate();
  }
}

/** The `tx` handed to the callback: the session's statements under the transaction's call, while it is open. */
class Transaction implements DeadlineTransaction {
  readonly #session: Session;
  readonly #call: OutgoingCall | undefined;
  #open = true;

  constructor(session: Session, call: OutgoingCall | undefined) {
    this.#session = session;
    this.#call = call;
  }

  query<T extends QueryResult = QueryResult>(sql: Sql, values?: QueryValues): Promise<[T, FieldPacket[]]> {
    return this.#run('query', sql, values);
  }

  execute<T extends QueryResult = QueryResult>(sql: Sql, values?: ExecuteValues): Promise<[T, FieldPacket[]]> {
    return this.#run('execute', sql, values);
  }

  close(): void {
    this.#open = false;
  }

  #run<T extends QueryResult>(kind: Kind, sql: Sql, values: QueryValues | ExecuteValues): Promise<[T, FieldPacket[]]> {
    if (!this.#open) {
      // After the stop: its reason. After the end: the connection may be someone else's by now.
      return Promise.reject(
        this.#call?.stopReason ?? new Error('the transaction is over: run its statements inside its callback'),
      );
    }
    return this.#session.run<T>(kind, sql, values, this.#call);
  }
}
