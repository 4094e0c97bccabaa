/**
 * The options of a channel bounded by {@link withDeadline}, checked once when it is bounded: every error names the
 * option and the value received. Consuming takes the RPC servers' options (a message is a call its publisher
 * makes); publishing, the outgoing limits every client adapter takes, under `publish`.
 */

import { InvalidArgumentError } from '@deadline/core';
import {
  checkObject,
  type IncomingCallOptions,
  type OutgoingLimits,
  type ResolvedIncomingOptions,
  type ResolvedOutgoingLimits,
  resolveIncomingOptions,
  resolveOutgoingLimits,
} from '@deadline/core/internal';
import { type BudgetParser, createBudgetParser } from '@deadline/core/wire';
import type { AmqpMessage } from './amqp-types.js';

/**
 * Options of {@link withDeadline}: the consumer's (the RPC servers' — `serviceName`, `defaultMs`, `maxMs`, `minMs`,
 * `headers`, `trust`, `cancelOnEnd`, `logger`, `clockSkewMs` — and `expired`) and the publisher's (`publish`).
 *
 * @example
 * ```ts
 * const options: AmqpDeadlineOptions = {
 *   serviceName: 'inventory',
 *   defaultMs: 5_000,
 *   clockSkewMs: 25,
 *   expired: 'dead-letter',
 *   publish: { marginMs: 20 },
 * };
 * ```
 */
export interface AmqpDeadlineOptions extends IncomingCallOptions<AmqpMessage> {
  /**
   * What happens to a message whose budget is gone when it arrives (its handler is not run): `'drop'` acknowledges
   * it, `'dead-letter'` rejects it without requeueing (the queue's dead-letter exchange gets it, if it has one).
   * Default `'drop'`.
   */
  expired?: 'drop' | 'dead-letter' | undefined;
  /**
   * Bounds of the requests this channel publishes: `marginMs` kept back from the remaining time and `minMs` below which
   * a request is not published (its `publish()`/`sendToQueue()` with a `replyTo`, and `request()`); for `request()`
   * also `defaultMs`, how long it waits outside any deadline, and a `circuitBreaker` that may refuse it.
   */
  publish?: OutgoingLimits | undefined;
}

/** @internal */
export interface ResolvedAmqpOptions {
  /** Of the messages its consumers receive (an event's deadline is the core's rule: `awaited: false`). */
  messages: ResolvedIncomingOptions<AmqpMessage>;
  parser: BudgetParser;
  expired: 'drop' | 'dead-letter';
  publish: ResolvedOutgoingLimits;
}

/** @internal */
export function resolveAmqpOptions(options: AmqpDeadlineOptions | undefined): ResolvedAmqpOptions {
  const given = (checkObject('options', options) ?? {}) as AmqpDeadlineOptions;
  const messages = resolveIncomingOptions<AmqpMessage>(given);
  const expired = given.expired ?? 'drop';
  if (expired !== 'drop' && expired !== 'dead-letter') {
    throw new InvalidArgumentError('expired', "'drop' or 'dead-letter'", expired);
  }
  return {
    messages,
    parser: createBudgetParser({ dialects: messages.dialects }),
    expired,
    publish: resolveOutgoingLimits(checkObject('publish', given.publish) as OutgoingLimits | undefined),
  };
}
