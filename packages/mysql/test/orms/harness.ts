/**
 * The ORM checks (test/support/orm-checks.ts) on MariaDB: the ORM's driver instrumented — mysql2 with
 * `instrumentMysql()`, the `mariadb` connector with `instrumentMariadb()` — the server watched in its process list
 * from a connection of the test's own.
 */
import mysql, { type RowDataPacket } from 'mysql2';
import { ormChecks as checks, type Orm, type Server, TABLE } from '../../../../test/support/orm-checks.ts';
import { instrumentMariadb, instrumentMysql, type MariadbModule, type Mysql2Module } from '../../src/index.ts';
import { oneCutterAtATime } from '../one-cutter-at-a-time.ts';
import { startServerProbe } from '../server-probe.ts';
import { Watcher } from '../support.ts';

/** The driver module the ORM runs on: this project's mysql2, the copy of mysql2 an ORM pins, or the connector. */
export type Driver = { mysql2: Mysql2Module } | { mariadb: MariadbModule };

export { KEEP_IDLE_MS, POOL_MAX, TABLE } from '../../../../test/support/orm-checks.ts';

async function mariadb(driver: Driver): Promise<Server> {
  const watcher = await Watcher.open();
  const probe = await startServerProbe();
  const count = async (sql: string, values: unknown[]) => {
    const [rows] = await watcher.query<RowDataPacket[]>(sql, values);
    return Number(rows[0]?.n);
  };
  return {
    instrument: () =>
      'mariadb' in driver
        ? instrumentMariadb(driver.mariadb, { name: 'orders-db' })
        : instrumentMysql(driver.mysql2, { name: 'orders-db' }),
    prepare: async () => {
      await watcher.query(`CREATE TABLE IF NOT EXISTS ${TABLE} (tag varchar(100)) ENGINE=InnoDB`);
    },
    dropTable: async () => {
      await watcher.query(`DROP TABLE IF EXISTS ${TABLE}`);
    },
    startedRunning: (mark) => watcher.waitRunning(mark),
    goneAt: (mark) => watcher.waitGone(mark),
    goneSpan: (mark) => watcher.waitGoneSpan(mark),
    busyWith: (prefix) =>
      count(
        "SELECT COUNT(*) AS n FROM information_schema.processlist WHERE COMMAND IN ('Query', 'Execute') AND INFO LIKE CONCAT('%', ?, '%') AND ID <> CONNECTION_ID()",
        [prefix],
      ),
    rowsTagged: (tag) => count(`SELECT COUNT(*) AS n FROM ${TABLE} WHERE tag = ?`, [tag]),
    stalledBetween: (from, to) => probe.longestBetween(from, to),
    sleepAnswersWhenInterrupted: true,
    end: async () => {
      await probe.stop();
      await watcher.end();
    },
  };
}

/** Registers the checks for one ORM over MariaDB, on `driver` (by default this project's mysql2). */
export function ormChecks(name: string, open: () => Promise<Orm>, driver: Driver = { mysql2: mysql }): void {
  oneCutterAtATime();
  checks(name, () => mariadb(driver), open);
}
