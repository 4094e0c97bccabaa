/**
 * When, and where, each connection was first seen alive: what a KILL for its thread is checked against (see
 * server-run.ts). Seen alive means the server said something on it after this package met it: the end of its
 * handshake, when a wrapped pool announces a connection it opened; else the first bytes the server sends on it
 * (the answer to its first statement, or to the session limit an `execute()` sets first).
 *
 * Recorded once per connection, by listeners that fire once: a statement in time pays for nothing here. A
 * connection met while its statement already hangs (cut on the way before this package ever saw the server
 * answer on it) is never seen alive, and so never the target of a KILL: its deadline is left to the belt.
 */
import type { Connection, Pool } from 'mysql2/promise';
import { type Core, coreOf } from './core-connection.js';
import { peerOf } from './peer.js';

/** @internal A connection seen alive: when (ms on `performance.now()`'s clock) and at which peer. */
export interface Sighting {
  readonly at: number;
  readonly peer: string;
}

const sightings = new WeakMap<Core, Sighting>();
/** Connections with a listener waiting to see them alive. */
const awaited = new WeakSet<Core>();
const noting = new WeakSet<object>();

function sight(core: Core): void {
  if (sightings.has(core)) return;
  sightings.set(core, { at: performance.now(), peer: peerOf(core.stream, core._handshakePacket?.serverVersion) });
}

/** @internal Records each connection `pool` opens from now on as seen alive when its handshake is done. */
export function noteHandshakes(pool: Pool): void {
  // The promise pool's own 'connection' event hands out a wrapper; the core pool's, the connection itself.
  const core = (pool as unknown as { pool: { on(event: 'connection', listener: (core: Core) => void): unknown } }).pool;
  if (noting.has(core)) return;
  noting.add(core);
  core.on('connection', sight);
}

/** @internal Records `connection` as seen alive the next time its server says something, unless already seen. */
export function watchForSighting(connection: Connection): void {
  const core = coreOf(connection);
  if (sightings.has(core) || awaited.has(core)) return;
  awaited.add(core);
  // Still logging in (a callback connection wrapped at once): its handshake is the sign. The socket may yet be
  // swapped for a TLS one, so the connection's own event is listened to, not the socket's.
  if (core.authorized !== true) core.once('connect', () => sight(core));
  else core.stream?.once('data', () => sight(core));
}

/** @internal When and where `connection` was first seen alive, if it has been. */
export function sightingOf(connection: Connection): Sighting | undefined {
  return sightings.get(coreOf(connection));
}
