/**
 * The patch {@link withDeadline} puts on one channel: its options, and the channel's own methods as they were, which
 * the patched ones call — and `request()` too, whose replies are not messages for the app's consumers.
 */
import type { DriverPatch } from '@deadline/core/internal';
import type { AmqpMessage, AmqpPublishOptions, OnMessage } from './amqp-types.js';
import type { Delivery } from './delivery.js';
import type { ResolvedAmqpOptions } from './options.js';

/** A channel's methods, as amqplib's `Channel` and amqp-connection-manager's `ChannelWrapper` both have them. @internal */
export interface ChannelMethods {
  publish(
    exchange: string,
    routingKey: string,
    content: unknown,
    options?: AmqpPublishOptions,
    ...rest: unknown[]
  ): unknown;
  sendToQueue(queue: string, content: unknown, options?: AmqpPublishOptions, ...rest: unknown[]): unknown;
  consume(
    queue: string,
    onMessage: OnMessage,
    options?: { noAck?: boolean },
    ...rest: unknown[]
  ): Promise<{ consumerTag: string }>;
  ack(message: AmqpMessage, allUpTo?: boolean): void;
  nack(message: AmqpMessage, allUpTo?: boolean, requeue?: boolean): void;
  reject?: ((message: AmqpMessage, requeue?: boolean) => void) | undefined;
  ackAll?: (() => void) | undefined;
  nackAll?: ((requeue?: boolean) => void) | undefined;
  /** amqp-connection-manager's: its `publish()` answers with a promise. */
  addSetup?: unknown;
}

/** @internal */
export interface ChannelPatch extends DriverPatch<ResolvedAmqpOptions> {
  /** The channel's methods before the patch, bound to it. */
  readonly originals: ChannelMethods;
  /** Messages whose handler returned no promise and that are not settled yet: settling one ends its handler. */
  readonly open: Map<AmqpMessage, Delivery>;
  /** Whether `publish()` runs inside `sendToQueue()`'s (amqplib's calls it): the message is already prepared. */
  sending: boolean;
}

/** Where a bounded channel keeps its patch. @internal */
export const PATCH = Symbol.for('@deadline/amqp.withDeadline');

/** The patch on `channel`, while it is bounded. @internal */
export function patchOf(channel: object): ChannelPatch | undefined {
  const patch = (channel as { [PATCH]?: ChannelPatch })[PATCH];
  return patch?.enabled === true ? patch : undefined;
}
