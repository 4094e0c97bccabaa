/**
 * `instrumentPg(pg)`: every client a node-postgres module makes, whoever makes it — an ORM (Knex, TypeORM,
 * Sequelize, MikroORM, Prisma's pg adapter), a pool, the app itself — bounded by the request's deadline.
 *
 * `withDeadline(pool)` needs the pool; ORMs open their own. So this patches the module's prototypes, once, when
 * asked (never on import): `Client.prototype.query` and `Pool.prototype.connect`. Inside a deadline context a
 * statement is one `OutgoingCall`, exactly as through a wrapped pool: not sent without time left, the
 * `statement_timeout` belt, a CancelRequest at the stop, the typed error. Outside one, the driver's own code runs
 * and nothing else (one AsyncLocalStorage read), with one exception that keeps the promise: a statement sent on
 * a client whose cancel is still on its way waits for it to be delivered, so that it cannot be what the cancel
 * stops.
 *
 * The client is the ORM's, not ours: it is never destroyed or released here. A stopped statement's transaction
 * is the ORM's to roll back (it does, on the error), and the ROLLBACK runs whatever the time left.
 */

import { AsyncResource } from 'node:async_hooks';
import { InvalidArgumentError } from '@deadline/core';
import {
  type DriverPatch,
  isUnpatched,
  OutgoingCall,
  patchOnce,
  replaceMethods,
  storage,
} from '@deadline/core/internal';
import { checkoutFrom } from './checkout.js';
import { typedError } from './errors.js';
import { holdConnection, queryHeld, type SendStatement, type Statement } from './held-connection.js';
import { type PgDeadlineOptions, type ResolvedPgOptions, resolvePgOptions } from './options.js';
import { type PgClientLike, Session } from './session.js';
import { beltMs, CLEANUP } from './statement-belt.js';
import type { PgPoolClientLike, PgPoolLike } from './with-deadline.js';

/**
 * Options of {@link instrumentPg}: those of `withDeadline()`, but the checkout order (the pool is the ORM's,
 * with its own queue).
 *
 * @example
 * ```ts
 * const options: PgInstrumentOptions = { name: 'orders-db', statementTimeout: false };
 * instrumentPg(pg, options);
 * ```
 */
export type PgInstrumentOptions = Omit<PgDeadlineOptions, 'checkoutOrder'>;

/**
 * The parts of the `pg` module patched (`import pg from 'pg'` fits).
 *
 * @example
 * ```ts
 * import pg from 'pg';
 * const module: PgModule = pg;
 * ```
 */
export interface PgModule {
  Client: { prototype: object };
  Pool?: { prototype: object } | undefined;
}

type Query = (this: InstrumentedClient, config: unknown, values?: unknown, callback?: unknown) => unknown;
type Connect = (this: object, callback?: unknown) => unknown;
type Callback = (error: unknown, result?: unknown, release?: unknown) => void;

interface InstrumentedClient extends PgClientLike {
  database?: string | undefined;
}

/** One module's patch (core's `patchOnce`): the options, whether it is on, and the options resolved per database. */
interface Patch extends DriverPatch<PgInstrumentOptions | undefined> {
  readonly resolved: Map<string | undefined, ResolvedPgOptions>;
}

/** On a patched `Client.prototype`: its patch. Shared by every copy of this package (a registry key). */
const PATCH = Symbol.for('@deadline/pg.instrumentPg');

/**
 * A client's cancel still on its way (its statement was stopped): whatever is sent next on the client waits
 * for it. Resolves once delivered, or at once when there is none.
 */
const settling = new WeakMap<object, Promise<void>>();

/**
 * When a stopped statement's cancel may not have been spent on it (it was sent again), one of them may still be
 * on its way to the server's process: the next statement on the client waits this much longer (ms), the time
 * the server takes to act on a delivered cancel, many times over.
 */
const UNCERTAIN_CANCEL_WAIT_MS = 50;

/**
 * Bounds every query of every client that `pg` (the node-postgres module) makes, by the deadline of the context
 * it is made in, as `withDeadline()` bounds a wrapped pool's: not sent without time left, `statement_timeout` on
 * the server, a CancelRequest at the stop, the typed error (its `cause` the driver's). `pool.connect()` (an
 * ORM's checkout) waits no longer than the deadline. Outside a deadline context nothing changes.
 *
 * Patches `pg.Client.prototype.query` and `pg.Pool.prototype.connect` when called, never on import. Calling it
 * again changes nothing but the options; it returns the function that undoes it (a later patch of someone
 * else's on top stays: ours then passes everything through).
 *
 * @example
 * ```ts
 * import pg from 'pg';
 * import knex from 'knex';
 * import { instrumentPg } from '@deadline/pg';
 *
 * instrumentPg(pg); // before the ORM opens connections, once per process
 * const db = knex({ client: 'pg', connection: process.env.DATABASE_URL });
 * app.get('/orders', async () => db('orders').select()); // bounded by the request's deadline
 * ```
 */
export function instrumentPg(pg: PgModule, options?: PgInstrumentOptions): () => void {
  const prototype = clientPrototypeOf(pg);
  resolvePgOptions(options, undefined); // a bad option fails here, naming it
  return patchOnce<PgInstrumentOptions | undefined, Patch>(
    prototype,
    PATCH,
    options,
    (patch) => install(pg, prototype, patch),
    { resolved: new Map() },
    { reconfigured: (patch) => patch.resolved.clear() },
  );
}

function clientPrototypeOf(pg: PgModule): { query: Query } {
  const prototype = (pg as Partial<PgModule> | null | undefined)?.Client?.prototype as { query?: unknown } | undefined;
  if (typeof prototype?.query !== 'function') {
    throw new InvalidArgumentError('pg', 'the node-postgres module (import pg from "pg")', pg);
  }
  return prototype as { query: Query };
}

/**
 * Replaces `Client.prototype.query` and `Pool.prototype.connect`. Put back, the patch is gone once `query` is
 * (`connect` too, if it is still ours).
 */
function install(pg: PgModule, prototype: { query: Query }, patch: Patch): () => boolean {
  const restoreQuery = replaceMethods(prototype, { query: boundedQuery(patch, prototype.query) });
  const poolPrototype = pg.Pool?.prototype as { connect?: Connect } | undefined;
  const connect = poolPrototype?.connect;
  const restoreConnect =
    poolPrototype !== undefined && typeof connect === 'function'
      ? replaceMethods(poolPrototype, { connect: boundedConnect(patch, connect) })
      : () => true;
  return () => {
    if (!restoreQuery()) return false;
    restoreConnect();
    return true;
  };
}

/** The options for a client of `database` (the target's default name depends on it). */
function resolvedFor(patch: Patch, database: string | undefined): ResolvedPgOptions {
  let resolved = patch.resolved.get(database);
  if (resolved === undefined) {
    resolved = resolvePgOptions(patch.options, database);
    patch.resolved.set(database, resolved);
  }
  return resolved;
}

/** In a context with a deadline, and patched: the statement is ours to bound. */
function inDeadline(patch: Patch): boolean {
  const scope = storage.getStore();
  return patch.enabled && scope !== undefined && !scope.deadline.isNone;
}

/** node-postgres's `query(config, values?, callback?)`, bounded inside a deadline context. */
function boundedQuery(patch: Patch, original: Query): Query {
  return function query(this: InstrumentedClient, config, values, callback) {
    // Sent by withDeadline()'s wrapper, which bounds it already.
    if (isUnpatched()) return original.call(this, config, values, callback);
    const pending = settling.get(this);
    // Outside a deadline (most statements of most apps): one store read, nothing parsed.
    const statement = inDeadline(patch) ? statementOf(config) : undefined;
    if (statement === undefined || CLEANUP.test(textOf(statement))) {
      if (pending === undefined) return original.call(this, config, values, callback);
      return later(pending, () => original.call(this, config, values, callback), config, values, callback);
    }
    const [args, done] = typeof values === 'function' ? [undefined, values] : [values, callback];
    const send: SendStatement = (text, vals) => original.call(this, text, vals) as Promise<unknown>;
    const result = runBounded(patch, this, statement, args as unknown[] | undefined, send, pending);
    if (typeof done !== 'function') return result;
    // The driver's callback style (Knex, TypeORM, pg-pool): called outside the promise chain, so that what it
    // throws is thrown, as the driver's own call would.
    result.then(
      (value) => process.nextTick(done as Callback, null, value),
      (error: unknown) => process.nextTick(done as Callback, error),
    );
    return undefined;
  };
}

/**
 * What a bounded statement sends: a string, or a config with a text (`{ text, values, rowMode, types, name }`);
 * `undefined` for what stays the driver's: a submittable (a cursor, a stream, a `pg.Query`) or a config with its
 * own callback.
 */
function statementOf(config: unknown): Statement | undefined {
  if (typeof config === 'string') return config;
  if (typeof config !== 'object' || config === null) return undefined;
  const c = config as { text?: unknown; submit?: unknown; callback?: unknown };
  if (typeof c.submit === 'function' || typeof c.callback === 'function' || typeof c.text !== 'string')
    return undefined;
  return config as Statement;
}

function textOf(statement: Statement): string {
  return typeof statement === 'string' ? statement : statement.text;
}

/** A statement outside our bounds, sent once the client's pending cancel is delivered. */
function later(
  pending: Promise<void>,
  send: () => unknown,
  config: unknown,
  values: unknown,
  callback: unknown,
): unknown {
  const sent = pending.then(send);
  // A submittable is returned as it is (the driver returns it too); its events come once it is sent.
  if (typeof (config as { submit?: unknown } | null)?.submit === 'function') return config;
  const done = typeof values === 'function' ? values : callback;
  if (typeof done === 'function') return undefined; // the driver calls it, once sent
  return sent;
}

/**
 * One statement under the call: the client's pending cancel first, then the belt, the statement and the reset.
 * When the call stopped, the caller is answered at once and the client's next statement waits until the cancel
 * is delivered and the belt reset.
 */
async function runBounded(
  patch: Patch,
  client: InstrumentedClient,
  statement: Statement,
  values: unknown[] | undefined,
  send: SendStatement,
  pending: Promise<void> | undefined,
): Promise<unknown> {
  const resolved = resolvedFor(patch, client.database);
  const call = OutgoingCall.start(resolved.target, resolved, resolved.guard);
  const session = new Session(client, call, send);
  if (pending !== undefined) await call.race(() => pending).catch(() => {});
  if (session.stopped !== undefined) {
    // Stopped while the client's previous cancel was still on its way: nothing was sent, so nothing is held or
    // settled. (Held until the chain before it settled, a run of such statements stacked one 'error' listener
    // each on the client: Node's "possible EventEmitter memory leak" warning, in the ORM checks.)
    const typed = typedError(session.stopped, call, session.stopped);
    call.end(typed);
    throw typed;
  }
  const letGo = holdConnection(client);
  const belt = resolved.statementTimeout && call.timeoutMs !== undefined ? beltFor(client, statement) : undefined;
  let beltSet = false;
  try {
    if (belt !== undefined) {
      await session.query(`${belt} statement_timeout = ${beltMs(call)}`);
      beltSet = true;
    }
    const result = await session.query(statement, values);
    call.end();
    // The result is the caller's now; the reset follows, and the client's next statement waits for it.
    if (beltSet || session.cancelSent) settleLater(client, session, beltSet, send, letGo);
    else letGo();
    return result;
  } catch (error) {
    const typed = typedError(error, call, session.stopped);
    call.end(typed);
    settleLater(client, session, beltSet, send, letGo);
    throw typed;
  }
}

/** Statements that open or end a transaction, or mark a point in one: instant, and never given the belt. */
const TRANSACTION_CONTROL =
  /^\s*(begin|start\s+transaction|commit|end|rollback|abort|savepoint|release|prepare\s+transaction)\b/i;

/**
 * How the belt is set for `statement` on `client`, by its transaction status (node-postgres keeps the server's
 * last ReadyForQuery): `SET` outside a transaction (reset after the statement); `SET LOCAL` inside one, which
 * the transaction's end undoes whatever happens — a plain `SET` there, then the ORM's ROLLBACK after a cut,
 * would bring back the value before the transaction, ours when its BEGIN had been belted. `undefined`: no belt
 * (transaction control; a failed transaction, where every statement fails; a driver that does not tell).
 */
function beltFor(client: InstrumentedClient, statement: Statement): 'SET' | 'SET LOCAL' | undefined {
  if (TRANSACTION_CONTROL.test(textOf(statement))) return undefined;
  const status = transactionStatusOf(client);
  if (status === 'I') return 'SET';
  if (status === 'T') return 'SET LOCAL';
  return undefined;
}

/** `'I'` idle, `'T'` in a transaction, `'E'` in a failed one; `undefined` before the first statement. */
function transactionStatusOf(client: InstrumentedClient): string | undefined {
  const c = client as { getTransactionStatus?: () => unknown; _txStatus?: unknown };
  const status = typeof c.getTransactionStatus === 'function' ? c.getTransactionStatus() : c._txStatus;
  return typeof status === 'string' ? status : undefined;
}

/**
 * After the statement: until it settled, its cancel (if any) was delivered and the belt reset, the client's next
 * statement waits. A RESET that fails (the ORM's transaction is aborted) is left to its ROLLBACK, which undoes
 * the SET made inside it.
 */
function settleLater(
  client: InstrumentedClient,
  session: Session,
  reset: boolean,
  send: SendStatement,
  letGo: () => void,
): void {
  const done = (async () => {
    const clean = await session.quiet();
    if (!clean) await new Promise((resolve) => setTimeout(resolve, UNCERTAIN_CANCEL_WAIT_MS));
    if (reset) await queryHeld(client, 'RESET statement_timeout', undefined, send).catch(() => {});
  })();
  const previous = settling.get(client);
  const all = (previous === undefined ? done : Promise.all([previous, done])).then(
    () => {},
    () => {},
  );
  settling.set(client, all);
  void all.then(() => {
    if (settling.get(client) === all) settling.delete(client);
    letGo();
  });
}

/** pg-pool's `connect(callback?)`: inside a deadline context the wait for a client ends with the deadline. */
function boundedConnect(patch: Patch, original: Connect): Connect {
  return function connect(this: object, callback?: unknown) {
    if (isUnpatched()) return original.call(this, callback); // withDeadline()'s own checkout
    // pg-pool calls a waiter back from whatever hands it a client (a release in another request, a connect): in
    // that code's async context, not the waiter's. Bound here, the callback runs in its caller's.
    if (typeof callback === 'function') callback = AsyncResource.bind(callback as Callback);
    if (!inDeadline(patch)) return original.call(this, callback);
    const options = (this as { options?: { database?: string } }).options;
    const resolved = resolvedFor(patch, options?.database);
    let checkedOut: Promise<PgPoolClientLike>;
    try {
      const call = OutgoingCall.start(resolved.target, resolved, resolved.guard);
      // withDeadline()'s checkout: raced against the stop, a late client released outside any context.
      checkedOut = checkoutFrom(this as PgPoolLike, undefined, call).then((client) => {
        call.end();
        return client;
      });
    } catch (error) {
      checkedOut = Promise.reject(error);
    }
    if (typeof callback !== 'function') return checkedOut;
    checkedOut.then(
      (client) => process.nextTick(callback as Callback, null, client, client.release),
      (error: unknown) => process.nextTick(callback as Callback, error),
    );
    return undefined;
  };
}
