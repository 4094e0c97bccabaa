/** grpc-js types it does not export under these names, and the server call this package's options are shown. */
import type {
  ChannelInterface,
  ServerDuplexStream,
  ServerReadableStream,
  ServerUnaryCall,
  ServerWritableStream,
} from '@grpc/grpc-js';

/** The call a channel creates (grpc-js's `Call` in call-interface, not the client call union it exports). */
export type ChannelCall = ReturnType<ChannelInterface['createCall']>;
/** grpc-js's `Deadline`: a `Date` or epoch ms; `Infinity` for none. */
export type GrpcDeadline = Parameters<ChannelInterface['createCall']>[1];
/** The listener a channel call reports to. */
export type CallListener = Parameters<ChannelCall['start']>[1];

/** Milliseconds from now until `deadline` (`Infinity` for none). */
export function msUntil(deadline: GrpcDeadline): number {
  // No deadline (grpc-js's default, the common case): no clock to read.
  if (deadline === Number.POSITIVE_INFINITY) return deadline;
  const at = deadline instanceof Date ? deadline.getTime() : deadline;
  return at - Date.now();
}

/**
 * Any server call a handler receives, as the `trust` option of {@link deadlineService} sees it: each has
 * `metadata`, `getDeadline()`, `getPeer()`, `cancelled` and the `'cancelled'` event.
 *
 * @example
 * ```ts
 * const trust = (call: GrpcServerCall) => call.getPeer().startsWith('10.');
 * ```
 */
export type GrpcServerCall =
  | ServerUnaryCall<unknown, unknown>
  | ServerReadableStream<unknown, unknown>
  | ServerWritableStream<unknown, unknown>
  | ServerDuplexStream<unknown, unknown>;
