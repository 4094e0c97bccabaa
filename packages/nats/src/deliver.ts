/**
 * A wrapped connection's subscriptions: each message reaches the app's callback inside its own context
 * (arrival.ts), and one that arrived with no time left does not reach it at all. The callback keeps its shape: the
 * same arguments, and what it returned (a promise that no longer rejects with this package's deadline errors).
 */
import { Arrival } from './arrival.js';
import type { NatsCallback, NatsMsgLike } from './nats-types.js';
import type { ResolvedNatsOptions } from './options.js';

/** `callback`, as the messages of a subscription to `subject` reach it. @internal */
export function deliverTo(callback: NatsCallback, subject: string, options: ResolvedNatsOptions): NatsCallback {
  return function deliverWithDeadline(error, msg) {
    // An error (the subscription's timeout, a permission refused) has no message to run in a context.
    if (error !== null) return callback(error, msg);
    return deliver(msg, subject, options, (arrived) => callback(null, arrived));
  };
}

/** Runs `handler` for `msg` in its context, unless it arrived with no time left. @internal */
export function deliver(
  msg: NatsMsgLike,
  subject: string,
  options: ResolvedNatsOptions,
  handler: (msg: NatsMsgLike) => unknown,
): unknown {
  const arrival = new Arrival(msg, subject, options);
  if (!arrival.admitted()) return undefined;
  let result: unknown;
  try {
    result = arrival.incoming.context.run(handler, msg);
  } catch (error) {
    arrival.finish(error);
    throw error;
  }
  return arrival.settle(result);
}
