/** Sequelize (the app's pg module given as `dialectModule`), with pg instrumented: the checks of harness.ts. */
import pg from 'pg';
import { QueryTypes, Sequelize } from 'sequelize';
import { describe } from 'vitest';
import { POSTGRES, requireService } from '../../../../test/support/services.ts';
import { KEEP_IDLE_MS, ormChecks, POOL_MAX, TABLE } from './harness.ts';

const available = await requireService(POSTGRES);

describe.runIf(available)('Sequelize with instrumentPg', () => {
  ormChecks('Sequelize', async () => {
    const sequelize = new Sequelize(POSTGRES.url, {
      dialect: 'postgres',
      dialectModule: pg,
      logging: false,
      pool: { min: 0, max: POOL_MAX, idle: KEEP_IDLE_MS },
    });
    return {
      sleep: (seconds, mark) =>
        sequelize.query(`SELECT pg_sleep(:seconds) /* ${mark} */`, {
          replacements: { seconds },
          type: QueryTypes.SELECT,
        }),
      insertThenSleep: (tag, seconds) =>
        sequelize.transaction(async (transaction) => {
          await sequelize.query(`INSERT INTO ${TABLE} VALUES (:tag)`, { replacements: { tag }, transaction });
          await sequelize.query('SELECT pg_sleep(:seconds)', { replacements: { seconds }, transaction });
        }),
      connectionId: async () => {
        const rows = await sequelize.query<{ pid: number }>('SELECT pg_backend_pid() AS pid', {
          type: QueryTypes.SELECT,
        });
        return (rows[0] as { pid: number }).pid;
      },
      close: () => sequelize.close(),
    };
  });
});
