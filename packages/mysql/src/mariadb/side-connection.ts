/**
 * Side connections (where KILL QUERY goes) made by the `mariadb` connector itself, with the options of the
 * connection whose statements they stop: the same server, user, TLS and auth, and no second driver to install.
 */
import { outsideContext } from '@deadline/core/internal';
import { peerOf } from '../peer.js';
import { aimOf, type SideConnection, type SideOpener, type SideStatements } from '../side-connection.js';
import type { MariadbConnection, MariadbConnectionClass } from './connector.js';

/**
 * Options the KILLs and the reads of the server's run rely on, whatever the application's connections use: rows
 * as objects by name, and no statement timeout of the connector's own (the killer bounds each KILL).
 */
const SIDE_OPTIONS = {
  rowsAsArray: false,
  nestTables: undefined,
  metaAsArray: false,
  namedPlaceholders: false,
  queryTimeout: 0,
  socketTimeout: 0,
};

/**
 * A copy of a connection's parsed options: its own fields only, not those of the event emitter they sit on (the
 * connector copies them onto a new one of its own).
 */
function optionsFrom(opts: Record<string, unknown>): object {
  const copy: Record<string, unknown> = {};
  for (const key of Object.keys(opts)) if (!key.startsWith('_')) copy[key] = opts[key];
  return { ...copy, ...SIDE_OPTIONS };
}

function statementsOf(conn: MariadbConnection): SideStatements {
  return {
    query: (sql) =>
      new Promise((resolve, reject) => {
        conn.query({ sql }, (rows) => resolve([rows]), reject);
      }),
    end: () =>
      new Promise((resolve) => {
        conn.end(
          {},
          () => resolve(),
          () => resolve(),
        );
      }),
    get threadId() {
      return conn.threadId;
    },
  };
}

/**
 * @internal Side connections made with `Connection` and `opts`, the parsed options of a connection of the
 * application's (or of its pool's connections).
 */
export function mariadbSides(Connection: MariadbConnectionClass, opts: Record<string, unknown>): SideOpener {
  const options = optionsFrom(opts);
  return (runs, onGone) => openSide(Connection, options, runs, onGone);
}

function openSide(
  Connection: MariadbConnectionClass,
  options: object,
  runs: Parameters<SideOpener>[0],
  onGone: () => void,
): SideConnection {
  const openingAt = performance.now();
  // Outside any request's context: the socket outlives the request that happened to need it first.
  return outsideContext(() => {
    const conn = new Connection(options);
    // With an 'error' listener the connector reports a failure there instead of throwing it from a socket event.
    conn.on('error', onGone);
    conn.on('end', onGone);
    let connected = false;
    const ready = conn.connect().then(async () => {
      // Never the reason the process stays up: the application's own connections are.
      conn.socket?.unref();
      const version = conn.info?.serverVersion?.raw;
      const statements = statementsOf(conn);
      const aim = await aimOf(statements, peerOf(conn.socket ?? undefined, version), runs, openingAt);
      connected = true;
      return { connection: statements, serverVersion: typeof version === 'string' ? version : undefined, aim };
    });
    return {
      ready,
      get connected() {
        return connected;
      },
      // The socket, not the connector's destroy(): with a command in flight, that opens yet another connection
      // to KILL this one.
      destroy: () => {
        if (conn.socket) conn.socket.destroy();
        else conn.destroy();
      },
    };
  });
}
