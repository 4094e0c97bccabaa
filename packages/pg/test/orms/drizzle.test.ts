/** Drizzle over a pg.Pool it was given, with pg instrumented: the checks of harness.ts. */
import { sql } from 'drizzle-orm';
import { drizzle } from 'drizzle-orm/node-postgres';
import pg from 'pg';
import { describe } from 'vitest';
import { POSTGRES, requireService } from '../../../../test/support/services.ts';
import { ormChecks, POOL_MAX, TABLE } from './harness.ts';

const available = await requireService(POSTGRES);

describe.runIf(available)('Drizzle (node-postgres) with instrumentPg', () => {
  ormChecks('Drizzle', async () => {
    const pool = new pg.Pool({ connectionString: POSTGRES.url, max: POOL_MAX });
    const db = drizzle(pool);
    return {
      sleep: (seconds, mark) => db.execute(sql`SELECT pg_sleep(${seconds}) /* ${sql.raw(mark)} */`),
      insertThenSleep: (tag, seconds) =>
        db.transaction(async (tx) => {
          await tx.execute(sql`INSERT INTO ${sql.identifier(TABLE)} VALUES (${tag})`);
          await tx.execute(sql`SELECT pg_sleep(${seconds})`);
        }),
      connectionId: async () => {
        const { rows } = await db.execute<{ pid: number }>(sql`SELECT pg_backend_pid() AS pid`);
        return (rows[0] as { pid: number }).pid;
      },
      close: () => pool.end(),
    };
  });
});
