/**
 * `@deadline/mysql` — mysql2 and the `mariadb` connector under the request's deadline: pool checkout and statements bounded by the remaining
 * budget, a server-side limit as a belt (MariaDB `max_statement_time`, MySQL `MAX_EXECUTION_TIME`), and
 * `KILL QUERY` the moment the budget runs out or the request is cancelled.
 * @packageDocumentation
 */

// Loading the package teaches the core's guards this driver's errors.
import './recognize-errors.js';

export { instrumentMysql, type Mysql2Module } from './instrument.js';
export type { MariadbModule } from './mariadb/connector.js';
export { instrumentMariadb } from './mariadb/instrument.js';
export type { MysqlDeadlineOptions, MysqlInstrumentOptions } from './options.js';
export type {
  DeadlineConnection,
  DeadlinePool,
  DeadlinePoolConnection,
  DeadlineQueryable,
  DeadlineTransaction,
} from './types.js';
export { withDeadline } from './with-deadline.js';
