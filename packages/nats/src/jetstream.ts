/**
 * JetStream: a stored message outlives the request that published it, as a queued job does. It carries the trace,
 * never the deadline (which would mean nothing by the time a consumer reads it); the publish's wait for the stream's
 * acknowledgement is the request's own call, bounded like any. A consumer runs each message in a context of its own:
 * the publisher's trace, and the budget the consumer gives it (default none).
 */
import { InvalidArgumentError, runWithContext, traceFrom } from '@deadline/core';
import {
  checkFunction,
  checkHop,
  checkNumber,
  checkObject,
  OutgoingCall,
  storage,
  untilStopped,
} from '@deadline/core/internal';
import { headerSource } from './message-headers.js';
import type { NatsHeadersLike } from './nats-types.js';
import { type NatsPublishOptions, resolvePublishOptions } from './options.js';
import { withTraceHeaders } from './publish-headers.js';

/**
 * The part of a JetStream client (`jetstream(nc)` of `@nats-io/jetstream` 3, or `nc.jetstream()` of `nats` 2.x)
 * {@link withTrace} wraps.
 *
 * @example
 * ```ts
 * import { jetstream } from '@nats-io/jetstream';
 * const js: JetStreamLike = jetstream(nc);
 * ```
 */
export interface JetStreamLike {
  publish(subject: string, payload?: never, options?: never): Promise<unknown>;
}

/**
 * A JetStream message as a consumer gets it (`JsMsg`), as far as {@link withJetStreamContext} reads it.
 *
 * @example
 * ```ts
 * const handler = withJetStreamContext(async (msg: JetStreamMsgLike) => msg.ack());
 * ```
 */
export interface JetStreamMsgLike {
  readonly subject: string;
  readonly headers?: NatsHeadersLike | undefined;
}

/**
 * Options of {@link withJetStreamContext}.
 *
 * @example
 * ```ts
 * const options: JetStreamContextOptions = { serviceName: 'mailer', budgetMs: 30_000 };
 * ```
 */
export interface JetStreamContextOptions {
  /** This consumer's hop name, for logs and errors. Default: none. */
  serviceName?: string | undefined;
  /**
   * Each message's budget, in ms from when the handler starts: its calls are bounded by it, and at its end the
   * handler's promise rejects with a `DeadlineExceededError` (the message is then neither acknowledged nor refused
   * here: JetStream redelivers it after the consumer's `ack_wait`, so keep the budget below it). Default: none.
   */
  budgetMs?: number | undefined;
}

interface PublishOptionsIn {
  headers?: NatsHeadersLike | undefined;
  timeout?: number | undefined;
  [option: string]: unknown;
}

/**
 * JetStream's own timer for the acknowledgement is set this much after the call's: the call's fires first, with the
 * typed error, and the client's `TimeoutError` is never what the app sees.
 */
const LIBRARY_SLACK_MS = 1_000;

/**
 * Wraps a JetStream client (the client itself is not changed): `publish()` carries the trace of the current context
 * — not its deadline: the message outlives the request — and, inside a deadline context, its wait for the stream's
 * acknowledgement is bounded by the time left (less `marginMs`; the `timeout` given, when shorter), refused with
 * none left, and ends with a `DeadlineExceededError` (the message may then be stored or not). Everything else is the
 * client's own.
 *
 * @example
 * ```ts
 * import { jetstream } from '@nats-io/jetstream';
 * import { withTrace } from '@deadline/nats';
 *
 * const js = withTrace(jetstream(nc));
 * app.post('/orders', async (request) => {
 *   const order = await orders.create(request.body);
 *   await js.publish('orders.created', JSON.stringify(order)); // the trace travels, the deadline does not
 *   return order;
 * });
 * ```
 */
export function withTrace<J extends JetStreamLike>(js: J, options?: NatsPublishOptions): J {
  if (typeof (js as Partial<JetStreamLike> | undefined)?.publish !== 'function') {
    throw new InvalidArgumentError('js', 'a JetStream client (jetstream(nc) of @nats-io/jetstream)', js);
  }
  const limits = resolvePublishOptions(options, 'options');
  const callOptions = { ...limits.callOptions, propagates: false as const };
  const bounded = limits.defaultMs !== undefined || limits.guard !== undefined;
  const publish = (
    js.publish as (subject: string, payload?: unknown, options?: PublishOptionsIn) => Promise<unknown>
  ).bind(js);
  async function publishTraced(subject: string, payload?: unknown, given?: PublishOptionsIn): Promise<unknown> {
    const scope = storage.getStore();
    if (scope === undefined && !bounded) return publish(subject, payload, given);
    const own = given?.timeout;
    const call = OutgoingCall.start(
      subject,
      typeof own === 'number' && own >= 1 ? { ...callOptions, maxMs: Math.floor(own) } : callOptions,
      limits.guard,
      scope,
    );
    const headers = withTraceHeaders(given?.headers, scope);
    const timeout = call.timeoutMs === undefined ? own : call.timeoutMs + LIBRARY_SLACK_MS;
    try {
      const ack = await call.race(() =>
        publish(subject, payload, {
          ...given,
          ...(headers === undefined ? {} : { headers }),
          ...(timeout === undefined ? {} : { timeout }),
        }),
      );
      call.end();
      return ack;
    } catch (error) {
      call.end(error);
      throw error;
    }
  }
  return new Proxy(js, {
    get(target, property) {
      if (property === 'publish') return publishTraced;
      const value: unknown = Reflect.get(target, property, target);
      return typeof value === 'function' ? value.bind(target) : value;
    },
  });
}

/**
 * Wraps a JetStream message handler: each message runs in a context of its own — the publisher's trace (a child
 * span), this consumer's hop, and `budgetMs` from when it starts (default: none) — never the deadline of the
 * request that published it. At the budget's end the context's work (queries, calls) is stopped and the returned
 * promise rejects with the `DeadlineExceededError`, even if the handler does not listen. The handler gets the
 * context's signal as its second argument. Acknowledging stays the handler's.
 *
 * @example
 * ```ts
 * import { jetstream } from '@nats-io/jetstream';
 * import { withJetStreamContext } from '@deadline/nats';
 *
 * const consumer = await jetstream(nc).consumers.get('ORDERS', 'mailer');
 * const process = withJetStreamContext(async (msg, signal) => {
 *   await mailer.send(msg.json(), { signal }); // bounded by the 30 s below, traced as the order's request
 *   msg.ack();
 * }, { serviceName: 'mailer', budgetMs: 30_000 });
 * for await (const msg of await consumer.consume()) await process(msg).catch((error) => msg.nak());
 * ```
 */
export function withJetStreamContext<M extends JetStreamMsgLike, R>(
  handler: (msg: M, signal: AbortSignal | undefined) => R | Promise<R>,
  options?: JetStreamContextOptions,
): (msg: M) => Promise<R> {
  checkFunction('handler', handler, false);
  checkObject('options', options);
  const hop = checkHop(options?.serviceName, 'serviceName');
  const budgetMs = checkNumber('budgetMs', options?.budgetMs, { min: 1, max: 2 ** 31 - 1 });
  return (msg) => {
    const headers = headerSource(msg?.headers);
    return runWithContext(
      { root: true, deadline: budgetMs, hop, trace: traceFrom(headers.get('traceparent'), headers.get('tracestate')) },
      (ctx) => untilStopped(ctx, async () => handler(msg, ctx.signal)),
    );
  };
}
