/**
 * What the ORM checks' MikroORM files (PostgreSQL and MariaDB) share: whether this Node can run MikroORM 7, the
 * driver copy MikroORM itself loads, and the checks' view of an initialised MikroORM.
 */
import { createRequire } from 'node:module';
import { type Orm, TABLE } from './orm-checks.ts';

const [major = 0, minor = 0] = process.versions.node.split('.').map(Number);
/** MikroORM 7 needs Node 22.17 or later; on an older Node its files say so and run nothing. */
export const mikroOrmSupported = major > 22 || (major === 22 && minor >= 17);
if (!mikroOrmSupported) {
  console.log(`MikroORM 7 needs Node 22.17 or later; this is ${process.version}: its checks do not run`);
}

/**
 * The driver module (`pg`, `mysql2`) MikroORM loads, resolved from its driver package (`@mikro-orm/postgresql`,
 * `@mikro-orm/mysql`) as its own `require` would: MikroORM pins an exact release, which npm installs beside it when
 * the application's differs, and that copy is the one to instrument.
 */
export function driverOfMikroOrm(from: string, mikroPackage: string, driver: string): unknown {
  // Resolved from the test file (`from`: its import.meta.url), whose package installs MikroORM.
  const require = createRequire(from);
  return createRequire(require.resolve(mikroPackage))(driver);
}

/** The part of a MikroORM entity manager the checks use. */
interface EntityManager {
  execute<T = unknown>(sql: string, params?: unknown[]): Promise<T>;
  transactional<T>(work: (em: EntityManager) => Promise<T>): Promise<T>;
}

/** The checks' view of `orm`; `sql` names the server's sleep (one `?`) and its connection id (as `id`). */
export function mikroOrmChecked(
  orm: { em: { fork(): EntityManager }; close(force?: boolean): Promise<void> },
  sql: { sleep: string; connectionId: string },
): Orm {
  const em = () => orm.em.fork();
  return {
    sleep: (seconds, mark) => em().execute(`${sql.sleep} /* ${mark} */`, [seconds]),
    insertThenSleep: (tag, seconds) =>
      em().transactional(async (tx) => {
        await tx.execute(`INSERT INTO ${TABLE} VALUES (?)`, [tag]);
        await tx.execute(sql.sleep, [seconds]);
      }),
    connectionId: async () => {
      const rows = await em().execute<{ id: number }[]>(sql.connectionId);
      return Number((rows[0] as { id: number }).id);
    },
    close: () => orm.close(true),
  };
}
