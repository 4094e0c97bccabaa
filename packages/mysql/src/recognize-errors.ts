/**
 * Teaches the core's guards (`isDeadlineExceededError`, `findDeadlineError`) MySQL's and MariaDB's errors, on
 * load of this package: a statement stopped by the server's own time limit is a deadline, and the ORMs that run
 * on mysql2 and mariadb keep the driver's error in fields of their own (before `cause` existed).
 */
import { recognizeErrors } from '@deadline/core/internal';
import { isServerTimeout } from './driver-errors.js';

/**
 * Where the ORMs that run on mysql2 and mariadb keep the error they wrap: TypeORM's `QueryFailedError.driverError`,
 * Sequelize's `DatabaseError.parent` (and `.original`), MikroORM's `DriverException.previous`. Knex, Kysely and
 * Drizzle use `cause`, which every chain follows anyway.
 */
const ORM_WRAPPER_FIELDS = ['driverError', 'parent', 'original', 'previous'];

recognizeErrors('@deadline/mysql', { wrapperFields: ORM_WRAPPER_FIELDS, isServerTimeout });
