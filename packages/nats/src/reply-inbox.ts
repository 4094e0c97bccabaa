/**
 * The replies of a wrapped connection's requests, on one subscription of its own (`<inboxPrefix>.<id>.*`, made on the
 * first request): each request's reply subject ends with a token that finds its waiting call. The client's own
 * request multiplexer drops a reply nobody waits for without a word; here one whose caller stopped waiting — its
 * deadline passed — is recognised and counted (`deadline:message:dropped`, reason `late-reply`).
 */
import { randomBytes } from 'node:crypto';
import { publishMessageDropped } from '@deadline/core/internal';
import { isNoResponders } from './deadline-answer.js';
import type { NatsConnectionCalls, NatsMsgLike, SubscriptionLike } from './nats-types.js';

/** One request waiting for its reply. @internal */
export interface PendingReply {
  /** The subject requested, as the late reply's event names it. */
  readonly subject: string;
  readonly hop: string | undefined;
  reply(msg: NatsMsgLike): void;
  /** The server said nobody listens on the subject. */
  noResponders(): void;
  /** The inbox closed (the connection closed or drained). */
  failed(error: Error): void;
}

/** How many requests given up on are remembered, for their late replies to be told apart from stray messages. */
const REMEMBERED = 1_024;

/** @internal */
export class ReplyInbox {
  readonly #nc: NatsConnectionCalls;
  readonly #prefix: string;
  readonly #pending = new Map<string, PendingReply>();
  /** Requests given up on, oldest first: their late reply is counted once. */
  readonly #abandoned = new Map<string, { subject: string; hop: string | undefined }>();
  #sub: SubscriptionLike | undefined;
  #next = 0;

  constructor(nc: NatsConnectionCalls) {
    this.#nc = nc;
    this.#prefix = `${nc.options?.inboxPrefix ?? '_INBOX'}.${randomBytes(11).toString('hex')}.`;
  }

  /** Registers `pending` and returns its reply subject. Throws the client's error if it cannot subscribe. */
  open(pending: PendingReply): string {
    this.#sub ??= this.#subscribe();
    const token = (this.#next++).toString(36);
    this.#pending.set(token, pending);
    return this.#prefix + token;
  }

  /** The request no longer waits (answered, failed); `late`: it gave up for lack of time, its reply would be late. */
  close(replySubject: string, late: boolean): void {
    const token = replySubject.slice(this.#prefix.length);
    const pending = this.#pending.get(token);
    if (pending === undefined) return;
    this.#pending.delete(token);
    if (!late) return;
    this.#abandoned.set(token, { subject: pending.subject, hop: pending.hop });
    if (this.#abandoned.size > REMEMBERED) this.#abandoned.delete(this.#abandoned.keys().next().value as string);
  }

  #subscribe(): SubscriptionLike {
    const sub = this.#nc.subscribe(`${this.#prefix}*`, {
      callback: (error, msg) => {
        if (error === null) this.#arrived(msg);
      },
    });
    // Closed with the connection (or drained): nothing will answer the requests still waiting.
    sub.closed.then(
      () => this.#closed(sub),
      () => this.#closed(sub),
    );
    return sub;
  }

  #arrived(msg: NatsMsgLike): void {
    const token = msg.subject.slice(this.#prefix.length);
    const pending = this.#pending.get(token);
    if (pending !== undefined) {
      this.#pending.delete(token);
      if (isNoResponders(msg)) pending.noResponders();
      else pending.reply(msg);
      return;
    }
    const abandoned = this.#abandoned.get(token);
    // A second reply to a request answered already (several responders) was not late: the caller had one.
    if (abandoned === undefined || isNoResponders(msg)) return;
    this.#abandoned.delete(token);
    publishMessageDropped({ protocol: 'nats', target: abandoned.subject, reason: 'late-reply', hop: abandoned.hop });
  }

  #closed(sub: SubscriptionLike): void {
    if (this.#sub !== sub) return;
    this.#sub = undefined;
    const waiting = [...this.#pending.values()];
    this.#pending.clear();
    this.#abandoned.clear();
    const error = new Error('@deadline/nats: the connection closed before the reply came');
    for (const pending of waiting) pending.failed(error);
  }
}

const inboxes = new WeakMap<object, ReplyInbox>();

/** The reply inbox of `nc`: one per connection, however many times it is wrapped. @internal */
export function inboxOf(nc: NatsConnectionCalls): ReplyInbox {
  let inbox = inboxes.get(nc);
  if (inbox === undefined) {
    inbox = new ReplyInbox(nc);
    inboxes.set(nc, inbox);
  }
  return inbox;
}
