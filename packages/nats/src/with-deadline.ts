/**
 * `withDeadline(nc)`: the connection a service already has, wrapped (the connection itself is not changed: to undo,
 * use it directly). Inside a deadline context a request carries the budget and the trace, is bounded by what is left
 * and refused without time; an event carries the trace only; a subscription's callback runs in the context of the
 * message it received. Outside a context everything passes straight through, but for `publish.defaultMs`.
 */
import { InvalidArgumentError } from '@deadline/core';
import { OutgoingCall, storage } from '@deadline/core/internal';
import { deliverTo } from './deliver.js';
import type {
  NatsConnectionCalls,
  NatsConnectionLike,
  PublishOptionsLike,
  SubscribeOptionsLike,
  SubscriptionLike,
} from './nats-types.js';
import { type NatsDeadlineOptions, type ResolvedNatsOptions, resolveNatsOptions } from './options.js';
import { withBudget, withTraceHeaders } from './publish-headers.js';
import { boundedRequest } from './request.js';
import { rememberIterated } from './served.js';

// Read with `infer`: an indexed access on a constrained type parameter (`Parameters<C['subscribe']>`) resolves
// against the constraint's `never` parameters, not the connection's own.
/** The message type of connection `C` (what its `request()` resolves to). */
type MsgOf<C> = C extends { request(...args: never[]): Promise<infer M> } ? M : never;
/** The options `subscribe()` of connection `C` takes. */
type SubscribeOptionsOf<C> = C extends { subscribe(subject: string, options?: infer O): unknown }
  ? NonNullable<O>
  : never;
/** What `subscribe()` of connection `C` returns. */
type SubscriptionOf<C> = C extends { subscribe(...args: never[]): infer S } ? S : never;

/**
 * The options of `subscribe()` on a {@link DeadlineConnection}: the client's own, with a callback that may return a
 * promise (the message's context ends when it settles) — which `@nats-io/nats-core`'s type does not allow.
 *
 * @example
 * ```ts
 * const options: DeadlineSubscriptionOptions<NatsConnection> = { queue: 'inventory', callback: async (error, msg) => {} };
 * ```
 */
export type DeadlineSubscriptionOptions<C extends NatsConnectionLike = NatsConnectionLike> = Omit<
  SubscribeOptionsOf<C>,
  'callback'
> & {
  callback?: ((error: Error | null, msg: MsgOf<C>) => unknown) | undefined;
};

/**
 * What {@link withDeadline} returns: the connection's `publish`, `request` and `subscribe`, with the same signatures,
 * under the current deadline; the connection itself for everything else.
 *
 * @example
 * ```ts
 * const bus: DeadlineConnection<NatsConnection> = withDeadline(nc, { serviceName: 'orders' });
 * const reply = await bus.request('stock.get', JSON.stringify({ sku: 'A1' }));
 * await bus.connection.drain();
 * ```
 */
export interface DeadlineConnection<C extends NatsConnectionLike = NatsConnectionLike> {
  /**
   * The wrapped connection, unchanged: `drain()`, `close()`, `status()`, and `jetstream(bus.connection)` — JetStream
   * must be given the connection, never the wrapper (its publishes are events: see {@link withTrace}).
   */
  readonly connection: C;
  /**
   * Publishes with the trace of the current context (`traceparent`). With a `reply` subject it is a request someone
   * answers: it also carries the budget, and is not sent without time left.
   */
  publish: C['publish'];
  /**
   * Inside a deadline context: carries the budget and the trace; not sent when less than `publish.minMs` is left
   * (`DeadlineExceededError`, phase `before-call`); waits no longer than the time left less `publish.marginMs`, or
   * the `timeout` given, when shorter, then fails with a `DeadlineExceededError` (`whose: 'local'`); a responder's
   * deadline answer fails it with one naming that hop (`whose: 'downstream:<hop>'`); a reply that comes later is
   * dropped and counted. Outside a context: the client's own `request()` (bounded by `publish.defaultMs` if set).
   */
  request: C['request'];
  /**
   * Subscribes. With a `callback`, each message reaches it inside a context re-anchored from the message's headers;
   * one whose budget is gone never does (a request gets the deadline answer). Without one, iterate it with
   * {@link handle}.
   */
  subscribe(subject: string, options?: DeadlineSubscriptionOptions<C>): SubscriptionOf<C>;
}

/**
 * Wraps a NATS connection (`@nats-io/transport-node` 3, or `nats` 2.x): inside a deadline context its requests carry
 * the request's remaining budget and trace in the message headers, are bounded by it and fail with a typed
 * `DeadlineExceededError`; its subscriptions' handlers run in the deadline their message brought, less the time the
 * message spent on the way; events carry the trace only. Options are checked here, each error naming the option.
 *
 * @example
 * ```ts
 * import { connect } from '@nats-io/transport-node';
 * import { withDeadline } from '@deadline/nats';
 *
 * const bus = withDeadline(await connect({ servers: process.env.NATS_URL }), { serviceName: 'orders' });
 * // a responder: its handler runs within the caller's deadline
 * bus.subscribe('orders.get', { queue: 'orders', callback: async (error, msg) => {
 *   const { rows } = await db.query('SELECT * FROM orders WHERE id = $1', [msg.string()]); // @deadline/pg: bounded
 *   msg.respond(JSON.stringify(rows[0]));
 * } });
 * // a caller, inside a request's context (@deadline/fastify, …): bounded by what the request has left
 * const stock = await bus.request('stock.get', JSON.stringify({ sku: 'A1' }));
 * ```
 */
export function withDeadline<C extends NatsConnectionLike>(
  nc: C,
  options?: NatsDeadlineOptions,
): DeadlineConnection<C> {
  const calls = nc as unknown as NatsConnectionCalls;
  if (
    typeof calls?.publish !== 'function' ||
    typeof calls.request !== 'function' ||
    typeof calls.subscribe !== 'function'
  ) {
    throw new InvalidArgumentError('nc', 'a NATS connection (connect() of @nats-io/transport-node, or of nats)', nc);
  }
  const resolved = resolveNatsOptions(options);
  const bounded = resolved.limits.defaultMs !== undefined || resolved.limits.guard !== undefined;
  const wrapped = {
    connection: nc,
    publish(subject: string, payload?: unknown, given?: PublishOptionsLike): void {
      const scope = storage.getStore();
      if (scope === undefined) calls.publish(subject, payload, given);
      else if (typeof given?.reply !== 'string' || given.reply === '') {
        calls.publish(subject, payload, headed(given, withTraceHeaders(given?.headers, scope)));
      } else publishRequest(calls, resolved, subject, payload, given);
    },
    request(subject: string, payload?: unknown, given?: PublishOptionsLike) {
      const scope = storage.getStore();
      if (scope === undefined && !bounded) return calls.request(subject, payload, given);
      return boundedRequest(calls, resolved, scope, subject, payload, given);
    },
    subscribe(subject: string, given?: SubscribeOptionsLike): SubscriptionLike {
      const callback = given?.callback;
      if (typeof callback !== 'function') return rememberIterated(calls.subscribe(subject, given), subject, resolved);
      return calls.subscribe(subject, { ...given, callback: deliverTo(callback, subject, resolved) });
    },
  };
  return wrapped as unknown as DeadlineConnection<C>;
}

/** A publish with a reply subject: a request made by hand, which carries the budget (or is not sent without one). */
function publishRequest(
  nc: NatsConnectionCalls,
  options: ResolvedNatsOptions,
  subject: string,
  payload: unknown,
  given: PublishOptionsLike,
): void {
  // Throws the refusal: publish() is synchronous, as the client's own throws.
  const call = OutgoingCall.start(subject, options.callOptions, options.limits.guard);
  try {
    nc.publish(subject, payload, headed(given, withBudget(given.headers, call.headers, call.timeoutMs)));
    call.end();
  } catch (error) {
    call.end(error);
    throw error;
  }
}

function headed(
  given: PublishOptionsLike | undefined,
  headers: PublishOptionsLike['headers'],
): PublishOptionsLike | undefined {
  if (headers === given?.headers) return given;
  return { ...given, headers };
}
