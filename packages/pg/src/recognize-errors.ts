/**
 * Teaches the core's guards (`isDeadlineExceededError`, `findDeadlineError`) PostgreSQL's errors, on load of this
 * package: a statement stopped by the server's `statement_timeout` is a deadline, and the ORMs that run on `pg`
 * keep the driver's error in fields of their own (before `cause` existed).
 */
import { recognizeErrors } from '@deadline/core/internal';
import { isStatementTimeout } from './errors.js';

/**
 * Where the ORMs that run on `pg` keep the error they wrap: TypeORM's `QueryFailedError.driverError`, Sequelize's
 * `DatabaseError.parent` (and `.original`), MikroORM's `DriverException.previous`. Knex, Kysely and Drizzle use
 * `cause`, which every chain follows anyway.
 */
const ORM_WRAPPER_FIELDS = ['driverError', 'parent', 'original', 'previous'];

recognizeErrors('@deadline/pg', { wrapperFields: ORM_WRAPPER_FIELDS, isServerTimeout: isStatementTimeout });
