/**
 * KILL QUERY, sent on the side connection: one per wrapped pool, opened when a statement first runs under a
 * deadline, reused, closed by `end()`. KILLs queue on that one connection (each takes well under a millisecond)
 * rather than opening more under load, which is when the server can least afford new connections. Every KILL is
 * bounded: a side connection that does not answer in time, or fails, is destroyed, even mid-connect, and the next
 * KILL opens a fresh one, so a stuck connection is never waited on twice and never leaks.
 */
import type { RowDataPacket } from 'mysql2/promise';
import { ER_NO_SUCH_THREAD, errnoOf, isFatal } from './driver-errors.js';
import { RunLog } from './server-run.js';
import { openSideConnection, type SideConnection } from './side-connection.js';
import type { Sighting } from './sightings.js';

/** How long a KILL may take, the side connection's connect included, before we give up on that connection. */
export const KILL_TIMEOUT_MS = 2_000;

const TIMED_OUT = Symbol('timed-out');
const ELSEWHERE = Symbol('elsewhere');

/**
 * @internal What became of a KILL QUERY: carried out; refused because the server has no such thread (the
 * connection it named is gone); not sent, because the side connection reached a server run on which the target
 * connection was never seen alive (the id may be someone else's there); or not known (no answer in time, no side
 * connection, refused otherwise).
 */
export type KillOutcome = 'killed' | 'no-such-thread' | 'elsewhere' | 'unknown';

/** `promise`, or TIMED_OUT after `ms`; the timer never keeps the process up. */
function within<T>(promise: Promise<T>, ms: number): Promise<T | typeof TIMED_OUT> {
  let timer: NodeJS.Timeout | undefined;
  const timeout = new Promise<typeof TIMED_OUT>((resolve) => {
    timer = setTimeout(resolve, ms, TIMED_OUT);
    timer.unref();
  });
  return Promise.race([promise, timeout]).finally(() => clearTimeout(timer));
}

/** @internal */
export class Killer {
  readonly #config: object;
  readonly #runs = new RunLog();
  #side: SideConnection | undefined;
  #ended = false;

  /** `config`: the mysql2 `ConnectionConfig` of the pool's (or the connection's) connections. */
  constructor(config: object) {
    this.#config = config;
  }

  /** Opens the side connection unless it is open (or ended). */
  prepare(): void {
    this.#open();
  }

  /** Opens the side connection unless it is open; resolves with the server's version string, if it opened. */
  async serverVersion(): Promise<string | undefined> {
    const side = this.#open();
    if (side === undefined) return undefined;
    try {
      const opened = await side.ready;
      if (opened.serverVersion !== undefined) return opened.serverVersion;
      const [rows] = await opened.connection.query<RowDataPacket[]>('SELECT VERSION() AS version');
      const version = rows[0]?.version;
      return typeof version === 'string' ? version : undefined;
    } catch {
      return undefined;
    }
  }

  /**
   * Sends `KILL QUERY <threadId>`, the thread of the connection `seen` alive, if the side connection it goes out
   * on reached that connection's server run; resolves with what became of it. Never rejects.
   */
  async kill(threadId: number, seen: Sighting | undefined): Promise<KillOutcome> {
    if (!Number.isSafeInteger(threadId) || threadId <= 0) return 'unknown';
    // Two tries: the side connection may have been closed by the server (wait_timeout) without our knowing yet.
    for (let attempt = 0; attempt < 2; attempt++) {
      const side = this.#open();
      if (side === undefined) return 'unknown';
      try {
        // Checked against the very connection the KILL would go out on: a new one may reach another run.
        const outcome = await within(
          side.ready.then((opened): Promise<unknown> | typeof ELSEWHERE =>
            opened.aim.reaches(seen) ? opened.connection.query(`KILL QUERY ${threadId}`) : ELSEWHERE,
          ),
          KILL_TIMEOUT_MS,
        );
        if (outcome === ELSEWHERE) return 'elsewhere';
        if (outcome !== TIMED_OUT) return 'killed';
        this.#discard(side); // stuck: whatever it is waiting for, the next KILL must not wait behind it
        return 'unknown';
      } catch (error) {
        const errno = errnoOf(error);
        if (errno === ER_NO_SUCH_THREAD) return 'no-such-thread';
        // The server refused this KILL (not our thread, say): the side connection itself is fine.
        if (errno !== undefined && errno > 0 && !isFatal(error)) return 'unknown';
        // A failed connect, or a connection that died: worth one more try on a new one.
        this.#discard(side);
      }
    }
    return 'unknown';
  }

  /** Closes the side connection: KILLs already queued on it complete first; later ones resolve `'unknown'`. */
  async end(): Promise<void> {
    this.#ended = true;
    const side = this.#side;
    this.#side = undefined;
    if (side === undefined) return;
    // Still connecting, or learning its run: no KILL was sent on it, nothing to wait for.
    if (!side.connected) {
      side.destroy();
      return;
    }
    try {
      const { connection } = await side.ready;
      // A graceful close lets KILLs already queued on it complete.
      if ((await within(connection.end(), KILL_TIMEOUT_MS)) === TIMED_OUT) side.destroy();
    } catch {
      side.destroy(); // already gone
    }
  }

  #open(): SideConnection | undefined {
    if (this.#ended) return undefined;
    if (this.#side === undefined) {
      const side = openSideConnection(this.#config, this.#runs, () => {
        if (this.#side === side) this.#side = undefined;
      });
      this.#side = side;
      // A failed connect is reported to whoever awaits it; the next use opens a new one.
      side.ready.catch(() => {
        if (this.#side === side) this.#side = undefined;
      });
    }
    return this.#side;
  }

  #discard(side: SideConnection): void {
    if (this.#side === side) this.#side = undefined;
    side.destroy();
  }
}
