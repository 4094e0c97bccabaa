/**
 * The `admission` option, as every server that offers it takes it (the HTTP adapters, gRPC, Connect): checked once
 * when the server is set up, every error naming the option and the value received.
 */

import { Admission } from './admission.js';
import { InvalidArgumentError } from './errors.js';
import { checkFunction, checkNumber } from './validate.js';

/**
 * The `admission` option of a server, when an object (`true` takes every default); `Req` is what `exempt` is shown
 * (an HTTP request, a gRPC server call, a Connect request).
 *
 * @example
 * ```ts
 * app.register(fastifyDeadline, {
 *   serviceName: 'orders',
 *   admission: { exempt: (request) => request.url === '/health' },
 * });
 * ```
 */
export interface AdmissionOptions<Req> {
  /**
   * The percentile of a route's time that a request must have left, beside the server's queue, to be let in while
   * the server is loaded (0.5 … 0.999). Higher refuses more under load and lets fewer admitted requests miss.
   * Default 0.9.
   */
  quantile?: number | undefined;
  /**
   * Requests never refused (health checks, a load balancer's probes). Long-lived requests and streaming calls never
   * are either. A throwing predicate counts as exempt. Default: none.
   */
  exempt?: ((req: Req) => boolean) | undefined;
}

/** The `admission` option after checking. @internal */
export interface ResolvedAdmission<Req> {
  readonly engine: Admission;
  readonly exempt: ((req: Req) => boolean) | undefined;
}

/**
 * Checks the `admission` option: `undefined` when admission is off.
 * @internal
 */
export function resolveAdmission<Req>(value: unknown): ResolvedAdmission<Req> | undefined {
  if (value === undefined || value === false) return undefined;
  if (value === true) return { engine: new Admission(), exempt: undefined };
  if (typeof value !== 'object' || value === null || Array.isArray(value)) {
    throw new InvalidArgumentError('admission', 'true, false or an object', value);
  }
  const given = value as AdmissionOptions<Req>;
  const quantile = checkNumber('admission.quantile', given.quantile, { min: 0.5, max: 0.999 }) ?? 0.9;
  return {
    engine: new Admission(quantile),
    exempt: checkFunction<(req: Req) => boolean>('admission.exempt', given.exempt),
  };
}

/**
 * Whether `req` is exempt from admission; a throwing `exempt` counts as exempt, and its error goes to `onError`.
 * @internal
 */
export function isExempt<Req>(admission: ResolvedAdmission<Req>, req: Req, onError: (error: unknown) => void): boolean {
  const exempt = admission.exempt;
  if (exempt === undefined) return false;
  try {
    return exempt(req) === true;
  } catch (error) {
    onError(error);
    return true;
  }
}
