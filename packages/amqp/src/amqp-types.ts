/**
 * The shapes read here of amqplib's (0.10 to 2.x) and amqp-connection-manager's (4, 5) objects — structural, so that
 * either library's channel is bounded and neither is loaded by this package.
 */

/**
 * A message as a consumer receives it (amqplib's `ConsumeMessage`).
 *
 * @example
 * ```ts
 * const trust = (message: AmqpMessage) => message.properties.appId === 'gateway';
 * ```
 */
export interface AmqpMessage {
  content: Buffer;
  fields: { deliveryTag: number };
  properties: {
    headers?: Record<string, unknown> | undefined;
    replyTo?: unknown;
    correlationId?: unknown;
  };
}

/**
 * What a publish is given (amqplib's `Options.Publish`), as far as this package reads or writes it.
 *
 * @example
 * ```ts
 * const options: AmqpPublishOptions = { replyTo: 'amq.rabbitmq.reply-to', correlationId: '7' };
 * ```
 */
export interface AmqpPublishOptions {
  headers?: Record<string, unknown> | undefined;
  expiration?: string | number | undefined;
  replyTo?: string | undefined;
  correlationId?: string | undefined;
  [option: string]: unknown;
}

/**
 * A consumer's callback: `null` when the broker cancelled the consumer.
 *
 * @example
 * ```ts
 * const onMessage: OnMessage = (message) => {
 *   if (message !== null) console.log(message.content.toString());
 * };
 * ```
 */
export type OnMessage = (message: AmqpMessage | null) => unknown;

/**
 * A channel {@link withDeadline} bounds: amqplib's `Channel` or `ConfirmChannel`, or amqp-connection-manager's
 * `ChannelWrapper` (whose `publish` returns a promise, and which re-creates its consumers after a reconnect).
 *
 * @example
 * ```ts
 * const channel: AmqpChannelLike = await connection.createChannel();
 * ```
 */
export interface AmqpChannelLike {
  publish(exchange: string, routingKey: string, content: never, options?: never, ...rest: never[]): unknown;
  sendToQueue(queue: string, content: never, options?: never, ...rest: never[]): unknown;
  consume(queue: string, onMessage: never, options?: never): Promise<{ consumerTag: string }>;
  ack(message: never, allUpTo?: boolean): void;
  nack(message: never, allUpTo?: boolean, requeue?: boolean): void;
}
