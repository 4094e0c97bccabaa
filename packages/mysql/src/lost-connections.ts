/**
 * Connections the server dropped (killed, restarted, failed over, timed out), as mysql2 reports them.
 *
 * mysql2 emits 'error' on a connection that dies with no statement in flight to hand the error to (an idle one),
 * and on a pool connection whenever it dies; an 'error' event nobody listens to is thrown, and takes the process
 * down. mysql2's own listeners cannot be counted on: a pool connection's removes itself after the first error,
 * and a connection from `createConnection(...).promise()` has none. So every connection this package runs a
 * statement on gets a listener of ours, once, kept for the connection's whole life (the statement in flight
 * hears of the error from mysql2 itself; the event only tells us the connection is gone).
 */
import type { Connection } from 'mysql2/promise';
import { type Core, coreOf } from './core-connection.js';

const watched = new WeakSet<Core>();
const lost = new WeakSet<Core>();

/** @internal Listens, from now on, for `connection` dying. Idempotent. */
export function watchForLoss(connection: Connection): void {
  const core = coreOf(connection);
  if (watched.has(core)) return;
  watched.add(core);
  const onLost = () => lost.add(core);
  core.on('error', onLost);
  // The server closed its side. mysql2 fails the statement in flight only once the socket has closed, after
  // this: a KILL sent in between would name a thread that is gone.
  core.on('end', onLost);
}

/** @internal Whether `connection` has died since {@link watchForLoss} was called on it. */
export function isLost(connection: Connection): boolean {
  return lost.has(coreOf(connection));
}

/**
 * @internal Closes the socket of a connection the server no longer has, though this process has not heard (a
 * connection cut on the way: a failover, a firewall forgetting it). mysql2's `destroy()` would wait for the
 * server's side of the close, which never comes; TCP keepalive notices only after hours. Closing the socket
 * makes mysql2 fail the statement in flight at once, so its connection is not held for a dead server.
 */
export function abandon(connection: Connection): void {
  const core = coreOf(connection);
  lost.add(core);
  core.stream?.destroy();
}
