/**
 * The side connection (where KILL QUERY goes) lives as long as its pool, long after the request that first needed
 * it: its socket must run its events outside that request's context, or every reply on it would run in that
 * request's context and keep it alive. Checked on whichever AsyncLocalStorage implementation runs the suite (CI
 * runs it on each: packages/core/test/async-context.test.ts).
 */
import { currentContext, runWithDeadline } from '@deadline/core';
import { createPool } from 'mysql2/promise';
import { describe, expect, it } from 'vitest';
import { MARIADB, requireService } from '../../../test/support/services.ts';
import { RunLog } from '../src/server-run.ts';
import { openSideConnection } from '../src/side-connection.ts';
import { connectionConfigOf, serverOptions, Watcher } from './support.ts';

const available = await requireService(MARIADB);

describe.runIf(available)('the side connection, opened inside a request', () => {
  it('runs its events outside any context: here its end, when the server kills it', async () => {
    const pool = createPool(serverOptions());
    const watcher = await Watcher.open();
    try {
      let gone: (seen: unknown) => void = () => {};
      const goneIn = new Promise((resolve) => (gone = resolve));
      const side = await runWithDeadline(5_000, async () => {
        // Called from the socket's own 'end' or 'error' event: it sees the context the socket was made in.
        const opened = openSideConnection(connectionConfigOf(pool), new RunLog(), () => gone(currentContext()));
        await opened.ready;
        return opened;
      });
      const { connection } = await side.ready;
      await watcher.query(`KILL CONNECTION ${connection.threadId}`);
      expect(await goneIn).toBeUndefined();
    } finally {
      await watcher.end();
      await pool.end();
    }
  });
});
