/**
 * How an outgoing call is named in errors, events and log lines: method, origin and path — never the query
 * string, which often carries tokens and personal data.
 */

/**
 * The parts of an outgoing request a target name is made from.
 *
 * @example
 * ```ts
 * const target = ({ method, origin }: TargetRequest) => `${method} ${new URL(origin).hostname}`;
 * ```
 */
export interface TargetRequest {
  method: string;
  /** `http://host:port` */
  origin: string;
  /** The request path; through undici it is as sent, query string included — strip it before logging. */
  path: string;
}

/**
 * The default target name: `GET http://inventory:8080/stock/42` (query string and fragment dropped).
 *
 * @example
 * ```ts
 * describeTarget({ method: 'GET', origin: 'http://inventory:8080', path: '/stock?id=42' });
 * // 'GET http://inventory:8080/stock'
 * ```
 */
export function describeTarget(request: TargetRequest): string {
  const path = request.path;
  // A request path holds no fragment; the query string starts at the first '?'.
  const end = path.indexOf('?');
  return `${request.method} ${request.origin}${end === -1 ? path : path.slice(0, end)}`;
}

/** undici's `origin` may be a string or a URL; its `path` is always a string. @internal */
export function originOf(origin: string | URL | undefined): string {
  if (origin === undefined) return '';
  if (typeof origin !== 'string') return origin.origin;
  let end = origin.length;
  while (end > 0 && origin.charCodeAt(end - 1) === 47 /* '/' */) end--;
  return end === origin.length ? origin : origin.slice(0, end);
}
