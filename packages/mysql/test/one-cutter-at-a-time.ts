/**
 * Keeps the test files that cut statements on the shared MariaDB from running side by side. Seen here and in CI:
 * while two such files send KILLs at once, the server stops answering every client for 2–5 s (a bare mysql2
 * connection that no test touches included), KILLs wait on it (`KILL QUERY … starting` beside its target,
 * `Killed` but still executing), and the figures these files measure — a statement gone from the server within a
 * bound, a pool healthy after a thousand cuts — measure the stall instead. Each such file holds a server-side named lock from its first
 * test to its last; other files (and other packages' tests) still run beside it.
 */
import { type Connection, createConnection, type RowDataPacket } from 'mysql2/promise';
import { afterAll, beforeAll } from 'vitest';
import { serverOptions } from './support.ts';

const LOCK = 'deadline-tests:statement-cuts';
/** Long enough for every other such file to finish before this one (each takes 5–30 s here; all of them ~3–4 min). */
const WAIT_SECONDS = 600;

/** Registers hooks that hold the lock for the whole of the calling test file. */
export function oneCuttingFileAtATime(): void {
  let holder: Connection | undefined;
  beforeAll(
    async () => {
      holder = await createConnection(serverOptions());
      const [rows] = await holder.query<RowDataPacket[]>('SELECT GET_LOCK(?, ?) AS got', [LOCK, WAIT_SECONDS]);
      if (rows[0]?.got !== 1) throw new Error(`${LOCK}: not granted within ${WAIT_SECONDS} s`);
    },
    (WAIT_SECONDS + 10) * 1000,
  );
  afterAll(async () => {
    // Ending the connection releases the lock too; asked first so the next file starts at once.
    await holder?.query('SELECT RELEASE_LOCK(?)', [LOCK]).catch(() => {});
    await holder?.end().catch(() => {});
  });
}
