/** Sequelize (`dialect: 'mysql'`, the app's mysql2 module as `dialectModule`), mysql2 instrumented: the ORM checks. */
import mysql from 'mysql2';
import { QueryTypes, Sequelize } from 'sequelize';
import { describe } from 'vitest';
import { MARIADB, requireService } from '../../../../test/support/services.ts';
import { serverParts } from '../support.ts';
import { KEEP_IDLE_MS, ormChecks, POOL_MAX, TABLE } from './harness.ts';

const ok = await requireService(MARIADB);

describe.runIf(ok)('Sequelize with instrumentMysql, on MariaDB', () => {
  ormChecks('Sequelize', async () => {
    const { host, port, user, password, database } = serverParts();
    const sequelize = new Sequelize(database, user, password, {
      host,
      port,
      dialect: 'mysql',
      dialectModule: mysql,
      logging: false,
      pool: { min: 0, max: POOL_MAX, idle: KEEP_IDLE_MS },
    });
    return {
      sleep: (seconds, mark) =>
        sequelize.query(`SELECT SLEEP(:seconds) /* ${mark} */`, { replacements: { seconds }, type: QueryTypes.SELECT }),
      insertThenSleep: (tag, seconds) =>
        sequelize.transaction(async (transaction) => {
          await sequelize.query(`INSERT INTO ${TABLE} VALUES (:tag)`, { replacements: { tag }, transaction });
          await sequelize.query('SELECT SLEEP(:seconds)', { replacements: { seconds }, transaction });
        }),
      connectionId: async () => {
        const rows = await sequelize.query<{ id: number }>('SELECT CONNECTION_ID() AS id', { type: QueryTypes.SELECT });
        return Number(rows[0]?.id);
      },
      close: () => sequelize.close(),
    };
  });
});
