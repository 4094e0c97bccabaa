/**
 * The side connection: a connection of our own to the same server, with the pool's own configuration (host, user,
 * TLS, auth plugins), used to send KILL QUERY while the statement's own connection is busy running it.
 */
import { storage } from '@deadline/core/internal';
import { Connection as CoreConnection } from 'mysql2';
import type { Connection } from 'mysql2/promise';

/** @internal An open side connection and the version its server announced. */
export interface OpenSideConnection {
  connection: Connection;
  serverVersion: string | undefined;
}

/** @internal A side connection being opened, or open. */
export interface SideConnection {
  /** Resolves once the handshake is done; rejects if the connect fails. */
  ready: Promise<OpenSideConnection>;
  /** Whether the handshake is done. */
  readonly connected: boolean;
  /** Closes the socket now, connected or still connecting. */
  destroy(): void;
}

interface CoreConnectionLike {
  on(event: 'error' | 'end', listener: () => void): unknown;
  once(event: 'connect', listener: (handshake?: { serverVersion?: unknown }) => void): unknown;
  once(event: 'error', listener: (error: Error) => void): unknown;
  stream?: { unref?: () => void } | undefined;
  promise(): Connection;
  destroy(): void;
}

type CoreConnectionClass = new (options: { config: object }) => CoreConnectionLike;

/**
 * @internal Opens a connection with a copy of `config` (a mysql2 `ConnectionConfig`, as parsed for the pool).
 * `onGone` is called when it closes or fails later, so the owner stops using it.
 */
export function openSideConnection(config: object, onGone: () => void): SideConnection {
  // Outside any request's context: the socket lives longer than the request that happened to need it first, and
  // must neither keep that request's context alive nor run anything in it.
  return storage.exit(() => {
    // The pool's parsed config, copied the way mysql2's pool copies it for each of its own connections; not a
    // member of the pool, so `pool` is cleared.
    const copy = Object.create(Object.getPrototypeOf(config), Object.getOwnPropertyDescriptors(config));
    copy.pool = undefined;
    const core = new (CoreConnection as unknown as CoreConnectionClass)({ config: copy });
    // Without a listener, an error on the idle connection (the server closed it) would crash the process.
    core.on('error', onGone);
    core.on('end', onGone);
    let connected = false;
    const ready = new Promise<OpenSideConnection>((resolve, reject) => {
      core.once('error', reject);
      core.once('connect', (handshake) => {
        connected = true;
        // Never the reason the process stays up: the pool's own connections are.
        core.stream?.unref?.();
        const version = handshake?.serverVersion;
        resolve({ connection: core.promise(), serverVersion: typeof version === 'string' ? version : undefined });
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
