/**
 * A bounded channel's consumers: each message's handler runs inside the message's own context (delivery.ts); one
 * that arrives with no time left is settled without running it — acknowledged, or dead-lettered with `expired:
 * 'dead-letter'` — counted and logged. The app's callbacks keep their shape: the same arguments, the same return
 * value, the app's own acknowledgements.
 */
import { DeadlineExceededError, findDeadlineError } from '@deadline/core';
import type { AmqpMessage, OnMessage } from './amqp-types.js';
import type { ChannelPatch } from './channel-patch.js';
import { Delivery, remember } from './delivery.js';

/** `onMessage`, as the broker's deliveries on a bounded channel reach it. @internal */
export function deliverTo(patch: ChannelPatch, queue: string, onMessage: OnMessage, noAck: boolean): OnMessage {
  return function deliverWithDeadline(message) {
    // null: the broker cancelled the consumer. Undone: the app's callback as it was.
    if (message === null || !patch.enabled) return onMessage(message);
    return deliver(patch, queue, onMessage, noAck, message);
  };
}

function deliver(patch: ChannelPatch, queue: string, onMessage: OnMessage, noAck: boolean, message: AmqpMessage) {
  const options = patch.options;
  const delivery = new Delivery(message, queue, options);
  if (delivery.incoming.refusal !== undefined) {
    delivery.expired(patch.originals.publish);
    if (!noAck) {
      if (options.expired === 'drop') patch.originals.ack(message);
      else patch.originals.nack(message, false, false);
    }
    return undefined;
  }
  remember(delivery);
  // At the deadline, a request not answered yet is told so, naming this hop (its handler's work is stopped meanwhile).
  if (delivery.replyTo !== undefined) {
    delivery.incoming.onStop((reason) => {
      if (reason instanceof DeadlineExceededError) delivery.answerDeadline(patch.originals.publish, reason.hop);
    });
  }
  // Settled while the handler's own call runs (an ack before its first await): noted, its end decided below.
  const open = patch.open;
  open.set(message, delivery);
  let result: unknown;
  try {
    delivery.running = true;
    result = delivery.incoming.context.run(() => onMessage(message));
    delivery.running = false;
  } catch (error) {
    delivery.running = false;
    open.delete(message);
    delivery.finish(error);
    throw error;
  }
  const settledAlready = !open.has(message);
  if (isThenable(result)) {
    open.delete(message);
    // What the callback returns: a promise that fails with the handler's own errors as before (amqplib ignores it,
    // so one is an unhandled rejection, as without this package), but never with a deadline error, which is ours to
    // report (its line, the deadline answer) — not a crash.
    return Promise.resolve(result).then(
      () => delivery.finish(),
      (error: unknown) => {
        delivery.finish(error);
        if (findDeadlineError(error) === undefined) throw error;
      },
    );
  }
  if (noAck || settledAlready) {
    // Nothing else will say when it is done.
    open.delete(message);
    delivery.finish();
  }
  return result;
}

/**
 * The app settled `message` (or, with `allUpTo`, every message up to it; `undefined`: all of them): a handler that
 * returned no promise is done with it.
 * @internal
 */
export function settled(patch: ChannelPatch, message: AmqpMessage | undefined, allUpTo = false): void {
  const { open } = patch;
  if (open.size === 0) return;
  if (message !== undefined && !allUpTo) {
    end(open, message);
    return;
  }
  const upTo = message?.fields.deliveryTag ?? Number.POSITIVE_INFINITY;
  for (const settledMessage of [...open.keys()]) {
    if (settledMessage.fields.deliveryTag <= upTo) end(open, settledMessage);
  }
}

/** `message` settled: its handler is done, unless it is still in its own call (deliver() then decides). */
function end(open: Map<AmqpMessage, Delivery>, message: AmqpMessage): void {
  const delivery = open.get(message);
  if (delivery === undefined) return;
  open.delete(message);
  if (!delivery.running) delivery.finish();
}

function isThenable(value: unknown): value is PromiseLike<unknown> {
  return typeof (value as { then?: unknown } | null)?.then === 'function';
}
