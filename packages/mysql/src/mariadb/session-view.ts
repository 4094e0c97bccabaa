/**
 * The Session (session.ts) drives a connection through mysql2's promise shape: `query(sql, values)` and
 * `execute(sql, values)` resolving `[rows, fields]`, `threadId`, and the core connection's events, socket and
 * handshake (core-connection.ts). This is that shape over a `mariadb` connector connection, sending through the
 * connector's own (unpatched) methods.
 */
import type { Connection } from 'mysql2/promise';
import type { Core } from '../core-connection.js';
import type { CmdParam, MariadbConnection, MariadbMethods, Method } from './connector.js';

/** Statements to send with `batch()` when the Session executes them (they are prepared, as `execute()`'s are). */
const batches = new WeakSet<object>();

/** @internal Marks `cmdParam` as a batch: the view's `execute()` sends it with the connector's `batch()`. */
export function asBatch(cmdParam: CmdParam): CmdParam {
  batches.add(cmdParam);
  return cmdParam;
}

/** The Session passes SQL text (its own SET statements) or the caller's cmdParam, possibly with the belt added. */
function paramOf(sql: unknown, values: unknown): CmdParam {
  if (typeof sql === 'string') return { sql, values };
  return values === undefined ? (sql as CmdParam) : { ...(sql as CmdParam), values };
}

/**
 * The core connection's part (core-connection.ts): 'end' (the connector emits it on every close; an 'error'
 * listener is not added, since it changes how the connector reports a failure), the socket, the server's version
 * as the handshake gave it. Met logged in: the connector's own statements while connecting are never bounded.
 */
function coreOf(conn: MariadbConnection): Core {
  const core = {
    on(event: string, listener: () => void) {
      if (event === 'end') conn.on('end', listener);
      return core;
    },
    get stream() {
      return conn.socket ?? undefined;
    },
    authorized: true,
    get _handshakePacket() {
      return { serverVersion: conn.info?.serverVersion?.raw };
    },
  };
  return core as unknown as Core;
}

/** @internal The Session's view of `conn`, sending with `original`, the connector's own methods. */
export function sessionViewOf(conn: MariadbConnection, original: MariadbMethods): Connection {
  const send =
    (choose: (param: CmdParam) => Method) =>
    (sql: unknown, values?: unknown): Promise<[unknown, undefined]> =>
      new Promise((resolve, reject) => {
        const param = paramOf(sql, values);
        choose(param).call(conn, param, (rows) => resolve([rows, undefined]), reject);
      });
  const view = {
    connection: coreOf(conn),
    get threadId() {
      return conn.threadId;
    },
    query: send(() => original.query),
    execute: send((param) => (batches.has(param) ? original.batch : original.prepareExecute)),
  };
  return view as unknown as Connection;
}
