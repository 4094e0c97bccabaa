/**
 * What a bounded channel's `publish()` and `sendToQueue()` add to a message, by what the message is:
 *
 * - **A request** — it names a `replyTo`: its publisher waits for the answer. Inside a deadline context it carries the
 *   remaining budget (`x-request-deadline`, less `marginMs`), the same deadline on the publisher's wall clock
 *   (`x-request-deadline-at`, for the consumer to learn how long it waited) and the trace, and expires in the broker
 *   when that budget runs out (`expiration`; the app's own, if shorter, stands): a queue never hands a consumer a
 *   request nobody waits for. With too little left it is not published: `DeadlineExceededError` (`before-call`).
 * - **An answer** to the message whose handler runs now (to its `replyTo`): sent only within that message's
 *   deadline; after it, dropped and counted (`late-answer`) — its caller has stopped waiting.
 * - **Anything else** is an event, which outlives the request that published it (as a queued job does): it carries
 *   the trace, never the deadline.
 *
 * Headers the app set itself are kept, but for the budget of a request, which is the context's to say.
 */
import { type DeadlineExceededError, prepareCall } from '@deadline/core';
import { addTraceHeaders, publishMessageDropped, storage } from '@deadline/core/internal';
import { formatDeadlineAt, REQUEST_DEADLINE_AT_HEADER } from '@deadline/core/wire';
import type { AmqpPublishOptions } from './amqp-types.js';
import { deliveryOf } from './delivery.js';
import type { ResolvedAmqpOptions } from './options.js';

/** What a publish is to be given, or why it is not made. */
export type Prepared =
  | { send: true; options: AmqpPublishOptions | undefined }
  | { send: false; refusal: DeadlineExceededError | undefined };

/** A publish left as the app made it. */
const AS_IS: Prepared = { send: true, options: undefined };

/**
 * The options to publish a message to `exchange`/`routingKey` with, in the current context: see the header comment.
 * `{ send: false }` with a refusal: too little time left for a request; without: a late answer, dropped.
 * @internal
 */
export function preparePublish(
  exchange: string,
  routingKey: string,
  options: AmqpPublishOptions | undefined,
  resolved: ResolvedAmqpOptions,
): Prepared {
  const scope = storage.getStore();
  if (scope === undefined) return AS_IS;
  const replyTo = options?.replyTo;
  if (typeof replyTo === 'string' && replyTo !== '') return request(exchange, routingKey, options, resolved);
  const delivery = deliveryOf(scope);
  if (delivery?.answers(exchange, routingKey) === true) {
    if (delivery.tooLate()) {
      // Named by the queue its message came from, as its line is: the reply queue is the caller's.
      publishMessageDropped({ protocol: 'amqp', target: delivery.queue, reason: 'late-answer', hop: scope.hop });
      return { send: false, refusal: undefined };
    }
    delivery.answered = true;
  }
  const trace = addTraceHeaders(scope, {});
  if (trace.traceparent === undefined) return AS_IS;
  return { send: true, options: { ...options, headers: { ...trace, ...options?.headers } } };
}

function request(
  exchange: string,
  routingKey: string,
  options: AmqpPublishOptions | undefined,
  resolved: ResolvedAmqpOptions,
): Prepared {
  let prepared: ReturnType<typeof prepareCall>;
  try {
    prepared = prepareCall(targetOf(exchange, routingKey), resolved.publish.callOptions);
  } catch (refusal) {
    return { send: false, refusal: refusal as DeadlineExceededError };
  }
  const { timeoutMs, headers } = prepared;
  if (timeoutMs === undefined) {
    // A context without a deadline (one made by withoutCancel, say): the trace only.
    return headers.traceparent === undefined
      ? { send: true, options }
      : { send: true, options: { ...options, headers: { ...headers, ...options?.headers } } };
  }
  return {
    send: true,
    options: {
      ...options,
      expiration: expirationWithin(timeoutMs, options?.expiration),
      headers: { ...options?.headers, ...headers, [REQUEST_DEADLINE_AT_HEADER]: formatDeadlineAt(timeoutMs) },
    },
  };
}

/** A message's destination as its events and lines name it: the queue, or `exchange/routingKey`. */
export function targetOf(exchange: string, routingKey: string): string {
  return exchange === '' ? routingKey : `${exchange}/${routingKey}`;
}

/** A request's `expiration` (ms, as text): its budget, or the app's own if that is shorter. @internal */
export function expirationWithin(timeoutMs: number, own: string | number | undefined): string | number {
  const ownMs = Number(own);
  return own !== undefined && own !== '' && ownMs >= 0 && ownMs <= timeoutMs ? own : String(Math.floor(timeoutMs));
}
