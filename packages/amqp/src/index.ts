/**
 * `@deadline/amqp`: RabbitMQ (amqplib, amqp-connection-manager) inside one request budget. A request message carries
 * the remaining budget and the trace and expires in the broker when nobody waits any more; a consumer handles each
 * message inside what is left of it; RPC replies come within the caller's budget or are dropped; events carry the
 * trace only. Guide: docs/guides/messaging.md.
 */
export type { AmqpChannelLike, AmqpMessage, AmqpPublishOptions, OnMessage } from './amqp-types.js';
export type { AmqpDeadlineOptions } from './options.js';
export { type AmqpRequestOptions, request } from './request.js';
export { withDeadline, withoutDeadline } from './with-deadline.js';
