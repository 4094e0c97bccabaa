/** TypeORM (`type: 'mariadb'`, the app's mysql2 module given as `driver`), mysql2 instrumented: the ORM checks. */
import mysql from 'mysql2';
import { DataSource } from 'typeorm';
import { describe } from 'vitest';
import { MARIADB, requireService } from '../../../../test/support/services.ts';
import { serverParts } from '../support.ts';
import { ormChecks, POOL_MAX, TABLE } from './harness.ts';

const ok = await requireService(MARIADB);

describe.runIf(ok)('TypeORM with instrumentMysql, on MariaDB', () => {
  ormChecks('TypeORM', async () => {
    const { host, port, user, password, database } = serverParts();
    const source = new DataSource({
      type: 'mariadb',
      host,
      port,
      username: user,
      password,
      database,
      driver: mysql,
      poolSize: POOL_MAX,
    });
    await source.initialize();
    return {
      sleep: (seconds, mark) => source.query(`SELECT SLEEP(?) /* ${mark} */`, [seconds]),
      insertThenSleep: (tag, seconds) =>
        source.transaction(async (manager) => {
          await manager.query(`INSERT INTO ${TABLE} VALUES (?)`, [tag]);
          await manager.query('SELECT SLEEP(?)', [seconds]);
        }),
      connectionId: async () => {
        const rows: { id: number }[] = await source.query('SELECT CONNECTION_ID() AS id');
        return Number(rows[0]?.id);
      },
      close: () => source.destroy(),
    };
  });
});
