/**
 * The mysql2 connection behind a promise one: the object that emits its events, owns its socket and keeps its
 * handshake. Typed on pool connections only in mysql2's declarations, there on every one.
 */
import type { Socket } from 'node:net';
import type { Connection as CoreConnection } from 'mysql2';
import type { Connection } from 'mysql2/promise';

/** @internal What this package reads of a mysql2 connection besides its declared API. */
export type Core = CoreConnection & {
  stream?: Socket;
  /** Set once the server has accepted the login. */
  authorized?: boolean;
  _handshakePacket?: { serverVersion?: unknown } | null;
};

/** @internal */
export function coreOf(connection: Connection): Core {
  return (connection as unknown as { connection: Core }).connection;
}
