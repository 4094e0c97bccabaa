/**
 * MikroORM 7 (`@mikro-orm/postgresql`, over Kysely and node-postgres), with the pg MikroORM loads instrumented
 * (test/support/mikro-orm.ts): the checks of harness.ts. Node 22.17 or later.
 */
import { MikroORM } from '@mikro-orm/postgresql';
import { describe } from 'vitest';
import { driverOfMikroOrm, mikroOrmChecked, mikroOrmSupported } from '../../../../test/support/mikro-orm.ts';
import { POSTGRES, requireService } from '../../../../test/support/services.ts';
import { ormChecks, POOL_MAX } from './harness.ts';

const available = await requireService(POSTGRES);
const mikroPg = driverOfMikroOrm(import.meta.url, '@mikro-orm/postgresql', 'pg') as Parameters<typeof ormChecks>[2];

describe.runIf(available && mikroOrmSupported)('MikroORM with instrumentPg', () => {
  ormChecks(
    'MikroORM',
    async () => {
      const orm = await MikroORM.init({
        clientUrl: POSTGRES.url,
        entities: [],
        discovery: { warnWhenNoEntities: false },
        pool: { min: 0, max: POOL_MAX },
        debug: false,
      });
      return mikroOrmChecked(orm, { sleep: 'SELECT pg_sleep(?)', connectionId: 'SELECT pg_backend_pid() AS id' });
    },
    mikroPg,
  );
});
