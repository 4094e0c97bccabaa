/**
 * Keeps the tests that cut statements on the shared MariaDB from running side by side. Seen here and in CI:
 * while two test files send KILLs at once, the server stops answering every client for 2–5 s (a bare mysql2
 * connection that no test touches included), KILLs wait on it (`KILL QUERY … starting` beside its target,
 * `Killed` but still executing), and the figures these tests measure — a statement gone from the server within a
 * bound, a pool healthy after a thousand cuts — measure the stall instead. Each such test holds a server-side
 * named lock from its start to its end. It is taken per test, not per file, so that files that cut interleave at
 * their tests' edges instead of one file waiting out another's whole length with a worker held idle.
 */
import { type Connection, createConnection, type RowDataPacket } from 'mysql2/promise';
import { afterAll, afterEach, beforeEach } from 'vitest';
import { serverOptions } from './support.ts';

const LOCK = 'deadline-tests:statement-cuts';
/** Long enough for every other cutting test running at once to finish first (the longest takes ~15 s here). */
const WAIT_SECONDS = 300;

/** Registers hooks that hold the lock for each test of the calling file (or `describe`). */
export function oneCutterAtATime(): void {
  let holder: Connection | undefined;
  beforeEach(
    async () => {
      holder ??= await createConnection(serverOptions());
      const [rows] = await holder.query<RowDataPacket[]>('SELECT GET_LOCK(?, ?) AS got', [LOCK, WAIT_SECONDS]);
      if (rows[0]?.got !== 1) throw new Error(`${LOCK}: not granted within ${WAIT_SECONDS} s`);
    },
    (WAIT_SECONDS + 10) * 1000,
  );
  afterEach(async () => {
    await holder?.query('SELECT RELEASE_LOCK(?)', [LOCK]).catch(() => {});
  });
  afterAll(async () => {
    // Ending the connection releases the lock too, should a test's release not have run.
    await holder?.end().catch(() => {});
  });
}
