/** Kysely over a pg.Pool it was given, with node-postgres instrumented: the checks of harness.ts. */
import { Kysely, PostgresDialect, sql } from 'kysely';
import pg from 'pg';
import { describe } from 'vitest';
import { POSTGRES, requireService } from '../../../../test/support/services.ts';
import { ormChecks, POOL_MAX, TABLE } from './harness.ts';

const available = await requireService(POSTGRES);

describe.runIf(available)('Kysely (PostgresDialect) with instrumentPg', () => {
  ormChecks('Kysely', async () => {
    // biome-ignore lint/suspicious/noExplicitAny: raw statements only, no schema
    const db = new Kysely<any>({
      dialect: new PostgresDialect({ pool: new pg.Pool({ connectionString: POSTGRES.url, max: POOL_MAX }) }),
    });
    return {
      sleep: (seconds, mark) => sql`SELECT pg_sleep(${seconds}) /* ${sql.raw(mark)} */`.execute(db),
      insertThenSleep: (tag, seconds) =>
        db.transaction().execute(async (trx) => {
          await trx.insertInto(TABLE).values({ tag }).execute();
          await sql`SELECT pg_sleep(${seconds})`.execute(trx);
        }),
      connectionId: async () => {
        const { rows } = await sql<{ pid: number }>`SELECT pg_backend_pid() AS pid`.execute(db);
        return (rows[0] as { pid: number }).pid;
      },
      close: () => db.destroy(),
    };
  });
});
