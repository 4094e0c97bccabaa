/**
 * "Does this error mean the deadline was exceeded (or the work cancelled)?" — answered for our own errors and
 * for the errors drivers and transports throw when our cancellation reached them. One walker follows every
 * error's chain of causes; what a driver's errors look like (a server-side timeout, an ORM's wrapper field) is
 * registered by that driver's package (error-recognizers.ts), not known here.
 */
import { recognizers } from './error-recognizers.js';
import { brandOf, CancelledError, type DeadlineError, DeadlineExceededError, ErrorCode } from './errors.js';
import type { StopReason } from './scope.js';
import { storage } from './storage.js';

// An adapter that cancels work on the server (a Postgres CancelRequest, a MariaDB KILL QUERY) puts the reason
// on the driver error it gets back, so the error is recognised — as a deadline or as a cancellation — even
// after an ORM re-throws it unwrapped.
const kCausedBy = Symbol.for('@deadline/core/caused-by@1');

/** How deep to follow chains of causes; they are short in practice and a cycle must not hang us. */
const MAX_CAUSE_DEPTH = 8;

type ErrorFields = Record<PropertyKey, unknown>;

function fields(value: unknown): ErrorFields | undefined {
  return typeof value === 'object' && value !== null ? (value as ErrorFields) : undefined;
}

/** The error `err` wraps, if any: its `cause`, or a field a driver registered (an ORM's `driverError`, …). */
function wrappedBy(err: ErrorFields): unknown {
  for (const key of recognizers().wrapperFields) {
    const inner = err[key];
    if (typeof inner === 'object' && inner !== null && inner !== err) return inner;
  }
  return undefined;
}

/**
 * The first answer `visit` gives for `error` and the errors it wraps, outermost first: the one walker every
 * guard of every package uses (see `@deadline/core/internal`).
 * @internal
 */
export function findInCauses<T>(error: unknown, visit: (err: ErrorFields) => T | undefined): T | undefined {
  let current = error;
  for (let depth = 0; depth < MAX_CAUSE_DEPTH; depth++) {
    const err = fields(current);
    if (err === undefined) return undefined;
    const found = visit(err);
    if (found !== undefined) return found;
    current = wrappedBy(err);
  }
  return undefined;
}

/**
 * The member of the error family with `code` in `error` or the errors it wraps — global fetch wraps a
 * `CircuitOpenError` in `TypeError: fetch failed` — for guards (`isCircuitOpenError`) and for server edges that
 * answer it with its own status and headers.
 * @internal
 */
export function findErrorWithCode(error: unknown, code: ErrorCode): DeadlineError | undefined {
  return findInCauses(error, (err) => (brandOf(err) === code ? (err as unknown as DeadlineError) : undefined));
}

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

/** A server-side timeout is a deadline by definition, whoever configured it. */
function isServerTimeout(err: ErrorFields): boolean {
  for (const isTimeout of recognizers().serverTimeouts) if (isTimeout(err)) return true;
  return false;
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
 * The outermost explanation in `error`'s chain of causes: one of our errors, an adapter's mark, a server
 * timeout, a copy of one of ours.
 */
function explain(error: unknown): Explanation | undefined {
  // A copied code is the last resort: a wrapper that copies the code (got's RequestError does) may still hold
  // the error itself further down, with what only it knows (whose deadline, the phase).
  let copied: typeof COPIED_DEADLINE | typeof COPIED_CANCEL | undefined;
  const found = findInCauses<Explanation>(error, (err) => {
    if (err instanceof DeadlineExceededError || err instanceof CancelledError) return err;
    const mark = err[kCausedBy];
    if (mark instanceof DeadlineExceededError || mark instanceof CancelledError) return mark;
    if (isServerTimeout(err)) return SERVER_TIMEOUT;
    if (err.code === ErrorCode.DeadlineExceeded) copied ??= COPIED_DEADLINE;
    else if (err.code === ErrorCode.Cancelled) copied ??= COPIED_CANCEL;
    return undefined;
  });
  return found ?? copied;
}
/**
 * True for a {@link DeadlineExceededError} from any copy of this package, and for errors that mean the same:
 * an error (an `AbortError` from `fetch`, a driver error) whose chain of causes holds one — through the
 * wrapper fields drivers register too (an ORM's `driverError`, `parent`, `previous`) — or that an adapter
 * marked as caused by one; an error that kept one's `code` (`ERR_DEADLINE_EXCEEDED`) when rebuilt (Prisma's);
 * a server-side statement timeout, as the driver's package recognises it (`@deadline/pg`: SQLSTATE `57014`
 * "statement timeout"; `@deadline/mysql`: errno 1969 or 3024). A query cancelled by someone else is not a
 * deadline.
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
