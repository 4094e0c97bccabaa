/**
 * The options a service gives the server side of an RPC adapter (`@deadline/grpc`, `@deadline/connect`), checked
 * once when the service is wrapped: every error names the option and the value received. The HTTP adapters have
 * their own (`@deadline/server`), with routes and long-lived requests on top.
 */

import { type AdmissionOptions, type ResolvedAdmission, resolveAdmission } from './admission-options.js';
import { MAX_TIMER_DELAY_MS } from './clock.js';
import { InvalidArgumentError } from './errors.js';
import { checkBoolean, checkFunction, checkHop, checkNumber, checkObject } from './validate.js';
import { ALL_DIALECTS, type DeadlineDialect } from './wire/header-names.js';

/**
 * The subset of a pino logger the end-of-call line needs.
 *
 * @example
 * ```ts
 * const logger: CallLineLogger = pino();
 * ```
 */
export interface CallLineLogger {
  info(object: object, message: string): void;
  warn(object: object, message: string): void;
}

/**
 * Options of a server-side RPC adapter, `Call` being what its `trust` predicate is shown (a grpc-js server call, a
 * Connect request).
 *
 * @example
 * ```ts
 * const options: IncomingCallOptions<unknown> = { serviceName: 'inventory', defaultMs: 2_000, maxMs: 10_000 };
 * ```
 */
export interface IncomingCallOptions<Call> {
  /** This hop's name, for logs and the `x-deadline-exceeded-by` metadata (1–128 visible ASCII). Default `'service'`. */
  serviceName?: string | undefined;
  /** Budget of a call that brought no deadline, and the most an untrusted caller may have, in ms. Default 15,000. */
  defaultMs?: number | undefined;
  /** A trusted caller can never ask for more, in ms. Default 60,000. */
  maxMs?: number | undefined;
  /** Below this, the call is answered `DEADLINE_EXCEEDED` at once and the handler not run. Default 10. */
  minMs?: number | undefined;
  /**
   * Budget headers to read besides the protocol's own timeout: `deadline` (`x-request-deadline`), `grpc`,
   * `connect`, `envoy`. The smallest wins. Default all.
   */
  headers?: readonly DeadlineDialect[] | undefined;
  /**
   * Whether this caller may lengthen its budget past `defaultMs` (up to `maxMs`). Any other caller may only shorten
   * it: its handler's context gets the smaller of its deadline and `defaultMs`. Default: no caller is trusted. A
   * throwing predicate counts as untrusted.
   */
  trust?: ((call: Call) => boolean) | undefined;
  /**
   * Whether work the handler left running when it answered is cancelled then (Go's rule). Default `false`: it runs
   * on until the protocol closes the call's exchange, a moment after the answer (grpc-js and connect-node both do
   * once the status is sent), then stops. Work of a call that failed — deadline passed, caller cancelled — is
   * cancelled either way.
   */
  cancelOnEnd?: boolean | undefined;
  /** Writes one line per call at its end: method, budget, elapsed, outcome, status code. Default: none. */
  logger?: CallLineLogger | undefined;
  /**
   * For messages that wait in a broker (RabbitMQ, NATS): how far apart the publisher's and this consumer's clocks may
   * be, in ms. A message also carries its deadline on the publisher's wall clock (`x-request-deadline-at`); the time
   * it surely waited — what the two forms differ by, less this allowance — is taken off its budget. `false`: the wall
   * clock is not read, and a message's budget starts when it arrives. Default 10. Not used for RPC calls.
   */
  clockSkewMs?: number | false | undefined;
}

/**
 * Options of an RPC server (gRPC, Connect): an incoming call's, and admission.
 *
 * @example
 * ```ts
 * const options: RpcServerOptions<unknown> = { serviceName: 'inventory', admission: true };
 * ```
 */
export interface RpcServerOptions<Call> extends IncomingCallOptions<Call> {
  /**
   * Refuse at arrival a unary call that cannot finish in what it has left: `UNAVAILABLE` (Connect `unavailable`)
   * when the server's queue (twice) plus its method's typical time is more than that, `DEADLINE_EXCEEDED` when less is left
   * than the method's fastest typical time. Streaming calls are never refused. See docs/guides/admission.md.
   * Default off.
   */
  admission?: boolean | AdmissionOptions<Call> | undefined;
}

/** How far apart two hosts' clocks are taken to be, unless told (ms): what NTP or chrony keeps a fleet within. */
const DEFAULT_CLOCK_SKEW_MS = 10;

/** @internal */
export interface ResolvedIncomingOptions<Call> {
  hop: string;
  defaultMs: number;
  maxMs: number;
  minMs: number;
  dialects: readonly DeadlineDialect[];
  trust: ((call: Call) => boolean) | undefined;
  cancelOnEnd: boolean;
  logger: CallLineLogger | undefined;
  /** `clockSkewMs`; `undefined`: a message's wall-clock deadline is not read. */
  clockSkewMs: number | undefined;
  /** Admission of an RPC server's calls; `undefined`: off (and for messages). */
  admission: ResolvedAdmission<Call> | undefined;
}

/** @internal */
export function resolveIncomingOptions<Call>(
  options: RpcServerOptions<Call> | undefined,
): ResolvedIncomingOptions<Call> {
  const given = (checkObject('options', options) ?? {}) as RpcServerOptions<Call>;
  const range = { min: 1, max: MAX_TIMER_DELAY_MS };
  const maxMs = checkNumber('maxMs', given.maxMs, range) ?? 60_000;
  const defaultMs = checkNumber('defaultMs', given.defaultMs, range) ?? Math.min(15_000, maxMs);
  const minMs = checkNumber('minMs', given.minMs, { min: 0, max: MAX_TIMER_DELAY_MS }) ?? Math.min(10, defaultMs);
  if (defaultMs > maxMs) throw new InvalidArgumentError('defaultMs', `at most maxMs (${maxMs})`, defaultMs);
  if (minMs > defaultMs) throw new InvalidArgumentError('minMs', `at most defaultMs (${defaultMs})`, minMs);
  const dialects = given.headers ?? ALL_DIALECTS;
  if (!Array.isArray(dialects) || dialects.some((d) => !ALL_DIALECTS.includes(d))) {
    throw new InvalidArgumentError('headers', `an array of ${ALL_DIALECTS.map((d) => `'${d}'`).join(', ')}`, dialects);
  }
  const logger = checkObject('logger', given.logger) as CallLineLogger | undefined;
  if (logger !== undefined && (typeof logger.info !== 'function' || typeof logger.warn !== 'function')) {
    throw new InvalidArgumentError('logger', 'a logger with info() and warn() (pino)', logger);
  }
  return {
    hop: checkHop(given.serviceName, 'serviceName') ?? 'service',
    defaultMs,
    maxMs,
    minMs,
    dialects,
    trust: checkFunction<(call: Call) => boolean>('trust', given.trust),
    cancelOnEnd: checkBoolean('cancelOnEnd', given.cancelOnEnd) ?? false,
    logger,
    clockSkewMs:
      given.clockSkewMs === false
        ? undefined
        : (checkNumber('clockSkewMs', given.clockSkewMs, { min: 0, max: 60_000 }) ?? DEFAULT_CLOCK_SKEW_MS),
    admission: resolveAdmission<Call>(given.admission),
  };
}
