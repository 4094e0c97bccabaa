/**
 * MikroORM 7 on MariaDB (`@mikro-orm/mariadb`, over Kysely and mysql2), with the mysql2 MikroORM loads
 * instrumented (test/support/mikro-orm.ts): the checks of harness.ts. Node 22.17 or later.
 */
import { MikroORM } from '@mikro-orm/mariadb';
import { describe } from 'vitest';
import { driverOfMikroOrm, mikroOrmChecked, mikroOrmSupported } from '../../../../test/support/mikro-orm.ts';
import { MARIADB, requireService } from '../../../../test/support/services.ts';
import type { Mysql2Module } from '../../src/index.ts';
import { serverParts } from '../support.ts';
import { ormChecks, POOL_MAX } from './harness.ts';

const available = await requireService(MARIADB);
const mikroMysql2 = driverOfMikroOrm(import.meta.url, '@mikro-orm/mysql', 'mysql2') as Mysql2Module;

describe.runIf(available && mikroOrmSupported)('MikroORM (@mikro-orm/mariadb) with instrumentMysql, on MariaDB', () => {
  ormChecks(
    'MikroORM',
    async () => {
      const { host, port, user, password, database } = serverParts();
      const orm = await MikroORM.init({
        host,
        port,
        user,
        password,
        dbName: database,
        entities: [],
        discovery: { warnWhenNoEntities: false },
        pool: { min: 0, max: POOL_MAX },
        debug: false,
      });
      return mikroOrmChecked(orm, { sleep: 'SELECT SLEEP(?)', connectionId: 'SELECT CONNECTION_ID() AS id' });
    },
    { mysql2: mikroMysql2 },
  );
});
