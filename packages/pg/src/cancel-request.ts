/**
 * The Postgres CancelRequest: a 16-byte message on a new connection naming a backend (process id + secret
 * key). It interrupts whatever that backend is running *when it arrives* — hence the race the callers guard:
 * a cancel must never be left to land on the next query of a reused connection.
 */
import { connect } from 'node:net';

/** What a pg `Client` knows about its backend and server (public fields of node-postgres 8). */
export interface CancelTarget {
  processID: number | null | undefined;
  secretKey: number | null | undefined;
  host?: string | undefined;
  port?: number | undefined;
}

const CANCEL_REQUEST_CODE = 80877102;

/**
 * Sends a CancelRequest for `target`'s backend. Resolves once the server has closed the cancel connection —
 * that is, once it has signalled the backend — or the attempt failed (never rejects: a cancel is best effort,
 * the callers decide what to do with a connection whose query may still run).
 */
export function sendCancelRequest(target: CancelTarget): Promise<boolean> {
  const { processID, secretKey } = target;
  if (typeof processID !== 'number' || typeof secretKey !== 'number') return Promise.resolve(false);
  const host = target.host ?? 'localhost';
  const port = target.port ?? 5432;
  return new Promise((resolve) => {
    // A socket path (`host` starting with '/') as node-postgres understands it.
    const socket = host.startsWith('/') ? connect(`${host}/.s.PGSQL.${port}`) : connect(port, host);
    let sent = false;
    socket.setNoDelay(true);
    // Bounded: a server that does not answer must not keep this socket (or the caller) waiting.
    socket.setTimeout(5_000, () => socket.destroy());
    socket.once('connect', () => {
      const message = Buffer.alloc(16);
      message.writeInt32BE(16, 0);
      message.writeInt32BE(CANCEL_REQUEST_CODE, 4);
      message.writeInt32BE(processID, 8);
      message.writeInt32BE(secretKey, 12);
      socket.end(message);
      sent = true;
    });
    socket.once('error', () => {});
    socket.once('close', () => resolve(sent));
  });
}
