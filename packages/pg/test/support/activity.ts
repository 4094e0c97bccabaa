/**
 * What the server is running, read from pg_stat_activity on a connection of the test's own (never through the
 * code under test): whether a statement, found by a marker comment in its text, runs, and when it is gone.
 */
import pg from 'pg';
import { POSTGRES } from '../../../../test/support/services.ts';

let markerNumber = 0;

/** A comment unique to one statement in this process, to find it on the server. */
export function marker(): string {
  return `deadline_marker_${process.pid}_${++markerNumber}`;
}

export class ServerActivity {
  readonly monitor: pg.Client;

  private constructor(monitor: pg.Client) {
    this.monitor = monitor;
  }

  static async open(): Promise<ServerActivity> {
    const monitor = new pg.Client({ connectionString: POSTGRES.url });
    await monitor.connect();
    return new ServerActivity(monitor);
  }

  /** Whether the statement (found by a marker comment in its text) still runs on the server. */
  async running(marker: string): Promise<boolean> {
    const { rows } = await this.monitor.query(
      "SELECT count(*)::int AS n FROM pg_stat_activity WHERE state = 'active' AND query LIKE $1 AND pid <> pg_backend_pid()",
      [`%${marker}%`],
    );
    return (rows[0] as { n: number }).n > 0;
  }

  /**
   * Watches pg_stat_activity (query after query, no sleeping) until the statement is gone; resolves when
   * (performance.now()). That is when the server says: the backend's `state_change` as it went idle, when the
   * backend still shows the statement as its last one, on this process's clock (read beside the server's in one
   * round trip). Else, or if that were later, when the watch saw it gone, a query's round trip or two after.
   */
  async goneAt(marker: string, limitMs = 10_000): Promise<number> {
    const until = performance.now() + limitMs;
    while (performance.now() < until) {
      if (await this.running(marker)) continue;
      const seen = performance.now();
      const asked = performance.now();
      const { rows } = await this.monitor.query(
        `SELECT extract(epoch FROM clock_timestamp()) * 1000 AS now,
                (SELECT extract(epoch FROM state_change) * 1000 FROM pg_stat_activity
                  WHERE state <> 'active' AND query LIKE $1 AND pid <> pg_backend_pid() LIMIT 1) AS ended`,
        [`%${marker}%`],
      );
      const answered = performance.now();
      const row = rows[0] as { now: number | string; ended: number | string | null };
      if (row.ended === null) return seen;
      // The server's wall clock at the middle of the round trip: off by half of it at most.
      const ended = Number(row.ended) - Number(row.now) + (asked + answered) / 2;
      return Math.min(ended, seen);
    }
    throw new Error(`${marker} still running after ${limitMs} ms`);
  }

  /** Waits until the statement is running (so a cut-off is tested on a statement the server really runs). */
  async startedRunning(marker: string): Promise<void> {
    const until = performance.now() + 10_000;
    while (performance.now() < until) if (await this.running(marker)) return;
    throw new Error(`${marker} never started`);
  }

  end(): Promise<void> {
    return this.monitor.end();
  }
}
