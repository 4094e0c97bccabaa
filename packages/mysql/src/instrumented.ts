/**
 * What `instrumentMysql()` (mysql2) and `instrumentMariadb()` (the `mariadb` connector) share: their patch (core's
 * `patchOnce`, with the side connections it keeps), how a pool's checkout keeps its caller's context, which statements are never
 * refused, how a connection's later statements wait
 * for the cleanup of its bounded ones, how a connection met mid-life is first seen alive, and one backend per
 * server and user.
 */
import { AsyncResource } from 'node:async_hooks';
import { type DriverPatch, isUnpatched, outsideContext, patchOnce, storage } from '@deadline/core/internal';
import type { Backend } from './backend.js';
import type { MysqlInstrumentOptions } from './options.js';
import type { Session } from './session.js';
import { underCall } from './under-call.js';

/** @internal One driver's instrumentation, as installed on its prototype: what its bounded statements read. */
export interface Instrumentation extends DriverPatch<MysqlInstrumentOptions | undefined> {
  /** One backend (side connections, flavour) per server and user. */
  readonly backends: Map<string, Backend>;
}

/**
 * @internal Installs one driver's instrumentation once per process (core's `patchOnce`): `install` replaces the
 * driver's methods; undoing it also closes its side connections.
 */
export function instrumentOnce(
  prototype: object,
  key: symbol,
  options: MysqlInstrumentOptions | undefined,
  install: (instrumentation: Instrumentation) => () => boolean,
): () => void {
  return patchOnce<MysqlInstrumentOptions | undefined, Instrumentation>(
    prototype,
    key,
    options,
    install,
    { backends: new Map() },
    { turnedOff: closeBackends },
  );
}

function closeBackends(instrumentation: Instrumentation): void {
  for (const backend of instrumentation.backends.values()) void backend.killer.end();
  instrumentation.backends.clear();
}

/** @internal Statements that put a connection back in order: never refused, however little time is left. */
export const CLEANUP = /^\s*(rollback|unlock\s+tables|release\s+savepoint|rollback\s+to)\b/i;

/** A connection's bounded statements not yet cleaned up (the KILL done): what an unbounded one waits for. */
const cleanups = new WeakMap<object, Promise<void>>();

/** @internal What a statement on `connection` outside our bound waits for, if anything: the last KILL's end. */
export function cleanupOf(connection: object): Promise<void> | undefined {
  return cleanups.get(connection);
}

/**
 * @internal Notes `run`, a bounded statement on `connection`: later statements wait until its caller has its
 * answer (the statement is then in the session, even the first one on a connection, sent after its ping) and the
 * session's cleanup (the KILL) is done.
 */
export function noteBounded(connection: object, session: Session, run: Promise<unknown>): void {
  const idle = run.then(
    () => session.idle(),
    () => session.idle(),
  );
  cleanups.set(connection, idle);
  void idle.then(() => {
    if (cleanups.get(connection) === idle) cleanups.delete(connection);
  });
}

/** Connections met, and pinged once: the ping's answer is their sighting. */
const pinged = new WeakMap<object, Promise<void>>();
const SEEN = Promise.resolve();

/**
 * @internal A KILL goes out only for a connection seen alive on the side connection's server run (sightings.ts):
 * the server must have said something on it since this package met it. A wrapped pool's connections are seen at
 * their handshake; an ORM's, opened before or without us, are met mid-life, and their first statement under a
 * deadline would be the first thing heard. So a connection met for the first time is pinged first (COM_PING, one
 * round trip, once per connection) with `ping`, the driver's own; `undefined` once it has been seen, or when it
 * cannot be pinged yet (`ping` undefined: not logged in).
 */
export function metAlive(
  connection: object,
  ping: ((done: () => void) => void) | undefined,
): Promise<void> | undefined {
  let met = pinged.get(connection);
  if (met === undefined) {
    if (ping === undefined) return undefined;
    met = new Promise<void>((resolve) => ping(resolve));
    pinged.set(connection, met);
    void met.then(() => pinged.set(connection, SEEN));
  }
  return met === SEEN ? undefined : met;
}

/** @internal The backend of one server and user (`parts`: host, port, socket, user, database), made at first need. */
export function backendIn(backends: Map<string, Backend>, parts: readonly unknown[], make: () => Backend): Backend {
  const key = parts.join('|');
  let backend = backends.get(key);
  if (backend === undefined) {
    backend = make();
    backends.set(key, backend);
  }
  return backend;
}

/** @internal A pool's `getConnection()`, whatever its arguments; its callback is the last function among them. */
export type Checkout = (this: object, ...args: unknown[]) => unknown;

/** @internal How an instrumentation sees one pool: the backend of its server and user, and how to give back. */
export interface PoolSide {
  backendOf(pool: object): Backend;
  release(pool: object, connection: unknown): void;
}

/**
 * @internal A pool's `getConnection()` bounded by the caller's deadline, its callback run in the caller's
 * context.
 *
 * A pool calls a waiting caller back from wherever a connection became free or was made: another request's
 * release (its deadline, not this caller's), a new connection's login. Without the binding, the statements the
 * caller, or the pool's own `query()`, sends on that connection would run under someone else's deadline, or none.
 * And the wait itself is part of the caller's time: inside a deadline context it is one call (not made without
 * time left; the typed error when the deadline passes first), and a connection handed over after that goes
 * straight back to the pool. Outside a deadline context the pool's own code runs.
 */
export function boundedCheckout(original: Checkout, side: PoolSide): Checkout {
  return function getConnection(this: object, ...args) {
    const scope = storage.getStore();
    const at = args.findLastIndex((arg) => typeof arg === 'function');
    if (scope === undefined || at < 0) return original.apply(this, args);
    const callback = AsyncResource.bind(args[at] as (error: unknown, connection?: unknown) => void);
    // Without a deadline, or for withDeadline()'s own checkout (bounded already): only the context kept.
    if (scope.deadline.isNone || isUnpatched()) return original.apply(this, args.with(at, callback));
    const checkedOut = underCall(side.backendOf(this), (call) =>
      call.race(
        () =>
          new Promise<unknown>((resolve, reject) => {
            const settle = (error: unknown, connection?: unknown) => (error ? reject(error) : resolve(connection));
            original.apply(this, args.with(at, settle));
          }),
        (late) => outsideContext(() => side.release(this, late)),
      ),
    );
    checkedOut.then(
      (connection) => process.nextTick(callback, null, connection),
      (error: unknown) => process.nextTick(callback, error),
    );
    return undefined;
  };
}
