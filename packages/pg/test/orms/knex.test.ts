/** Knex (`client: 'pg'`), which opens its own node-postgres clients, with pg instrumented: the checks of harness.ts. */
import knex from 'knex';
import { describe } from 'vitest';
import { POSTGRES, requireService } from '../../../../test/support/services.ts';
import { ormChecks, POOL_MAX, TABLE } from './harness.ts';

const available = await requireService(POSTGRES);

describe.runIf(available)('Knex with instrumentPg', () => {
  ormChecks('Knex', async () => {
    const db = knex({ client: 'pg', connection: POSTGRES.url, pool: { min: 0, max: POOL_MAX } });
    return {
      sleep: (seconds, mark) => db.raw(`SELECT pg_sleep(?) /* ${mark} */`, [seconds]),
      insertThenSleep: (tag, seconds) =>
        db.transaction(async (trx) => {
          await trx(TABLE).insert({ tag });
          await trx.raw('SELECT pg_sleep(?)', [seconds]);
        }),
      connectionId: async () => {
        const { rows } = await db.raw('SELECT pg_backend_pid() AS pid');
        return rows[0].pid as number;
      },
      close: () => db.destroy(),
    };
  });
});
