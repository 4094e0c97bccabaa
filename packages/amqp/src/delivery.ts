/**
 * One message a bounded channel's consumer received, from its arrival to the end of its handler: the context the
 * handler runs in, re-anchored on arrival from the budget the message carries (less the time it surely waited in the
 * broker), and the one line written when it is over. Over means: the promise the handler returned settled — or, for
 * a handler that returns none, the message was acknowledged or rejected (the handler's own way of saying it is done),
 * or at once when the consumer does not acknowledge at all.
 */
import { DeadlineExceededError, findDeadlineError } from '@deadline/core';
import { IncomingCall, publishMessageDropped, type Scope, tableHeaders } from '@deadline/core/internal';
import { DEADLINE_EXCEEDED_BY_HEADER } from '@deadline/core/wire';
import type { AmqpMessage, AmqpPublishOptions } from './amqp-types.js';
import type { ResolvedAmqpOptions } from './options.js';

/** @internal */
export class Delivery {
  readonly incoming: IncomingCall<AmqpMessage>;
  /** Where its answer goes (its `replyTo`), if its publisher waits for one. */
  readonly replyTo: string | undefined;
  /** The queue it came from, as its line names it. */
  readonly queue: string;
  /** While the handler's own call runs (before it returns, or returns its promise). */
  running = false;
  /** Whether its answer went: the handler's, or the deadline answer. */
  answered = false;
  readonly #message: AmqpMessage;

  constructor(message: AmqpMessage, queue: string, options: ResolvedAmqpOptions) {
    this.#message = message;
    const replyTo = message.properties.replyTo;
    this.replyTo = typeof replyTo === 'string' && replyTo !== '' ? replyTo : undefined;
    this.queue = queue;
    this.incoming = new IncomingCall<AmqpMessage>(
      {
        call: message,
        method: queue,
        protocol: 'amqp',
        kind: 'message',
        // Nobody waits for a message without a reply-to: an event, unbounded unless it carries a budget.
        awaited: this.replyTo !== undefined,
        headers: tableHeaders(message.properties.headers),
        ownMs: Number.POSITIVE_INFINITY,
      },
      options.messages,
      options.parser,
    );
  }

  /** Counts and logs a message that arrived with no time left (its handler is not run); a request is told so. */
  expired(publish: Publish): void {
    const { incoming } = this;
    this.answerDeadline(publish, incoming.refusal?.hop);
    publishMessageDropped({
      protocol: 'amqp',
      target: this.queue,
      reason: 'expired',
      hop: incoming.refusal?.hop,
      budgetMs: Math.round(incoming.budgetMs),
      waitedMs: Math.round(incoming.waitedMs),
    });
    incoming.end('expired', incoming.refusal);
  }

  /**
   * The handler is done (`error`: it failed). A handler that ended well after its deadline stopped it is reported
   * as that deadline: what it did in the meantime was cut.
   */
  finish(error?: unknown): void {
    const { incoming } = this;
    if (incoming.ended) return;
    const failure = error ?? incoming.context.stopReason;
    const typed = failure === undefined ? undefined : (findDeadlineError(failure) ?? failure);
    const code = (typed as { code?: unknown } | undefined)?.code;
    incoming.end(typed === undefined ? 'ok' : typeof code === 'string' ? code : 'error', failure);
  }

  /**
   * Tells a request's publisher that its deadline fired here, naming the hop: an empty reply whose
   * `x-deadline-exceeded-by` header `request()` turns into a `DeadlineExceededError` naming that hop (HTTP's 504, in a
   * message). Once, and only while nothing else answered it.
   */
  answerDeadline(publish: Publish, hop: string | undefined): void {
    if (this.replyTo === undefined || this.answered) return;
    this.answered = true;
    const { correlationId } = this.#message.properties;
    try {
      const sent = publish('', this.replyTo, Buffer.alloc(0), {
        ...(typeof correlationId === 'string' ? { correlationId } : {}),
        headers: { [DEADLINE_EXCEEDED_BY_HEADER]: hop ?? this.incoming.context.hop ?? 'service' },
      });
      // amqp-connection-manager's answers with a promise: a closed channel is no one's to hear of.
      (sent as Promise<unknown> | undefined)?.catch?.(() => {});
    } catch {
      // The channel closed: the publisher's own deadline answers it.
    }
  }

  /** Whether a publish to `exchange`/`routingKey` is this message's answer. */
  answers(exchange: string, routingKey: string): boolean {
    return exchange === '' && routingKey === this.replyTo;
  }

  /** Whether an answer now comes too late: its deadline passed (or the deadline answer went). */
  tooLate(): boolean {
    const { context } = this.incoming;
    return context.deadline.isExpired() || context.stopReason instanceof DeadlineExceededError;
  }
}

/**
 * A channel's own `publish()`, for the deadline answer (its `sendToQueue()` would publish through the patched one,
 * which holds back an answer after the deadline). @internal
 */
export type Publish = (exchange: string, routingKey: string, content: Buffer, options: AmqpPublishOptions) => unknown;

/** Each handler's context's delivery, to know an answer for what it is. */
const byContext = new WeakMap<object, Delivery>();

/** @internal */
export function remember(delivery: Delivery): void {
  byContext.set(delivery.incoming.context, delivery);
}

/** The delivery whose handler runs in `scope` (or a context made inside it). @internal */
export function deliveryOf(scope: Scope | undefined): Delivery | undefined {
  for (let at = scope; at !== undefined; at = at.parent) {
    const delivery = byContext.get(at);
    if (delivery !== undefined) return delivery;
  }
  return undefined;
}
