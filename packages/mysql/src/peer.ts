/**
 * Where a connection reached its server: the address and port its socket is connected to, and the version the
 * server announced in its handshake. Read from what mysql2 already holds, no round trip, for the side connection
 * and for every connection a KILL may be meant for. Two connections whose peers differ may be on two servers (a
 * failover behind a host name that now resolves elsewhere, a name with several addresses): a KILL sent on one
 * cannot be aimed at the other's thread.
 */
import type { Socket } from 'node:net';

/** @internal `address:port version`; a socket already closed has no address, and matches no open one. */
export function peerOf(stream: Socket | undefined, serverVersion: unknown): string {
  return `${stream?.remoteAddress ?? '-'}:${stream?.remotePort ?? '-'} ${String(serverVersion)}`;
}
