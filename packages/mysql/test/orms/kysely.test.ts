/** Kysely (MysqlDialect over a mysql2 pool), with mysql2 instrumented: the ORM checks, on MariaDB. */
import { Kysely, MysqlDialect, type MysqlPool, sql } from 'kysely';
import mysql from 'mysql2';
import { describe } from 'vitest';
import { MARIADB, requireService } from '../../../../test/support/services.ts';
import { serverOptions } from '../support.ts';
import { ormChecks, POOL_MAX, TABLE } from './harness.ts';

const ok = await requireService(MARIADB);

describe.runIf(ok)('Kysely (MysqlDialect) with instrumentMysql, on MariaDB', () => {
  ormChecks('Kysely', async () => {
    // biome-ignore lint/suspicious/noExplicitAny: raw statements only, no schema
    const db = new Kysely<any>({
      // mysql2's declarations and Kysely's MysqlPool differ in their overloads, not in what runs.
      dialect: new MysqlDialect({
        pool: mysql.createPool(serverOptions({ connectionLimit: POOL_MAX })) as unknown as MysqlPool,
      }),
    });
    return {
      sleep: (seconds, mark) => sql`SELECT SLEEP(${seconds}) /* ${sql.raw(mark)} */`.execute(db),
      insertThenSleep: (tag, seconds) =>
        db.transaction().execute(async (trx) => {
          await trx.insertInto(TABLE).values({ tag }).execute();
          await sql`SELECT SLEEP(${seconds})`.execute(trx);
        }),
      connectionId: async () => {
        const { rows } = await sql<{ id: number }>`SELECT CONNECTION_ID() AS id`.execute(db);
        return Number(rows[0]?.id);
      },
      close: () => db.destroy(),
    };
  });
});
