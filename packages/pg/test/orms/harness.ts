/**
 * The ORM checks (test/support/orm-checks.ts) on PostgreSQL: node-postgres instrumented with `instrumentPg(pg)`,
 * the server watched in pg_stat_activity from a connection of the test's own.
 */
import pg from 'pg';
import { ormChecks as checks, type Orm, type Server, TABLE } from '../../../../test/support/orm-checks.ts';
import { ServerProbe } from '../../../../test/support/server-probe.ts';
import { POSTGRES } from '../../../../test/support/services.ts';
import { instrumentPg } from '../../src/index.ts';
import { ServerActivity } from '../support/activity.ts';

export { KEEP_IDLE_MS, POOL_MAX, TABLE } from '../../../../test/support/orm-checks.ts';

/** The pg module the ORM runs on: this project's, or the copy an ORM pins (MikroORM). */
type PgModule = Parameters<typeof instrumentPg>[0];

async function postgres(driver: PgModule): Promise<Server> {
  const activity = await ServerActivity.open();
  // Whether the server itself answers meanwhile (a cancel it acts on late under load is not the package's).
  const probeClient = new pg.Client({ connectionString: POSTGRES.url });
  await probeClient.connect();
  const probe = ServerProbe.start({
    probe: () => probeClient.query('SELECT pg_sleep(0.005)'),
    close: () => probeClient.end(),
  });
  const count = async (sql: string, values: unknown[]) =>
    ((await activity.monitor.query(sql, values)).rows[0] as { n: number }).n;
  return {
    instrument: () => instrumentPg(driver, { name: 'orders-db' }),
    prepare: async () => {
      await activity.monitor.query(`CREATE TABLE IF NOT EXISTS ${TABLE} (tag text)`);
    },
    dropTable: async () => {
      await activity.monitor.query(`DROP TABLE IF EXISTS ${TABLE}`);
    },
    startedRunning: (mark) => activity.startedRunning(mark),
    goneAt: (mark) => activity.goneAt(mark),
    stalledBetween: (from, to) => probe.longestBetween(from, to),
    busyWith: (prefix) =>
      count(
        "SELECT count(*)::int AS n FROM pg_stat_activity WHERE state <> 'idle' AND query LIKE $1 AND pid <> pg_backend_pid()",
        [`%${prefix}%`],
      ),
    rowsTagged: (tag) => count(`SELECT count(*)::int AS n FROM ${TABLE} WHERE tag = $1`, [tag]),
    end: async () => {
      await probe.stop();
      await activity.end();
    },
  };
}

/** Registers the checks for one ORM over PostgreSQL, on `driver` (by default this project's pg). */
export function ormChecks(name: string, open: () => Promise<Orm>, driver: PgModule = pg): void {
  checks(name, () => postgres(driver), open);
}
