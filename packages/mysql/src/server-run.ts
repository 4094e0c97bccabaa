/**
 * Which run of which server a side connection reached, and so which threads its KILLs may name. A KILL names a
 * thread by its id, and an id is unique only within one run of one server: ids start again from the bottom when
 * the server restarts, and a failover reaches another server, with ids of its own. A connection whose server went
 * away without this process hearing (cut on the way, its close lost) still looks alive, and its id may by now be
 * someone else's connection on the run the side connection reached.
 *
 * So a KILL goes out only for a connection seen alive (sightings.ts) on the side connection's run: at the same
 * peer, after that run had started. A connection seen alive only earlier belongs to an earlier run, or maybe
 * does (the run's first seconds, where the clock below is too coarse to tell): no KILL is sent, which is always
 * safe. The statement still carries the server's own limit, which stops it if it is alive.
 *
 * Read once per side connection, on opening it (a connection cannot outlive its server's run):
 * - `SHOW GLOBAL STATUS LIKE 'Uptime'`, whole seconds since the run started, read at a known instant of this
 *   process's monotonic clock: when the run started, on that clock, to within a second either way;
 * - `@@hostname`, `@@port`, `@@server_id`: which server. When a side connection reaches another server than
 *   the one before it did, at the same peer (a failover behind an address that moved), a connection seen alive
 *   before the first side connection to reach the new server began to connect may be on the old server, whatever
 *   the new one's uptime — for that side connection and every later one there (a spare opened while a KILL was
 *   held up). This tells only once a side connection has learnt the server before: the first server a killer
 *   reaches is taken to be the one its pool's connections are on (the peer is still compared).
 */
import type { SideStatements } from './side-connection.js';
import type { Sighting } from './sightings.js';

/** A row as both drivers return it by default: columns by name. */
type Row = Record<string, unknown>;

/** Uptime counts whole seconds: the run may have started up to this much later than it says. */
const UPTIME_GRANULARITY_MS = 1_000;

/** @internal What the side connection learnt of the run it reached. */
export interface ServerRun {
  /** `@@hostname:@@port:@@server_id`: tells servers apart, not runs of one server. */
  readonly server: string;
  /** Ms on `performance.now()`'s clock by which the run had surely started. */
  readonly startedBy: number;
}

/** @internal Reads the run `connection` (the side connection) reached: two statements, once. */
export async function readServerRun(connection: SideStatements): Promise<ServerRun> {
  const rowsOf = async (sql: string) => (await connection.query(sql))[0] as Row[];
  const [[identity], uptime] = await Promise.all([
    rowsOf('SELECT @@hostname AS hostname, @@port AS port, @@server_id AS serverId'),
    // The server read its clock before the answer came: the run started at most `uptime` + 1 s before that.
    rowsOf("SHOW GLOBAL STATUS LIKE 'Uptime'").then((rows) => ({
      seconds: Number(rows[0]?.Value),
      answeredAt: performance.now(),
    })),
  ]);
  if (identity === undefined || !Number.isFinite(uptime.seconds)) throw new Error('the server did not tell its run');
  return {
    server: `${identity.hostname}:${identity.port}:${identity.serverId}`,
    startedBy: uptime.answeredAt - uptime.seconds * 1_000 + UPTIME_GRANULARITY_MS,
  };
}

/** @internal The threads one side connection's KILLs may name: those of connections seen alive on its run. */
export class Aim {
  readonly #peer: string;
  /** Seen alive after this instant: on the run. Never for an aim that knows no run. */
  readonly #since: number;

  constructor(peer: string, since: number) {
    this.#peer = peer;
    this.#since = since;
  }

  /** Reaches nothing: the side connection could not learn its run. */
  static readonly NOWHERE = new Aim('', Number.POSITIVE_INFINITY);

  /** Whether a KILL on this side connection for the thread of the connection `seen` reaches that connection. */
  reaches(seen: Sighting | undefined): boolean {
    return seen !== undefined && seen.peer === this.#peer && seen.at > this.#since;
  }
}

/** @internal The servers one killer's side connections reached, one after another. */
export class RunLog {
  #server: string | undefined;

  /**
   * Connections seen alive before this are not taken to be on the server last reached: when it was reached after
   * another (a failover), when the first side connection to reach it began to connect; else never.
   */
  #movedAt = Number.NEGATIVE_INFINITY;

  /**
   * The aim of a side connection that began to connect at `openingAt` and reached `run` at `peer`. A server
   * other than the last one's: only connections seen alive since this side connection began to connect are
   * taken to be on it — and on every later side connection that reaches that server too (a spare opened while a
   * KILL was held up): a connection seen alive before, on the server before it, is no more on it then.
   */
  arrive(run: ServerRun, peer: string, openingAt: number): Aim {
    if (this.#server !== run.server) {
      if (this.#server !== undefined) this.#movedAt = openingAt;
      this.#server = run.server;
    }
    return new Aim(peer, Math.max(run.startedBy, this.#movedAt));
  }
}
