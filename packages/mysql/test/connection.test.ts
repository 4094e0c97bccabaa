/**
 * A single connection wrapped on its own: the same bounds, and the statement after a KILL waits for it, so the
 * KILL can never land on it.
 */
import { DeadlineExceededError, runWithDeadline } from '@deadline/core';
import { createConnection, type RowDataPacket } from 'mysql2/promise';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { MARIADB, requireService } from '../../../test/support/services.ts';
import { type DeadlineConnection, withDeadline } from '../src/index.ts';
import { marker, serverOptions, Watcher } from './support.ts';

const ok = await requireService(MARIADB);
/** This process's own table: another run of the suite beside this one (other sessions test too) has its own. */
const TABLE = `deadline_single_rows_${process.pid}`;

describe.runIf(ok)('a single connection (MariaDB)', () => {
  let watcher: Watcher;
  let db: DeadlineConnection;

  beforeAll(async () => {
    watcher = await Watcher.open();
    await watcher.query(`CREATE TABLE IF NOT EXISTS ${TABLE} (id INT PRIMARY KEY) ENGINE=InnoDB`);
    await watcher.query(`DELETE FROM ${TABLE}`);
    db = withDeadline(await createConnection(serverOptions()), { name: 'single-db' });
  });

  afterAll(async () => {
    await db?.end();
    await watcher?.query(`DROP TABLE IF EXISTS ${TABLE}`);
    await watcher?.end();
  });

  it('stops a statement at the deadline; the statement issued right after runs once the KILL is done', async () => {
    const mark = marker();
    const killed = runWithDeadline(100, () => db.execute(`SELECT SLEEP(?) /* ${mark} */`, [5]));
    const next = db.query<RowDataPacket[]>('SELECT @@max_statement_time AS limit_s, CONNECTION_ID() AS id');
    const error = await killed.catch((caught: unknown) => caught);
    expect(error).toBeInstanceOf(DeadlineExceededError);
    expect(error).toMatchObject({ target: 'single-db' });
    const [[row]] = await next;
    expect(Number(row?.limit_s)).toBe(0);
    expect(row?.id).toBe(db.connection.threadId);
    await watcher.waitGone(mark);
  });

  it('a transaction on it: cut off and rolled back, then committed', async () => {
    const mark = marker();
    await expect(
      runWithDeadline(150, () =>
        db.transaction(async (tx) => {
          await tx.query(`INSERT INTO ${TABLE} (id) VALUES (1)`);
          await tx.query(`SELECT SLEEP(5) /* ${mark} */`);
        }),
      ),
    ).rejects.toBeInstanceOf(DeadlineExceededError);
    await watcher.waitGone(mark);
    await runWithDeadline(1_000, () =>
      db.transaction(async (tx) => {
        await tx.query(`INSERT INTO ${TABLE} (id) VALUES (2)`);
      }),
    );
    const [rows] = await db.query<RowDataPacket[]>(`SELECT id, @@in_transaction AS open FROM ${TABLE}`);
    expect(rows.map((row) => [row.id, row.open])).toEqual([[2, 0]]);
  });

  it('the server drops a KILL QUERY that finds the thread idle: the next statement is not hit', async () => {
    // What the gate relies on for a connection it cannot replace: once our KILL has completed, a late one has
    // landed on an idle thread, and is gone.
    await watcher.query(`KILL QUERY ${db.connection.threadId}`);
    const [[row]] = await runWithDeadline(1_000, () => db.query<RowDataPacket[]>('SELECT SLEEP(0.05) AS slept'));
    expect(row?.slept).toBe(0);
  });

  it('outside a context: mysql2 results as they are', async () => {
    const [rows] = await db.execute<RowDataPacket[]>('SELECT ? AS a, ? AS b', [1, 'two']);
    expect(rows).toEqual([{ a: 1, b: 'two' }]);
  });
});
