/**
 * `@deadline/grpc` — `@grpc/grpc-js` under the request deadline. Clients: {@link withDeadline} (or a
 * {@link DeadlineChannel}) bounds every call by the remaining budget, refuses it locally without time left and
 * cancels it when the request stops. Servers: {@link deadlineService} runs each handler in the deadline context of
 * its call. {@link toGrpcStatus} and {@link fromGrpcStatus} map between gRPC statuses and the typed errors.
 * @packageDocumentation
 */

export type { GrpcClientDeadlineOptions } from './client-options.js';
export { DeadlineChannel } from './deadline-channel.js';
export type { GrpcServerCall } from './grpc-types.js';
export { deadlineService, type GrpcServerDeadlineOptions } from './service.js';
export { fromGrpcStatus, type GrpcStatusLike, toGrpcStatus } from './status.js';
export { withDeadline } from './with-deadline.js';
