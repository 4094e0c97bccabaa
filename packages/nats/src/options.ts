/**
 * The options of a connection wrapped by {@link withDeadline}, checked once when it is wrapped: every error names
 * the option and the value received. Serving takes the RPC servers' options (a request message is a call its
 * publisher makes); publishing and requesting, the limits every client adapter takes, under `publish`.
 */
import {
  type CallGuard,
  checkObject,
  type IncomingCallOptions,
  type OutgoingCallOptions,
  type ResolvedIncomingOptions,
  type ResolvedOutgoingLimits,
  resolveIncomingOptions,
  resolveOutgoingLimits,
} from '@deadline/core/internal';
import { type BudgetParser, createBudgetParser } from '@deadline/core/wire';
import type { NatsMsgLike } from './nats-types.js';

/**
 * Bounds of the requests (and replies asked for) a wrapped connection sends, under {@link NatsDeadlineOptions}
 * `publish`.
 *
 * @example
 * ```ts
 * const publish: NatsPublishOptions = { marginMs: 20, minMs: 5, defaultMs: 2_000 };
 * ```
 */
export interface NatsPublishOptions {
  /** Kept back from the remaining time for the reply's way back, in ms: the request carries remaining − marginMs. Default 0. */
  marginMs?: number | undefined;
  /** Below this many ms left, a request is not sent: `DeadlineExceededError` at once. Default 1. */
  minMs?: number | undefined;
  /** How long a request made outside any deadline context may wait, in ms. Default: the client's own `timeout`. */
  defaultMs?: number | undefined;
  /** A circuit breaker (`@deadline/resilience`) that may refuse a request before it is sent. */
  circuitBreaker?: CallGuard | undefined;
}

/**
 * Options of {@link withDeadline}: the server side's (`serviceName` … `logger`, and `clockSkewMs`: how far the
 * publisher's clock and this one may disagree, for the time a message surely waited on the way), for the messages its
 * subscriptions receive; and the client side's (`publish`).
 *
 * @example
 * ```ts
 * const options: NatsDeadlineOptions = {
 *   serviceName: 'inventory',
 *   defaultMs: 5_000,
 *   clockSkewMs: 20,
 *   publish: { marginMs: 20 },
 * };
 * ```
 */
export interface NatsDeadlineOptions extends IncomingCallOptions<NatsMsgLike> {
  /** Bounds of the requests this connection sends. */
  publish?: NatsPublishOptions | undefined;
}

/** @internal */
export interface ResolvedNatsOptions {
  /** Of the messages its subscriptions receive (an event's deadline is the core's rule: `awaited: false`). */
  messages: ResolvedIncomingOptions<NatsMsgLike>;
  parser: BudgetParser;
  limits: ResolvedOutgoingLimits;
  /** Each request's call: its budget written in the message's own headers. */
  callOptions: OutgoingCallOptions;
}

/** @internal */
export function resolveNatsOptions(options: NatsDeadlineOptions | undefined): ResolvedNatsOptions {
  const given = (checkObject('options', options) ?? {}) as NatsDeadlineOptions;
  const messages = resolveIncomingOptions<NatsMsgLike>(given);
  const limits = resolvePublishOptions(given.publish, 'publish');
  return {
    messages,
    parser: createBudgetParser({ dialects: messages.dialects }),
    limits,
    callOptions: { ...limits.callOptions, propagates: true },
  };
}

/** `publish` checked (its errors name the option, `marginMs`, as the other adapters' do). @internal */
export function resolvePublishOptions(options: NatsPublishOptions | undefined, name: string): ResolvedOutgoingLimits {
  return resolveOutgoingLimits(checkObject(name, options) as NatsPublishOptions | undefined);
}
