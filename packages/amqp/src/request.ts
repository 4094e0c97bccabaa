/**
 * RabbitMQ's request/reply (RPC) inside the caller's budget, over direct reply-to: no reply queue to declare, and the
 * broker drops a request nobody waits for (its `expiration`) as well as a reply nobody consumes. The request carries
 * the remaining budget like any other (publish.ts); the caller waits no longer than it, and a reply that comes after
 * is dropped and counted (`late-reply`) — a queue of stale answers would be dead work too.
 */
import { randomUUID } from 'node:crypto';
import {
  OutgoingCall,
  publishMessageDropped,
  type ResolvedOutgoingLimits,
  resolveOutgoingLimits,
  storage,
  tableHeaders,
} from '@deadline/core/internal';
import {
  DEADLINE_EXCEEDED_BY_HEADER,
  formatDeadlineAt,
  parseExceededBy,
  REQUEST_DEADLINE_AT_HEADER,
} from '@deadline/core/wire';
import type { AmqpChannelLike, AmqpMessage, AmqpPublishOptions } from './amqp-types.js';
import { type ChannelMethods, patchOf } from './channel-patch.js';
import { expirationWithin, targetOf } from './publish.js';

/** RabbitMQ's pseudo-queue for direct reply-to. */
const DIRECT_REPLY_TO = 'amq.rabbitmq.reply-to';
/** How many given-up requests are remembered, to tell a late reply from a stray one. */
const REMEMBERED = 10_000;
const UNBOUNDED: ResolvedOutgoingLimits = resolveOutgoingLimits(undefined);

/**
 * Options of {@link request}: those of a publish, the exchange (default: the default exchange, `routingKey` then being
 * the queue), and `replyTo`, the queue the replies come to (default: direct reply-to, `amq.rabbitmq.reply-to`).
 *
 * @example
 * ```ts
 * const options: AmqpRequestOptions = { exchange: 'rpc', contentType: 'application/json', replyTo: 'orders.replies' };
 * ```
 */
export interface AmqpRequestOptions extends AmqpPublishOptions {
  exchange?: string | undefined;
  /**
   * A queue of the caller's own for the replies (declared by the app, exclusive to this channel's connection), in
   * place of direct reply-to. Its consumer is made on the first request, with `noAck`.
   */
  replyTo?: string | undefined;
}

interface Pending {
  resolve(message: AmqpMessage): void;
  reject(error: unknown): void;
}

/** One channel's direct reply-to consumer and the requests waiting on it. */
class Replies {
  readonly ready: Promise<unknown>;
  readonly #pending = new Map<string, Pending>();
  /** Requests given up on, by correlation id: their target and hop, for the event of a reply that comes after all. */
  readonly #abandoned = new Map<string, { target: string; hop: string | undefined }>();

  constructor(channel: ChannelMethods & { once?(event: string, listener: () => void): unknown }, queue: string) {
    this.ready = channel.consume(queue, (message) => this.#arrived(message), { noAck: true });
    // A failed consume leaves `ready` rejected for the requests that wait on it, and nobody else.
    this.ready.catch(() => {});
    channel.once?.('close', () => this.#closed());
  }

  expect(correlationId: string): Promise<AmqpMessage> {
    return new Promise((resolve, reject) => this.#pending.set(correlationId, { resolve, reject }));
  }

  abandon(correlationId: string, target: string, hop: string | undefined): void {
    if (!this.#pending.delete(correlationId)) return;
    this.#abandoned.set(correlationId, { target, hop });
    if (this.#abandoned.size > REMEMBERED) this.#abandoned.delete(this.#abandoned.keys().next().value as string);
  }

  #arrived(message: AmqpMessage | null): void {
    const correlationId = message?.properties.correlationId;
    if (message === null || typeof correlationId !== 'string') return;
    const pending = this.#pending.get(correlationId);
    if (pending !== undefined) {
      this.#pending.delete(correlationId);
      pending.resolve(message);
      return;
    }
    const abandoned = this.#abandoned.get(correlationId);
    if (abandoned === undefined) return;
    this.#abandoned.delete(correlationId);
    publishMessageDropped({ protocol: 'amqp', target: abandoned.target, reason: 'late-reply', hop: abandoned.hop });
  }

  #closed(): void {
    const error = new Error('@deadline/amqp: the channel closed before the reply came');
    for (const pending of this.#pending.values()) pending.reject(error);
    this.#pending.clear();
  }
}

/** Each channel's reply consumers, by the queue they consume. */
const repliesByChannel = new WeakMap<object, Map<string, Replies>>();

/**
 * Sends `content` to `routingKey` (a queue, or a routing key of `options.exchange`) and waits for the one reply, over
 * direct reply-to (or the app's own reply queue, `options.replyTo`), matched by correlation id. Inside a deadline context the request carries the remaining budget (less the channel's
 * `publish.marginMs`) and expires in the broker with it, is not sent with too little left, and the wait ends at the
 * deadline with a `DeadlineExceededError` saying whose it was; a server that answers its own deadline
 * (`x-deadline-exceeded-by`) fails it with that hop's. Outside a context it waits as long as the channel's
 * `publish.defaultMs`, or for ever. Resolves with the reply message.
 *
 * @example
 * ```ts
 * import { request } from '@deadline/amqp';
 *
 * app.get('/stock/:sku', async (req) => {
 *   const reply = await request(channel, 'stock', Buffer.from(req.params.sku));
 *   return JSON.parse(reply.content.toString());
 * });
 * ```
 */
export async function request(
  channel: AmqpChannelLike,
  routingKey: string,
  content: Buffer,
  options?: AmqpRequestOptions,
): Promise<AmqpMessage> {
  const methods = patchOf(channel)?.originals ?? (channel as unknown as ChannelMethods);
  const limits = patchOf(channel)?.options.publish ?? UNBOUNDED;
  const { exchange = '', replyTo = DIRECT_REPLY_TO, ...publishOptions } = options ?? {};
  const target = targetOf(exchange, routingKey);
  const call = OutgoingCall.start(
    target,
    { ...limits.callOptions, propagates: true },
    limits.guard,
    storage.getStore(),
  );
  let byQueue = repliesByChannel.get(channel);
  if (byQueue === undefined) repliesByChannel.set(channel, (byQueue = new Map()));
  let replies = byQueue.get(replyTo);
  if (replies === undefined) byQueue.set(replyTo, (replies = new Replies(methods, replyTo)));
  const correlationId = publishOptions.correlationId ?? randomUUID();
  const waiting = replies;
  try {
    const reply = await call.race(async () => {
      await waiting.ready;
      const answer = waiting.expect(correlationId);
      const { timeoutMs } = call;
      await methods.publish(exchange, routingKey, content, {
        ...publishOptions,
        replyTo,
        correlationId,
        headers: {
          ...publishOptions.headers,
          ...call.headers,
          ...(timeoutMs === undefined ? {} : { [REQUEST_DEADLINE_AT_HEADER]: formatDeadlineAt(timeoutMs) }),
        },
        ...(timeoutMs === undefined ? {} : { expiration: expirationWithin(timeoutMs, publishOptions.expiration) }),
      });
      return answer;
    });
    const exceededBy = parseExceededBy(tableHeaders(reply.properties.headers).get(DEADLINE_EXCEEDED_BY_HEADER));
    if (exceededBy !== undefined) throw call.downstreamExceeded(exceededBy);
    call.end();
    return reply;
  } catch (error) {
    waiting.abandon(correlationId, target, call.hop);
    call.end(error);
    throw error;
  }
}
