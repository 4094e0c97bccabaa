/**
 * `@deadline/connect` — Connect-ES v2 under the request deadline. Clients: {@link withDeadline} wraps a transport so
 * that every call is bounded by the remaining budget, refused locally without time left and aborted when the
 * request stops. Servers: {@link deadlineInterceptor} runs each handler in the deadline context of its call.
 * {@link toConnectError} and {@link fromConnectError} map between Connect errors and the typed errors.
 * @packageDocumentation
 */

export type { ConnectClientDeadlineOptions } from './client-options.js';
export { fromConnectError, toConnectError } from './errors.js';
export { type ConnectRequest, type ConnectServerDeadlineOptions, deadlineInterceptor } from './interceptor.js';
export { withDeadline } from './with-deadline.js';
