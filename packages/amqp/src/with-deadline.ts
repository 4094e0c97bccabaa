/**
 * Bounding one channel, in place: its `publish()`/`sendToQueue()` carry what each message needs (publish.ts), its
 * consumers' handlers run inside each message's context (consume.ts), its acknowledgements end those handlers.
 * In place, because the channel is the object everyone holds — the app, amqp-connection-manager, a framework's
 * transport — and undoable, as the database adapters' patches are (core's `patchOnce`).
 */
import { InvalidArgumentError } from '@deadline/core';
import { patchOnce, replaceMethods } from '@deadline/core/internal';
import type { AmqpChannelLike, AmqpMessage, AmqpPublishOptions, OnMessage } from './amqp-types.js';
import { type ChannelMethods, type ChannelPatch, PATCH } from './channel-patch.js';
import { deliverTo, settled } from './consume.js';
import { type AmqpDeadlineOptions, resolveAmqpOptions } from './options.js';
import { type Prepared, preparePublish } from './publish.js';

/**
 * Bounds `channel` — amqplib's `Channel` or `ConfirmChannel`, or amqp-connection-manager's `ChannelWrapper` — in
 * place, and returns it:
 *
 * - a message published with a `replyTo` inside a deadline context carries the remaining budget, the trace, and an
 *   `expiration` at that budget (the broker drops it when nobody waits any more); it is not published with too little
 *   left (`DeadlineExceededError`, thrown — or the promise rejected, for a `ChannelWrapper`); an answer to the message
 *   being handled is sent only within that message's deadline; anything else carries the trace only;
 * - each message a consumer receives is handled inside a context re-anchored on its arrival from the budget it
 *   carries, less the time it surely waited in the broker; one that arrives with no time left is not handled
 *   (acknowledged, or dead-lettered), but counted (`deadline:message:dropped`) and logged.
 *
 * Outside a deadline context publishing changes nothing. Calling it again changes the options;
 * {@link withoutDeadline} undoes it.
 *
 * @example
 * ```ts
 * import amqp from 'amqplib';
 * import { withDeadline } from '@deadline/amqp';
 *
 * const connection = await amqp.connect('amqp://localhost');
 * const channel = withDeadline(await connection.createChannel(), { serviceName: 'inventory', logger });
 * await channel.consume('reserve', async (message) => {
 *   // Inside the budget the publisher had left: a query past it is cancelled on the server.
 *   await db.query('UPDATE stock SET held = held + 1 WHERE sku = $1', [message.content.toString()]);
 *   channel.ack(message);
 * });
 * ```
 */
export function withDeadline<Channel extends AmqpChannelLike>(
  channel: Channel,
  options?: AmqpDeadlineOptions,
): Channel {
  const methods = channel as unknown as ChannelMethods;
  for (const name of ['publish', 'sendToQueue', 'consume', 'ack', 'nack'] as const) {
    if (typeof methods?.[name] !== 'function') {
      throw new InvalidArgumentError(
        'channel',
        "an amqplib channel or amqp-connection-manager's ChannelWrapper",
        channel,
      );
    }
  }
  const resolved = resolveAmqpOptions(options);
  patchOnce<typeof resolved, ChannelPatch>(channel, PATCH, resolved, (patch) => install(methods, patch), {
    originals: originalsOf(methods),
    open: new Map(),
    sending: false,
  });
  return channel;
}

/**
 * Undoes {@link withDeadline} on `channel`: its methods are its own again (those of a patch someone made on top stay,
 * ours passing everything through). Handlers already running keep their contexts until they end.
 *
 * @example
 * ```ts
 * withoutDeadline(channel);
 * ```
 */
export function withoutDeadline(channel: AmqpChannelLike): void {
  (channel as { [PATCH]?: ChannelPatch })[PATCH]?.undo();
}

function originalsOf(channel: ChannelMethods): ChannelMethods {
  const bind = <F>(method: F | undefined): F | undefined =>
    typeof method === 'function' ? (method.bind(channel) as F) : undefined;
  return {
    publish: channel.publish.bind(channel),
    sendToQueue: channel.sendToQueue.bind(channel),
    consume: channel.consume.bind(channel),
    ack: channel.ack.bind(channel),
    nack: channel.nack.bind(channel),
    reject: bind(channel.reject),
    ackAll: bind(channel.ackAll),
    nackAll: bind(channel.nackAll),
    addSetup: channel.addSetup,
  };
}

function install(channel: ChannelMethods, patch: ChannelPatch): () => boolean {
  const { originals } = patch;
  const promises = typeof channel.addSetup === 'function';
  const replacements: Record<string, unknown> = {
    publish(exchange: string, routingKey: string, content: unknown, options?: AmqpPublishOptions, ...rest: unknown[]) {
      if (!patch.enabled || patch.sending) return originals.publish(exchange, routingKey, content, options, ...rest);
      const prepared = preparePublish(exchange, routingKey, options, patch.options);
      if (!prepared.send) return notSent(prepared, promises, rest);
      return originals.publish(exchange, routingKey, content, prepared.options ?? options, ...rest);
    },
    sendToQueue(queue: string, content: unknown, options?: AmqpPublishOptions, ...rest: unknown[]) {
      if (!patch.enabled) return originals.sendToQueue(queue, content, options, ...rest);
      const prepared = preparePublish('', queue, options, patch.options);
      if (!prepared.send) return notSent(prepared, promises, rest);
      // amqplib's sendToQueue() publishes through this.publish(): the message is ready, not to be prepared twice.
      patch.sending = true;
      try {
        return originals.sendToQueue(queue, content, prepared.options ?? options, ...rest);
      } finally {
        patch.sending = false;
      }
    },
    consume(queue: string, onMessage: OnMessage, options?: { noAck?: boolean }, ...rest: unknown[]) {
      if (typeof onMessage !== 'function') return originals.consume(queue, onMessage, options, ...rest);
      return originals.consume(queue, deliverTo(patch, queue, onMessage, options?.noAck === true), options, ...rest);
    },
    ack(message: AmqpMessage, allUpTo?: boolean) {
      originals.ack(message, allUpTo);
      settled(patch, message, allUpTo);
    },
    nack(message: AmqpMessage, allUpTo?: boolean, requeue?: boolean) {
      originals.nack(message, allUpTo, requeue);
      settled(patch, message, allUpTo);
    },
  };
  if (originals.reject !== undefined) {
    const reject = originals.reject;
    replacements.reject = (message: AmqpMessage, requeue?: boolean) => {
      reject(message, requeue);
      settled(patch, message);
    };
  }
  if (originals.ackAll !== undefined) {
    const ackAll = originals.ackAll;
    replacements.ackAll = () => {
      ackAll();
      settled(patch, undefined);
    };
  }
  if (originals.nackAll !== undefined) {
    const nackAll = originals.nackAll;
    replacements.nackAll = (requeue?: boolean) => {
      nackAll(requeue);
      settled(patch, undefined);
    };
  }
  return replaceMethods(channel, replacements);
}

/**
 * A publish not made: a request with too little time left fails as the channel fails a publish (thrown; the promise
 * rejected, and `done` called, for a `ChannelWrapper`). A late answer is dropped quietly: to the handler that sent it,
 * it went, as it would have had the broker dropped it.
 */
function notSent(prepared: Prepared & { send: false }, promises: boolean, rest: unknown[]): unknown {
  const done = rest.find((argument) => typeof argument === 'function') as ((error: unknown) => void) | undefined;
  const { refusal } = prepared;
  if (refusal === undefined) {
    done?.(null);
    return promises ? Promise.resolve(true) : true;
  }
  if (!promises) throw refusal;
  const failed = Promise.reject(refusal);
  if (done !== undefined) {
    // Told through its callback: the promise is the app's to ignore, as amqp-connection-manager's is.
    failed.catch(() => {});
    done(refusal);
  }
  return failed;
}
