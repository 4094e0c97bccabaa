/** TypeORM (`type: 'postgres'`, the app's pg module given as `driver`), with pg instrumented: harness.ts's checks. */
import pg from 'pg';
import { DataSource } from 'typeorm';
import { describe } from 'vitest';
import { POSTGRES, requireService } from '../../../../test/support/services.ts';
import { ormChecks, POOL_MAX, TABLE } from './harness.ts';

const available = await requireService(POSTGRES);

describe.runIf(available)('TypeORM with instrumentPg', () => {
  ormChecks('TypeORM', async () => {
    const source = new DataSource({ type: 'postgres', url: POSTGRES.url, driver: pg, poolSize: POOL_MAX });
    await source.initialize();
    return {
      sleep: (seconds, mark) => source.query(`SELECT pg_sleep($1) /* ${mark} */`, [seconds]),
      insertThenSleep: (tag, seconds) =>
        source.transaction(async (manager) => {
          await manager.query(`INSERT INTO ${TABLE} VALUES ($1)`, [tag]);
          await manager.query('SELECT pg_sleep($1)', [seconds]);
        }),
      connectionId: async () => {
        const rows: { pid: number }[] = await source.query('SELECT pg_backend_pid() AS pid');
        return (rows[0] as { pid: number }).pid;
      },
      close: () => source.destroy(),
    };
  });
});
