/**
 * The one family of errors every package of this project throws. Each has a stable `code` from one table; each
 * is branded so that `instanceof` works even when an app ends up with two copies of a package (a nested
 * `node_modules`, a CJS and an ESM build): the check reads a `Symbol.for` brand, not the prototype chain.
 */
import { describeValue } from './describe-value.js';
import { DEADLINE_EXCEEDED_BY_HEADER } from './wire/header-names.js';

const DOWNSTREAM = 'downstream:';

/**
 * Stable codes, one per error class of every package, and one per problem an idempotent endpoint answers with;
 * safe to switch on and to alert on. docs/reference/errors.md lists where each comes from.
 *
 * @example
 * ```ts
 * if (err.code === ErrorCode.DeadlineExceeded) metrics.increment('deadline_exceeded');
 * ```
 */
export const ErrorCode = {
  /** `DeadlineExceededError` (`@deadline/core`): the budget ran out. */
  DeadlineExceeded: 'ERR_DEADLINE_EXCEEDED',
  /** `CancelledError` (`@deadline/core`): stopped for a reason other than time. */
  Cancelled: 'ERR_CANCELLED',
  /** `InvalidArgumentError` (every package): an option or argument was invalid. */
  InvalidArgument: 'ERR_INVALID_ARGUMENT',
  /** `CircuitOpenError` (`@deadline/resilience`): the call was not made, its downstream's circuit is open. */
  CircuitOpen: 'ERR_CIRCUIT_OPEN',
  /** `IdempotencyKeyLostError` (`@deadline/idempotency`): another request took this one's key over. */
  IdempotencyKeyLost: 'ERR_IDEMPOTENCY_KEY_LOST',
  /** The 409 problem (`@deadline/idempotency`): a request with this key is still in flight. */
  IdempotencyConflict: 'ERR_IDEMPOTENCY_CONFLICT',
  /** The 422 problem (`@deadline/idempotency`): the key was used with another payload. */
  IdempotencyMismatch: 'ERR_IDEMPOTENCY_MISMATCH',
} as const;
/**
 * One of the {@link ErrorCode} values.
 *
 * @example
 * ```ts
 * const code: ErrorCode = 'ERR_CANCELLED';
 * ```
 */
export type ErrorCode = (typeof ErrorCode)[keyof typeof ErrorCode];

// Versioned: bump the suffix only if the shape of these errors changes incompatibly.
const kBrand = Symbol.for('@deadline/core/error@1');
// Marks the family's classes, whose instanceof is decided by the brand; user subclasses keep the normal check.
const kBrandedClass = Symbol.for('@deadline/core/error-class@1');

function hasCode(value: unknown, code: ErrorCode | undefined): boolean {
  const brand = brandOf(value);
  return brand !== undefined && (code === undefined || brand === code);
}

/** The code a member of the family was branded with (from any copy of its package); `undefined` for others. */
export function brandOf(value: unknown): ErrorCode | undefined {
  if (typeof value !== 'object' || value === null) return undefined;
  const brand = (value as { [kBrand]?: unknown })[kBrand];
  return typeof brand === 'string' ? (brand as ErrorCode) : undefined;
}

/** Our classes answer `instanceof` by brand; a user's subclass of them keeps the ordinary prototype check. */
function isInstance(cls: object, value: unknown): boolean {
  if (!Object.hasOwn(cls, kBrandedClass)) return Function.prototype[Symbol.hasInstance].call(cls, value);
  return hasCode(value, (cls as { [kBrandedClass]?: ErrorCode })[kBrandedClass]);
}

/**
 * Base class of every error this project throws. Catch it to handle "anything from deadline" at once.
 *
 * @example
 * ```ts
 * import { DeadlineError } from '@deadline/core';
 * try { await work(); } catch (err) {
 *   if (err instanceof DeadlineError) log.warn({ code: err.code }, err.message);
 *   else throw err;
 * }
 * ```
 */
export abstract class DeadlineError extends Error {
  /** Stable, machine-readable code. */
  declare readonly code: ErrorCode;
  /** The HTTP status to answer with (504, 499, 500, 503, 409); frameworks' default error handlers read it. */
  abstract get statusCode(): number;

  /** Headers to answer with (`X-Deadline-Exceeded-By`, `Retry-After`), if any; frameworks' error handlers read them. */
  get headers(): Record<string, string> | undefined {
    return undefined;
  }

  constructor(code: ErrorCode, message: string, options?: { cause?: unknown }) {
    // Only pass `cause` when there is one: `{ cause: undefined }` would still install an own `cause`.
    super(message, options?.cause === undefined ? undefined : options);
    // The brand decides `instanceof`, so the base must not mint errors of its own with any code.
    if (new.target === DeadlineError) throw new TypeError('DeadlineError is abstract: use one of its subclasses');
    Object.defineProperty(this, 'code', { value: code, enumerable: true });
    Object.defineProperty(this, kBrand, { value: code });
  }

  static override [Symbol.hasInstance](value: unknown): boolean {
    // biome-ignore lint/complexity/noThisInStatic: `this` is the class right of `instanceof`, often a subclass
    return isInstance(this, value);
  }
}

/**
 * Makes `cls` a member of the family: its `name` (on the prototype, as the built-in errors have it) and its code,
 * by which `instanceof` recognises its instances from any copy of its package. Every error class of every
 * package is declared this way, once, after its body.
 *
 * @example
 * ```ts
 * export class CircuitOpenError extends DeadlineError { ... }
 * defineErrorClass(CircuitOpenError, 'CircuitOpenError', ErrorCode.CircuitOpen);
 * ```
 */
export function defineErrorClass(
  cls: abstract new (...args: never[]) => DeadlineError,
  name: string,
  code?: ErrorCode,
) {
  Object.defineProperty(cls, kBrandedClass, { value: code });
  Object.defineProperty(cls.prototype, 'name', { value: name, writable: true, configurable: true });
}
defineErrorClass(DeadlineError, 'DeadlineError');

/**
 * When, relative to a call, a deadline was found exceeded.
 *
 * @example
 * ```ts
 * if (err.phase === 'before-call') log.info('not called: no time left');
 * ```
 */
export type DeadlinePhase = 'before-call' | 'during-call' | 'in-handler';

/**
 * Whose deadline fired: `local` — this process's context ran out; `downstream:<hop>` — a downstream hop
 * reported that its deadline (the one we propagated) fired there.
 *
 * @example
 * ```ts
 * const hop = err.whose === 'local' ? 'orders' : err.whose.slice('downstream:'.length);
 * ```
 */
export type DeadlineOwner = 'local' | `downstream:${string}`;

/**
 * Fields of a {@link DeadlineExceededError}.
 *
 * @example
 * ```ts
 * const details: DeadlineExceededDetails = { phase: 'during-call', target: 'orders-db', budgetMs: 800, elapsedMs: 801 };
 * throw new DeadlineExceededError(details);
 * ```
 */
export interface DeadlineExceededDetails {
  /** The budget the deadline was created with, in ms (`undefined` if unknown). */
  budgetMs?: number | undefined;
  /** Time spent since the deadline was created, in ms. */
  elapsedMs?: number | undefined;
  /** Before a call was made, while it ran, or in the handler's own code. */
  phase: DeadlinePhase;
  /** The downstream the call was for (`'orders-db'`, `'GET http://inventory'`), if any. */
  target?: string | undefined;
  /** Whose deadline fired. Defaults to `'local'`. */
  whose?: DeadlineOwner | undefined;
  /** For a `local` deadline, this hop's name (the context's `hop`); for `downstream:<hop>` it is taken from there. */
  hop?: string | undefined;
  /** The driver or transport error this one explains. */
  cause?: unknown;
  /** Replaces the generated message. */
  message?: string | undefined;
}

function round(ms: number | undefined): number | undefined {
  return ms === undefined || !Number.isFinite(ms) ? ms : Math.round(ms);
}

/**
 * The request's time budget ran out. Maps to HTTP 504 and gRPC `DEADLINE_EXCEEDED`.
 *
 * @example
 * ```ts
 * import { DeadlineExceededError, timeoutFor } from '@deadline/core';
 * try {
 *   const ms = timeoutFor('inventory', { marginMs: 20 });
 * } catch (err) {
 *   if (err instanceof DeadlineExceededError && err.phase === 'before-call') {
 *     // not even tried: there was no time left
 *   }
 * }
 * ```
 */
export class DeadlineExceededError extends DeadlineError {
  declare readonly code: typeof ErrorCode.DeadlineExceeded;
  /** The budget the deadline was created with, in whole ms. */
  readonly budgetMs: number | undefined;
  /** Time spent since the deadline was created, in whole ms. */
  readonly elapsedMs: number | undefined;
  /** When it was noticed: `before-call` (the call was not made), `during-call`, `in-handler`. */
  readonly phase: DeadlinePhase;
  /** The downstream the call was for, if any. */
  readonly target: string | undefined;
  /** `local`, or `downstream:<hop>` when a downstream hop reported its (propagated) deadline fired. */
  readonly whose: DeadlineOwner;
  /** The hop whose deadline fired, when known: what a 504 names in `X-Deadline-Exceeded-By`. */
  readonly hop: string | undefined;

  constructor(details: DeadlineExceededDetails) {
    const whose = details.whose ?? 'local';
    const budgetMs = round(details.budgetMs);
    const elapsedMs = round(details.elapsedMs);
    super(
      ErrorCode.DeadlineExceeded,
      details.message ?? exceededMessage(details.phase, details.target, whose, budgetMs, elapsedMs),
      {
        cause: details.cause,
      },
    );
    this.budgetMs = budgetMs;
    this.elapsedMs = elapsedMs;
    this.phase = details.phase;
    this.target = details.target;
    this.whose = whose;
    this.hop = whose === 'local' ? details.hop : whose.slice(DOWNSTREAM.length);
  }

  /** 504 Gateway Timeout: the HTTP status to answer with. Frameworks' default error handlers read it. */
  get statusCode(): 504 {
    return 504;
  }

  /** `X-Deadline-Exceeded-By: <hop>` when the hop is known; fastify's and express's error handlers set these. */
  override get headers(): Record<string, string> | undefined {
    return this.hop === undefined ? undefined : { [DEADLINE_EXCEEDED_BY_HEADER]: this.hop };
  }
}
defineErrorClass(DeadlineExceededError, 'DeadlineExceededError', ErrorCode.DeadlineExceeded);

function exceededMessage(
  phase: DeadlinePhase,
  target: string | undefined,
  whose: DeadlineOwner,
  budgetMs: number | undefined,
  elapsedMs: number | undefined,
): string {
  const where =
    phase === 'before-call'
      ? `not calling ${target ?? 'downstream'}: no time left`
      : phase === 'during-call'
        ? `call to ${target ?? 'downstream'} cut off`
        : 'deadline exceeded';
  const owner = whose === 'local' ? '' : ` (the deadline of ${whose.slice(DOWNSTREAM.length)})`;
  const numbers = budgetMs === undefined ? '' : ` after ${elapsedMs ?? '?'} ms of a ${budgetMs} ms budget`;
  return `${where}${owner}${numbers}`;
}

/**
 * Why a context was cancelled. Well-known values are listed; adapters may add their own.
 *
 * @example
 * ```ts
 * ctx.cancel(new CancelledError('client went away', { reason: 'client-disconnected' }));
 * ```
 */
export type CancelReason = 'cancelled' | 'client-disconnected' | 'context-ended' | (string & {});

/**
 * Work was cancelled for a reason other than time: the client went away, the owner called `cancel()`,
 * or the request finished while this work was still running. gRPC keeps this (`CANCELLED`) apart from
 * `DEADLINE_EXCEEDED`, and so do we. Logged as 499 (nginx's "client closed request").
 *
 * @example
 * ```ts
 * import { CancelledError, createContext } from '@deadline/core';
 * const ctx = createContext({ deadline: 1000 });
 * res.on('close', () => {
 *   if (!res.writableFinished) ctx.cancel(new CancelledError('client went away', { reason: 'client-disconnected' }));
 * });
 * ```
 */
export class CancelledError extends DeadlineError {
  declare readonly code: typeof ErrorCode.Cancelled;
  /** Why: `client-disconnected`, `context-ended`, `cancelled` (explicit), or an adapter's own word. */
  readonly reason: CancelReason;

  constructor(message = 'cancelled', options?: { reason?: CancelReason | undefined; cause?: unknown }) {
    super(ErrorCode.Cancelled, message, { cause: options?.cause });
    this.reason = options?.reason ?? 'cancelled';
  }

  /** 499 (nginx's "client closed request"): for logs; the client it would be sent to has usually gone. */
  get statusCode(): 499 {
    return 499;
  }
}
defineErrorClass(CancelledError, 'CancelledError', ErrorCode.Cancelled);

/**
 * An option or argument was invalid: a programming or configuration error, named with the option and the
 * value received. Adapters check their options at registration; core functions check their arguments when
 * called. Request data never causes it — a bad header is refused with a reason, not thrown.
 *
 * @example
 * ```ts
 * import { InvalidArgumentError, timeoutFor } from '@deadline/core';
 * try { timeoutFor('db', { marginMs: -5 }); }
 * catch (err) { if (err instanceof InvalidArgumentError) console.error(err.option, err.message); }
 * ```
 */
export class InvalidArgumentError extends DeadlineError {
  declare readonly code: typeof ErrorCode.InvalidArgument;
  /** The option or argument at fault, e.g. `marginMs`. */
  readonly option: string;

  constructor(option: string, expected: string, received: unknown) {
    super(ErrorCode.InvalidArgument, `${option} must be ${expected}; received ${describeValue(received)}`);
    this.option = option;
  }

  /** 500: a programming or configuration error on this side. */
  get statusCode(): 500 {
    return 500;
  }
}
defineErrorClass(InvalidArgumentError, 'InvalidArgumentError', ErrorCode.InvalidArgument);

// Frozen intrinsics (SES lockdown) make stackTraceLimit read-only; then stacks are simply kept.
const canSkipStacks = Object.getOwnPropertyDescriptor(Error, 'stackTraceLimit')?.writable === true;

/**
 * Builds an error without capturing a stack trace, for reasons the core creates itself (a timer fired, a
 * context ended): their stack would only show the timer or promise machinery, and capturing it costs several
 * microseconds on Node 20 — more than everything else a request pays the core.
 * @internal
 */
export function withoutStack<T>(make: () => T): T {
  if (!canSkipStacks) return make();
  const limit = Error.stackTraceLimit;
  Error.stackTraceLimit = 0;
  try {
    return make();
  } finally {
    Error.stackTraceLimit = limit;
  }
}

/**
 * Whether `value` is any error thrown by this project (any copy of it).
 *
 * @example
 * ```ts
 * if (isDeadlineError(err)) log.warn({ code: err.code }, err.message);
 * ```
 */
export function isDeadlineError(value: unknown): value is DeadlineError {
  return hasCode(value, undefined);
}
