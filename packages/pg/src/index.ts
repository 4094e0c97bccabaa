/**
 * `@deadline/pg` — node-postgres under the request deadline: checkouts and statements bounded by the remaining
 * budget, a server-side `statement_timeout` belt for that statement only, and a CancelRequest at the stop.
 * @packageDocumentation
 */

// Loading the package teaches the core's guards this driver's errors.
import './recognize-errors.js';

export type { PgClient } from './client-as-pool.js';
export { instrumentPg, type PgInstrumentOptions, type PgModule } from './instrument.js';
export type { PgDeadlineOptions } from './options.js';
export {
  type DeadlinePool,
  type DeadlinePoolClient,
  type PgPoolClientLike,
  type PgPoolLike,
  type PgResult,
  type PgTransaction,
  withDeadline,
} from './with-deadline.js';
