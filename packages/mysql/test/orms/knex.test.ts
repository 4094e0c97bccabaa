/** Knex (`client: 'mysql2'`), which opens its own mysql2 connections, with mysql2 instrumented: the ORM checks. */
import knex from 'knex';
import { describe } from 'vitest';
import { MARIADB, requireService } from '../../../../test/support/services.ts';
import { serverParts } from '../support.ts';
import { ormChecks, POOL_MAX, TABLE } from './harness.ts';

const ok = await requireService(MARIADB);

describe.runIf(ok)('Knex (mysql2) with instrumentMysql, on MariaDB', () => {
  ormChecks('Knex', async () => {
    const db = knex({ client: 'mysql2', connection: serverParts(), pool: { min: 0, max: POOL_MAX } });
    return {
      sleep: (seconds, mark) => db.raw(`SELECT SLEEP(?) /* ${mark} */`, [seconds]),
      insertThenSleep: (tag, seconds) =>
        db.transaction(async (trx) => {
          await trx(TABLE).insert({ tag });
          await trx.raw('SELECT SLEEP(?)', [seconds]);
        }),
      connectionId: async () => {
        const [rows] = await db.raw('SELECT CONNECTION_ID() AS id');
        return Number(rows[0].id);
      },
      close: () => db.destroy(),
    };
  });
});
