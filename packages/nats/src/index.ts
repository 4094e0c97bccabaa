/**
 * `@deadline/nats` — NATS with the request's deadline: requests carry the remaining budget and the trace in their
 * headers and are bounded by it, handlers run inside the deadline their message brought (less the time it spent on
 * the way), late replies and late answers are dropped and counted; JetStream events carry the trace only.
 * @packageDocumentation
 */
export { DEADLINE_STATUS } from './deadline-answer.js';
export {
  type JetStreamContextOptions,
  type JetStreamLike,
  type JetStreamMsgLike,
  withJetStreamContext,
  withTrace,
} from './jetstream.js';
export type { NatsConnectionLike, NatsHeadersLike, NatsMsgLike } from './nats-types.js';
export type { NatsDeadlineOptions, NatsPublishOptions } from './options.js';
export { type HandleOptions, handle } from './served.js';
export { type DeadlineConnection, type DeadlineSubscriptionOptions, withDeadline } from './with-deadline.js';
