/** Drizzle over a mysql2 pool it was given, with mysql2 instrumented: the ORM checks, on MariaDB. */
import { sql } from 'drizzle-orm';
import { drizzle } from 'drizzle-orm/mysql2';
import mysql from 'mysql2/promise';
import { describe } from 'vitest';
import { MARIADB, requireService } from '../../../../test/support/services.ts';
import { serverOptions } from '../support.ts';
import { ormChecks, POOL_MAX, TABLE } from './harness.ts';

const ok = await requireService(MARIADB);

describe.runIf(ok)('Drizzle (mysql2) with instrumentMysql, on MariaDB', () => {
  ormChecks('Drizzle', async () => {
    const pool = mysql.createPool(serverOptions({ connectionLimit: POOL_MAX }));
    const db = drizzle({ client: pool });
    return {
      sleep: (seconds, mark) => db.execute(sql`SELECT SLEEP(${seconds}) /* ${sql.raw(mark)} */`),
      insertThenSleep: (tag, seconds) =>
        db.transaction(async (tx) => {
          await tx.execute(sql`INSERT INTO ${sql.identifier(TABLE)} VALUES (${tag})`);
          await tx.execute(sql`SELECT SLEEP(${seconds})`);
        }),
      connectionId: async () => {
        const [rows] = (await db.execute(sql`SELECT CONNECTION_ID() AS id`)) as unknown as [{ id: number }[]];
        return Number(rows[0]?.id);
      },
      close: () => pool.end(),
    };
  });
});
