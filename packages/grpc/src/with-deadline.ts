/** A client's constructor options with its channel wrapped in a {@link DeadlineChannel}. */

import { resolveOutgoingLimits } from '@deadline/core/internal';
import { Channel, type ClientOptions } from '@grpc/grpc-js';
import type { GrpcClientDeadlineOptions } from './client-options.js';
import { DeadlineChannel } from './deadline-channel.js';

/**
 * Returns `clientOptions` with the client's channel wrapped in a {@link DeadlineChannel}: every call the client
 * makes inside a deadline context is bounded by it, refused locally with `DEADLINE_EXCEEDED` when no time is left,
 * and cancelled when the context stops — whatever interceptors the client or the call has. A `channelOverride` or
 * `channelFactoryOverride` already in the options is wrapped in turn. Options are checked here, once.
 *
 * @example
 * ```ts
 * import { credentials } from '@grpc/grpc-js';
 * import { withDeadline } from '@deadline/grpc';
 * const inventory = new InventoryClient('inventory:50051', credentials.createInsecure(), withDeadline({}, { marginMs: 20 }));
 * // inside a request: the call gets min(its own deadline, remaining − 20 ms)
 * inventory.reserve({ sku: 'A1' }, (err, reply) => {});
 * ```
 */
export function withDeadline(clientOptions: ClientOptions = {}, options?: GrpcClientDeadlineOptions): ClientOptions {
  resolveOutgoingLimits(options);
  const { channelOverride, channelFactoryOverride, ...rest } = clientOptions;
  if (channelOverride !== undefined) return { ...rest, channelOverride: new DeadlineChannel(channelOverride, options) };
  return {
    ...rest,
    channelFactoryOverride: (address, credentials, channelOptions) =>
      new DeadlineChannel(
        channelFactoryOverride?.(address, credentials, channelOptions) ??
          new Channel(address, credentials, channelOptions),
        options,
      ),
  };
}
