/**
 * The shapes read here of a NATS client's objects — `@nats-io/transport-node` 3 (`@nats-io/nats-core`) and `nats` 2.x
 * have the same ones — structural, so that this package loads neither and works with either.
 */

/**
 * A message's headers as either client has them (`MsgHdrs`): iterable as `[name, values]`, with a status line.
 *
 * @example
 * ```ts
 * const headers: NatsHeadersLike | undefined = msg.headers;
 * ```
 */
export interface NatsHeadersLike extends Iterable<[string, string[]]> {
  get(name: string): string;
  values(name: string): string[];
  readonly code?: number | undefined;
  readonly description?: string | undefined;
}

/**
 * A message as a subscription receives it (`Msg`).
 *
 * @example
 * ```ts
 * const trust = (msg: NatsMsgLike) => msg.subject.startsWith('internal.');
 * ```
 */
export interface NatsMsgLike {
  readonly subject: string;
  /** Where its answer goes: `''` (nats 3) or `undefined` when nobody waits for one. */
  readonly reply?: string | undefined;
  readonly headers?: NatsHeadersLike | undefined;
  readonly data: Uint8Array;
  respond(data?: Uint8Array | string, options?: { headers?: unknown }): boolean;
}

/** A subscription's callback. @internal */
export type NatsCallback = (error: Error | null, msg: NatsMsgLike) => unknown;

/** What `subscribe()` is given. @internal */
export interface SubscribeOptionsLike {
  callback?: NatsCallback | undefined;
  queue?: string | undefined;
  [option: string]: unknown;
}

/** A subscription, as far as this package reads it: it is iterable when it has no callback. @internal */
export interface SubscriptionLike extends AsyncIterable<NatsMsgLike> {
  getSubject(): string;
  unsubscribe(max?: number): void;
  readonly closed: Promise<unknown>;
}

/** What `publish()` and `request()` are given. @internal */
export interface PublishOptionsLike {
  headers?: NatsHeadersLike | undefined;
  reply?: string | undefined;
  timeout?: number | undefined;
  [option: string]: unknown;
}

/**
 * The part of a NATS connection (`NatsConnection` of either client) {@link withDeadline} wraps.
 *
 * @example
 * ```ts
 * import { connect } from '@nats-io/transport-node';
 * const nc: NatsConnectionLike = await connect({ servers: '127.0.0.1:4222' });
 * ```
 */
export interface NatsConnectionLike {
  publish(subject: string, payload?: never, options?: never): void;
  request(subject: string, payload?: never, options?: never): Promise<unknown>;
  subscribe(subject: string, options?: never): unknown;
  readonly options?: { inboxPrefix?: string | undefined } | undefined;
}

/** The same, as this package calls it. @internal */
export interface NatsConnectionCalls {
  publish(subject: string, payload?: unknown, options?: PublishOptionsLike): void;
  request(subject: string, payload?: unknown, options?: PublishOptionsLike): Promise<NatsMsgLike>;
  subscribe(subject: string, options?: SubscribeOptionsLike): SubscriptionLike;
  readonly options?: { inboxPrefix?: string | undefined } | undefined;
}
