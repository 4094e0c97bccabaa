/**
 * The side connection: a connection of our own to the same server, with the pool's own configuration (host, user,
 * TLS, auth plugins), used to send KILL QUERY while the statement's own connection is busy running it. Before it
 * is ready it learns which server run it reached (server-run.ts), which says what its KILLs may name.
 *
 * Made by the driver the statements run on: mysql2's here, the `mariadb` connector's in mariadb/side-connection.ts.
 * The killer only needs what {@link SideStatements} says.
 */
import { createRequire } from 'node:module';
import type { Socket } from 'node:net';
import { outsideContext } from '@deadline/core/internal';
import type { Connection } from 'mysql2/promise';
import { isFatal } from './driver-errors.js';
import { peerOf } from './peer.js';
import { Aim, type RunLog, readServerRun } from './server-run.js';

/** @internal What the killer sends on a side connection: KILL QUERY, and the reads that tell its server's run. */
export interface SideStatements {
  /** Resolves with the rows (as objects) first; rejects with the driver's error. */
  query(sql: string): Promise<[unknown, ...unknown[]]>;
  /** A graceful close, once what was sent has been answered. */
  end(): Promise<void>;
  /** The server's id for this connection. */
  readonly threadId: number | null;
}

/** @internal An open side connection, the version its server announced, and what its KILLs may name. */
export interface OpenSideConnection {
  connection: SideStatements;
  serverVersion: string | undefined;
  aim: Aim;
}

/** @internal A side connection being opened, or open. */
export interface SideConnection {
  /** Resolves once the handshake is done and the run known; rejects if the connect fails. */
  ready: Promise<OpenSideConnection>;
  /** Whether it is ready: connected, its run known. */
  readonly connected: boolean;
  /** Closes the socket now, connected or still connecting. */
  destroy(): void;
}

interface CoreConnectionLike {
  on(event: 'error' | 'end', listener: () => void): unknown;
  once(event: 'connect', listener: (handshake?: { serverVersion?: unknown }) => void): unknown;
  once(event: 'error', listener: (error: Error) => void): unknown;
  stream?: Socket | undefined;
  promise(): Connection;
  destroy(): void;
}

type CoreConnectionClass = new (options: { config: object }) => CoreConnectionLike;

/**
 * @internal Opens one side connection; its `onGone` is called when it closes or fails later, so its owner stops
 * using it. What a killer is given: the driver's way to open one, with the configuration of the connections whose
 * statements it kills.
 */
export type SideOpener = (runs: RunLog, onGone: () => void) => SideConnection;

/**
 * mysql2's core connection class, loaded when the first side connection opens: mysql2 is needed only by those
 * who use it (a `mariadb`-only application does not install it).
 */
let mysql2Connection: CoreConnectionClass | undefined;
function coreConnectionClass(): CoreConnectionClass {
  mysql2Connection ??= (createRequire(import.meta.url)('mysql2') as { Connection: CoreConnectionClass }).Connection;
  return mysql2Connection;
}

/** @internal What a connection that answered may kill: the run it reached, or nothing when it cannot tell (a proxy?). */
export async function aimOf(opened: SideStatements, peer: string, runs: RunLog, openingAt: number): Promise<Aim> {
  try {
    return runs.arrive(await readServerRun(opened), peer, openingAt);
  } catch (error) {
    if (isFatal(error)) throw error; // the connection died: a failed connect
    return Aim.NOWHERE;
  }
}

/** @internal Side connections made by mysql2 with `config` (a mysql2 `ConnectionConfig`, as parsed for the pool). */
export function mysql2Sides(config: object): SideOpener {
  return (runs, onGone) => openSideConnection(config, runs, onGone);
}

/**
 * @internal Opens a connection with a copy of `config` (a mysql2 `ConnectionConfig`, as parsed for the pool), and
 * logs the run it reaches in `runs`. `onGone` is called when it closes or fails later, so the owner stops using it.
 */
export function openSideConnection(config: object, runs: RunLog, onGone: () => void): SideConnection {
  const openingAt = performance.now();
  // Outside any request's context: the socket lives longer than the request that happened to need it first, and
  // must neither keep that request's context alive nor run anything in it.
  return outsideContext(() => {
    // The pool's parsed config, copied the way mysql2's pool copies it for each of its own connections; not a
    // member of the pool, so `pool` is cleared.
    const copy = Object.create(Object.getPrototypeOf(config), Object.getOwnPropertyDescriptors(config));
    copy.pool = undefined;
    const core = new (coreConnectionClass())({ config: copy });
    // Without a listener, an error on the idle connection (the server closed it) would crash the process.
    core.on('error', onGone);
    core.on('end', onGone);
    let connected = false;
    const ready = new Promise<OpenSideConnection>((resolve, reject) => {
      core.once('error', reject);
      core.once('connect', (handshake) => {
        // Never the reason the process stays up: the pool's own connections are.
        core.stream?.unref?.();
        const version = handshake?.serverVersion;
        const connection = core.promise() as unknown as SideStatements;
        aimOf(connection, peerOf(core.stream, version), runs, openingAt).then((aim) => {
          // Connected once ready: until then nothing but our own reads is queued on it, and end() may just
          // destroy it.
          connected = true;
          resolve({ connection, serverVersion: typeof version === 'string' ? version : undefined, aim });
        }, reject);
      });
    });
    return {
      ready,
      get connected() {
        return connected;
      },
      destroy: () => core.destroy(),
    };
  });
}
