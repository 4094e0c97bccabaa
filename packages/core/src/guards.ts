/**
 * "Does this error mean the deadline was exceeded (or the work cancelled)?" — answered for our own errors and
 * for the errors drivers and transports throw when our cancellation reached them.
 */
import { CancelledError, DeadlineExceededError, ErrorCode } from './errors.js';
import type { StopReason } from './scope.js';
import { storage } from './storage.js';

// An adapter that cancels work on the server (a Postgres CancelRequest, a MariaDB KILL QUERY) puts the reason
// on the driver error it gets back, so the error is recognised — as a deadline or as a cancellation — even
// after an ORM re-throws it unwrapped.
const kCausedBy = Symbol.for('@deadline/core/caused-by@1');

/** How deep to follow `cause` chains; they are short in practice and a cycle must not hang us. */
const MAX_CAUSE_DEPTH = 8;

/**
 * Where an error keeps the one it wraps: the standard `cause`, then the ORMs' own fields, which predate it —
 * TypeORM's `QueryFailedError.driverError`, Sequelize's `DatabaseError.parent` (and `.original`), MikroORM's
 * `DriverException.previous`. Knex, Kysely and Drizzle (`cause`) need nothing more.
 */
const WRAPPED: readonly string[] = ['cause', 'driverError', 'parent', 'original', 'previous'];

/** The error `err` wraps, if any. */
function wrappedBy(err: Record<PropertyKey, unknown>): unknown {
  for (const key of WRAPPED) {
    const inner = err[key];
    if (typeof inner === 'object' && inner !== null && inner !== err) return inner;
  }
  return undefined;
}

/** PostgreSQL SQLSTATE `query_canceled`: a statement_timeout, a CancelRequest, pg_cancel_backend(). */
const PG_QUERY_CANCELED = '57014';
/** MariaDB ER_STATEMENT_TIMEOUT and MySQL ER_QUERY_TIMEOUT: the server's own statement time limit. */
const MYSQL_STATEMENT_TIMEOUT_ERRNOS: ReadonlySet<number> = new Set([1969, 3024]);

/**
 * Records on a driver error that it was caused by `reason` — a deadline or a cancellation this project enforced
 * (for adapters; see `@deadline/core/internal`).
 * @internal
 */
export function markCausedBy(error: unknown, reason: StopReason): void {
  if (typeof error === 'object' && error !== null && Object.isExtensible(error)) {
    Object.defineProperty(error, kCausedBy, { value: reason, configurable: true });
  }
}

function fields(value: unknown): Record<PropertyKey, unknown> | undefined {
  return typeof value === 'object' && value !== null ? (value as Record<PropertyKey, unknown>) : undefined;
}

/** A server-side timeout is a deadline by definition, whoever configured it. */
function isServerTimeout(err: Record<PropertyKey, unknown>): boolean {
  if (err.code === PG_QUERY_CANCELED)
    return typeof err.message === 'string' && err.message.includes('statement timeout');
  return typeof err.errno === 'number' && MYSQL_STATEMENT_TIMEOUT_ERRNOS.has(err.errno);
}

const SERVER_TIMEOUT = Symbol('server-timeout');
/**
 * An error rebuilt from one of ours, keeping its `code` and message but neither its class nor a link to it:
 * Prisma's `PrismaClientKnownRequestError` for an error its driver adapter got from the driver.
 */
const COPIED_DEADLINE = Symbol('copied-deadline');
const COPIED_CANCEL = Symbol('copied-cancel');

type Explanation = StopReason | typeof SERVER_TIMEOUT | typeof COPIED_DEADLINE | typeof COPIED_CANCEL;

/**
 * The outermost explanation in `error`'s cause chain: one of our errors, an adapter's mark, a server timeout,
 * a copy of one of ours.
 */
function explain(error: unknown): Explanation | undefined {
  // A copied code is the last resort: a wrapper that copies the code (got's RequestError does) may still hold
  // the error itself further down, with what only it knows (whose deadline, the phase).
  let copied: typeof COPIED_DEADLINE | typeof COPIED_CANCEL | undefined;
  let current = error;
  for (let depth = 0; depth < MAX_CAUSE_DEPTH; depth++) {
    if (current instanceof DeadlineExceededError || current instanceof CancelledError) return current;
    const err = fields(current);
    if (err === undefined) break;
    const mark = err[kCausedBy];
    if (mark instanceof DeadlineExceededError || mark instanceof CancelledError) return mark;
    if (isServerTimeout(err)) return SERVER_TIMEOUT;
    if (err.code === ErrorCode.DeadlineExceeded) copied ??= COPIED_DEADLINE;
    else if (err.code === ErrorCode.Cancelled) copied ??= COPIED_CANCEL;
    current = wrappedBy(err);
  }
  return copied;
}

/**
 * True for a {@link DeadlineExceededError} from any copy of this package, and for errors that mean the same:
 * an error (an `AbortError` from `fetch`, a driver error) whose `cause` chain holds one — an ORM's wrapping
 * too: TypeORM's `driverError`, Sequelize's `parent`, MikroORM's `previous` — or that an adapter marked as
 * caused by one; an error that kept one's `code` (`ERR_DEADLINE_EXCEEDED`) when rebuilt (Prisma's); a server-side statement timeout (PostgreSQL `57014` "statement timeout", MariaDB
 * errno 1969, MySQL 3024). A query cancelled by someone else (`57014` "user request", errno 1317 from an
 * operator's `KILL QUERY`) is not a deadline.
 *
 * @example
 * ```ts
 * import { isDeadlineExceededError } from '@deadline/core';
 * try { await pool.query('select pg_sleep(5)'); }
 * catch (err) { if (isDeadlineExceededError(err)) reply.code(504); else throw err; }
 * ```
 */
export function isDeadlineExceededError(error: unknown): boolean {
  const why = explain(error);
  return why === SERVER_TIMEOUT || why === COPIED_DEADLINE || why instanceof DeadlineExceededError;
}

/**
 * True for a {@link CancelledError} from any copy of this package, or an error whose `cause` chain holds one or
 * that an adapter marked as caused by one (an `AbortError` from `fetch` aborted because the client left).
 *
 * @example
 * ```ts
 * import { isCancelledError } from '@deadline/core';
 * try { await fetch(url, { signal }); }
 * catch (err) { if (isCancelledError(err)) return; else throw err; } // cancelled: nobody is waiting
 * ```
 */
export function isCancelledError(error: unknown): boolean {
  const why = explain(error);
  return why === COPIED_CANCEL || why instanceof CancelledError;
}

/**
 * The typed error that explains `error`, for code that must answer it: the {@link DeadlineExceededError} or
 * {@link CancelledError} itself or in its `cause` chain, the reason an adapter marked a driver error with, or —
 * for a server-side statement timeout — a new `DeadlineExceededError` (phase `during-call`) with the driver
 * error as its cause. `undefined` when `error` is about something else.
 *
 * @example
 * ```ts
 * import { findDeadlineError } from '@deadline/core';
 * const typed = findDeadlineError(err);
 * if (typed !== undefined) return reply.code(typed.statusCode).send({ error: typed.code });
 * ```
 */
export function findDeadlineError(error: unknown): StopReason | undefined {
  const why = explain(error);
  if (why !== SERVER_TIMEOUT && why !== COPIED_DEADLINE && why !== COPIED_CANCEL) return why;
  const message = fields(error)?.message as string | undefined;
  if (why === COPIED_CANCEL) return new CancelledError(message, { cause: error });
  const scope = storage.getStore();
  return new DeadlineExceededError({
    budgetMs: scope?.deadline.isNone === false ? scope.deadline.budgetMs : undefined,
    elapsedMs: scope?.deadline.isNone === false ? scope.deadline.elapsedMs() : undefined,
    phase: 'during-call',
    hop: scope?.hop,
    cause: error,
    message: why === COPIED_DEADLINE ? message : `the server stopped the statement: ${message ?? 'statement timeout'}`,
  });
}

/** What a server edge answers for a circuit breaker's refusal: its own status (503) and headers (`Retry-After`). */
export type CircuitRefusal = Error & { statusCode: number; headers?: Record<string, string> };

/**
 * A circuit breaker's refusal (`code: 'ERR_CIRCUIT_OPEN'`, as `@deadline/resilience`'s `CircuitOpenError`) in
 * `error` or its cause chain — global fetch wraps it in `TypeError: fetch failed` — so the server edge can
 * answer it with its 503 and `Retry-After` rather than a 500. @internal
 */
export function findCircuitRefusal(error: unknown): CircuitRefusal | undefined {
  let e = error;
  for (let depth = 0; depth < 5 && typeof e === 'object' && e !== null; depth++) {
    const candidate = e as Partial<CircuitRefusal> & { code?: unknown; cause?: unknown };
    if (candidate.code === 'ERR_CIRCUIT_OPEN' && typeof candidate.statusCode === 'number') {
      return candidate as CircuitRefusal;
    }
    e = candidate.cause;
  }
  return undefined;
}
