/**
 * A connection the wrapper holds — from its checkout to its release — carries an `'error'` listener of ours.
 *
 * Why: node-postgres emits `'error'` on a `Client` whose connection fails (the server restarted, an operator or
 * a failover ran `pg_terminate_backend`, the network dropped it). pg-pool listens only while the client sits
 * idle in the pool; once checked out, the client's owner must listen, and an `'error'` event nobody listens
 * to ends the Node process. The wrapper is that owner while it holds the client.
 *
 * The error itself needs no routing: node-postgres rejects the statement in flight with it. The listener only
 * remembers that the connection is gone, so that it is discarded at release (never handed to the next
 * borrower), no CancelRequest is sent for a backend that no longer exists, and a statement sent on it later
 * fails with that cause — not with the driver's "not queryable", which names none.
 */

import { unpatched } from '@deadline/core/internal';

/** The part of a node-postgres `Client` (an EventEmitter) the listener needs. */
export interface ErrorEmitter {
  on(event: 'error', listener: (error: Error) => void): unknown;
  once(event: 'end', listener: () => void): unknown;
  removeListener(event: 'error', listener: (error: Error) => void): unknown;
}

/**
 * On a stand-in for a connection (a turn on a user's single client): the client whose connection it is. Its
 * failure outlives the turn: every later turn on that client must know of it.
 */
export const CONNECTION = Symbol('connection');

/** Connections that failed while held, with the first error (weakly: a dead client is not kept alive). */
const failed = new WeakMap<object, Error>();
/** Failed connections that have ended too: the driver emits nothing more on them. */
const ended = new WeakSet<object>();
/** Connections held from the moment the pool handed them over (see {@link holdOnArrival}): how to let go. */
const arrivals = new WeakMap<object, () => void>();

/** The driver's client behind `client` (itself, or the single client a turn stands in for). @internal */
export function connectionOf(client: object): object {
  return (client as { [CONNECTION]?: object })[CONNECTION] ?? client;
}

function isErrorEmitter(client: object): client is ErrorEmitter {
  const c = client as Partial<ErrorEmitter>;
  return typeof c.on === 'function' && typeof c.once === 'function' && typeof c.removeListener === 'function';
}

/** The first error is the cause (the server's 57P01, say); the driver's "Connection terminated" follows it. */
function remember(connection: object, error: Error): void {
  if (failed.has(connection)) return;
  failed.set(connection, error);
  // Before its 'end' for sure: node-postgres emits 'end' last, on the tick after its own 'error'.
  if (isErrorEmitter(connection)) connection.once('end', () => ended.add(connection));
}

/**
 * Puts our `'error'` listener on `client` until the returned function is called (at release). A client that
 * is not an EventEmitter (a pool implementation of the app's own) is left as it is.
 *
 * A connection that failed keeps the listener until it has ended: after the server's FATAL error (which the
 * statement in flight gets) the driver emits its own `'error'` when the socket closes, which can be after the
 * release. pg-pool's `end()` of a discarded client silences it; a user's single client is never ended by us,
 * and between two turns nobody else may be listening.
 */
export function holdConnection(client: object): () => void {
  const connection = connectionOf(client);
  // Held since its arrival: that hold (the same listener) becomes this one, and nothing is added.
  const arrival = arrivals.get(connection);
  if (arrival !== undefined) {
    arrivals.delete(connection);
    return arrival;
  }
  if (!isErrorEmitter(connection)) return noop;
  const listener = (error: Error) => remember(connection, error);
  connection.on('error', listener);
  return () => {
    if (failed.has(connection) && !ended.has(connection)) {
      connection.once('end', () => connection.removeListener('error', listener));
    } else {
      connection.removeListener('error', listener);
    }
  };
}

/**
 * Holds a connection the moment the pool hands it over, from inside pg-pool's callback, until the wrapper holds
 * it for its work ({@link holdConnection} takes this hold over as its own) or it is released ({@link endArrival}).
 *
 * Why: node-postgres parses what arrives in one chunk in one go, so a new connection's ReadyForQuery and the
 * server's FATAL right behind it (a restart, a failover, a `pg_terminate_backend` as it connected) are handled
 * together: pg-pool hands the client over on the first, and the second is an `'error'` event with no statement
 * to give it to. A promise's continuation, where a listener would be added, runs only after both. pg-pool's own
 * `query()` listens from inside its callback; without this, the wrapper's checkout would end the process where
 * `pool.query()` does not (the soak's PostgreSQL restart under 184 requests/s, 3 runs of 6). @internal
 */
export function holdOnArrival(client: object): void {
  const connection = connectionOf(client);
  if (!arrivals.has(connection)) arrivals.set(connection, holdConnection(client));
}

/** Lets go of a connection held since its arrival, if nothing took it over (it went back to the pool). @internal */
export function endArrival(client: object): void {
  const connection = connectionOf(client);
  const arrival = arrivals.get(connection);
  arrivals.delete(connection);
  arrival?.();
}

/** The error the connection failed with while held, if it did: it must be discarded, not reused. */
export function connectionFailure(client: object): Error | undefined {
  return failed.get(connectionOf(client));
}

/**
 * An error the server ends the session with: severity FATAL or PANIC (the server closes the connection right
 * after), or, should the severity be localized, a connection exception (08) or an operator intervention that
 * ends sessions (57P01 terminated, 57P02 crash, 57P03 cannot connect now, 57P04 database dropped, 57P05 idle
 * session timeout). node-postgres gives it to the statement in flight, and emits `'error'` only once the
 * socket closes: meanwhile the connection must not be cleaned up (a wasted RESET) or handed on.
 */
function endsSession(error: unknown): boolean {
  const { severity, code } = (error ?? {}) as { severity?: unknown; code?: unknown };
  return severity === 'FATAL' || severity === 'PANIC' || (typeof code === 'string' && /^(08|57P0)/.test(code));
}

/** What {@link queryHeld} sends a statement on. */
export interface Queryable {
  query(text: string, values?: unknown[]): Promise<unknown>;
}

/** A statement: its text, or node-postgres's query config (`{ text, values, rowMode, types, name }`). */
export type Statement = string | { readonly text: string };

/** Sends a statement the driver's way, bypassing any patch of ours (see instrument.ts). */
export type SendStatement = (statement: Statement, values?: unknown[]) => Promise<unknown>;

/**
 * Sends a statement on a held connection (with `send` when given, else `client.query`). One whose connection
 * already failed is not sent: it rejects with the failure. A statement that fails with an error ending the
 * session marks the connection failed.
 */
export function queryHeld<R>(client: Queryable, text: Statement, values?: unknown[], send?: SendStatement): Promise<R> {
  const failure = connectionFailure(client);
  if (failure !== undefined) return Promise.reject(failure);
  const query = send ?? (client.query.bind(client) as SendStatement);
  // The wrapper bounds it already: an instrumented driver (instrumentPg) passes it through.
  const sent = unpatched(() => (values === undefined ? query(text) : query(text, values)));
  // Only a promise: a cursor or a stream (a submittable, passed through) is the driver's business.
  if (typeof (sent as Partial<Promise<unknown>> | undefined)?.then === 'function') {
    sent.then(undefined, (error: unknown) => {
      if (endsSession(error)) remember(connectionOf(client), error as Error);
    });
  }
  return sent as Promise<R>;
}

function noop(): void {}
