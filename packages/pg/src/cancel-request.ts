/**
 * The Postgres CancelRequest: a 16-byte message on a new connection naming a backend (process id + secret
 * key). It interrupts whatever that backend is running *when it arrives* — hence the race the callers guard:
 * a cancel must never be left to land on the next query of a reused connection.
 *
 * What it costs at the stop is mostly the connection: the postmaster forks a process for every connection it
 * accepts, before it has read a byte, and only that process reads the request and signals the backend. A
 * connection opened a little ahead (`openCancelConnection`) has that fork behind it when the stop comes: the
 * request is then one write. Nothing is sent on it until then; closed unused, the server's process exits
 * without a word in its log (no data at all is not an error to Postgres).
 */
import { connect, type Socket } from 'node:net';

/** What a pg `Client` knows about its backend and server (public fields of node-postgres 8). */
export interface CancelTarget extends CancelEndpoint {
  processID: number | null | undefined;
  secretKey: number | null | undefined;
}

/** Where the cancel goes: the server the backend's own connection reached (an address, or a socket directory). */
export interface CancelEndpoint {
  host?: string | undefined;
  port?: number | undefined;
}

const CANCEL_REQUEST_CODE = 80877102;
/** A server that does not answer must not keep a cancel socket (or its caller) waiting. */
const SOCKET_TIMEOUT_MS = 5_000;

/** Opens a connection for a CancelRequest, sending nothing yet. Never throws; a failure shows as a closed socket. */
export function openCancelConnection(endpoint: CancelEndpoint): Socket {
  const host = endpoint.host ?? 'localhost';
  const port = endpoint.port ?? 5432;
  // A socket path (`host` starting with '/') as node-postgres understands it.
  const socket = host.startsWith('/') ? connect(`${host}/.s.PGSQL.${port}`) : connect({ port, host, noDelay: true });
  socket.setTimeout(SOCKET_TIMEOUT_MS, () => socket.destroy());
  socket.on('error', () => {});
  return socket;
}

/**
 * Sends a CancelRequest for `target`'s backend — on `opened` (from {@link openCancelConnection}) when it is
 * still usable, else on a new connection. Resolves once the server has closed the cancel connection — that is,
 * once it has signalled the backend — or the attempt failed (never rejects: a cancel is best effort, the
 * callers decide what to do with a connection whose query may still run).
 */
export function sendCancelRequest(target: CancelTarget, opened?: Socket): Promise<boolean> {
  const { processID, secretKey } = target;
  if (typeof processID !== 'number' || typeof secretKey !== 'number') {
    opened?.destroy();
    return Promise.resolve(false);
  }
  const socket = opened !== undefined && !opened.destroyed ? opened : openCancelConnection(target);
  const message = Buffer.allocUnsafe(16);
  message.writeInt32BE(16, 0);
  message.writeInt32BE(CANCEL_REQUEST_CODE, 4);
  message.writeInt32BE(processID, 8);
  message.writeInt32BE(secretKey, 12);
  return new Promise((resolve) => {
    let sent = false;
    socket.once('close', () => resolve(sent));
    // Written at once on a connected socket; queued until the connection is up on one still connecting.
    socket.end(message, (error?: Error | null) => {
      if (error == null) sent = true;
    });
  });
}
