/**
 * Whether the database server itself answers: a tiny statement, back to back, on a connection of the test's own that
 * no fault touches. When the probe waits seconds too (seen on this 2-core machine: MariaDB's `SELECT SLEEP(0.01)` took
 * 2–5 s for a bare mysql2 connection while other test files sent KILLs; PostgreSQL took half a second to act on a
 * cancel while the suite of another Node version ran beside), a bound that stalled with it says nothing about the
 * package under test, and the test says so instead of failing.
 */

/** A connection of the test's own: how to send the probe's statement on it, and how to close it. */
export interface ProbeConnection {
  probe(): Promise<unknown>;
  close(): Promise<unknown>;
}

export class ServerProbe {
  readonly #connection: ProbeConnection;
  /** Each probe's start and end (performance.now()); the last one's end is undefined while it runs. */
  readonly #probes: { startedAt: number; endedAt: number | undefined }[] = [];
  #running: Promise<void> | undefined;
  #stopped = false;

  private constructor(connection: ProbeConnection) {
    this.#connection = connection;
  }

  /** Starts probing the server on `connection`, a connection of the probe's own. */
  static start(connection: ProbeConnection): ServerProbe {
    const probe = new ServerProbe(connection);
    probe.#running = probe.#loop();
    return probe;
  }

  /** The longest wait for an answer among the probes that ran at any time between `from` and `to`. */
  longestBetween(from: number, to: number): number {
    let longest = 0;
    const now = performance.now();
    for (const { startedAt, endedAt } of this.#probes) {
      const end = endedAt ?? now;
      if (end >= from && startedAt <= to) longest = Math.max(longest, end - startedAt);
    }
    return longest;
  }

  async stop(): Promise<void> {
    this.#stopped = true;
    await this.#running;
    await this.#connection.close().catch(() => {});
  }

  /**
   * Never rejects: a probe whose connection failed stops probing (its last wait closed where it failed, so no
   * stall grows from it: the tests' bounds stay as they are).
   */
  async #loop(): Promise<void> {
    while (!this.#stopped) {
      const probe = { startedAt: performance.now(), endedAt: undefined as number | undefined };
      this.#probes.push(probe);
      try {
        await this.#connection.probe();
      } catch {
        probe.endedAt = performance.now();
        return;
      }
      probe.endedAt = performance.now();
    }
  }
}
