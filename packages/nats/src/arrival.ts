/**
 * One message a wrapped connection's subscription received, from its arrival to the end of its handler: the context
 * the handler runs in, re-anchored on arrival from the budget the message carries (less the time it surely spent on
 * the way), and the one line written when it is over. A message whose budget is gone is not handled. The server
 * side answers within its deadline or not at all: at the deadline a request still unanswered gets the deadline answer
 * (deadline-answer.ts), and the handler's own `respond()` after it is not sent.
 */
import { DeadlineExceededError, findDeadlineError } from '@deadline/core';
import { IncomingCall, publishMessageDropped } from '@deadline/core/internal';
import { answerDeadline } from './deadline-answer.js';
import { headerSource } from './message-headers.js';
import type { NatsMsgLike } from './nats-types.js';
import type { ResolvedNatsOptions } from './options.js';

/** @internal */
export class Arrival {
  readonly incoming: IncomingCall<NatsMsgLike>;
  readonly msg: NatsMsgLike;
  /** The subscription's subject, as the line and the events name it (a pattern keeps their number bounded). */
  readonly target: string;
  /** The message's own `respond`, before the guard. */
  readonly #respond: NatsMsgLike['respond'];
  /** Whether the handler answered, or the deadline answer went. */
  #answered = false;
  /** Whether the handler's answer is what ends it (a request whose callback returned no promise). */
  #endsWithAnswer = false;

  constructor(msg: NatsMsgLike, target: string, options: ResolvedNatsOptions) {
    this.msg = msg;
    this.target = target;
    this.#respond = msg.respond;
    this.incoming = new IncomingCall<NatsMsgLike>(
      {
        call: msg,
        method: target,
        protocol: 'nats',
        kind: 'message',
        // Nobody waits for a message without a reply subject: an event, unbounded unless it carries a budget.
        awaited: typeof msg.reply === 'string' && msg.reply !== '',
        headers: headerSource(msg.headers),
        ownMs: Number.POSITIVE_INFINITY,
      },
      options.messages,
      options.parser,
    );
  }

  /** Whether someone waits for an answer. */
  get waited(): boolean {
    return typeof this.msg.reply === 'string' && this.msg.reply !== '';
  }

  /**
   * Whether the handler may run. When not (no time left), the message is counted and logged, and a request gets the
   * deadline answer.
   */
  admitted(): boolean {
    const { incoming } = this;
    const refusal = incoming.refusal;
    if (refusal === undefined) {
      this.#guardRespond();
      return true;
    }
    publishMessageDropped({
      protocol: 'nats',
      target: this.target,
      reason: 'expired',
      hop: refusal.hop,
      budgetMs: Math.round(incoming.budgetMs),
      waitedMs: Math.round(incoming.waitedMs),
    });
    if (this.waited) this.#answerDeadline(refusal.hop);
    incoming.end('expired', refusal);
    return false;
  }

  /**
   * Follows what the handler returned: a promise ends the message when it settles, or at the deadline if that comes
   * first (work still running is then stopped by the context). Else a request ends with its answer (or deadline),
   * an event at once. Returns what the callback should return: for a promise, one that rejects only with the
   * handler's own errors — a deadline error is this package's to answer, not an unhandled rejection.
   */
  settle(result: unknown): unknown {
    if (isThenable(result)) {
      const off = this.#untilDeadline();
      return Promise.resolve(result).then(
        () => {
          off();
          this.finish();
        },
        (error: unknown) => {
          off();
          this.finish(error);
          if (findDeadlineError(error) === undefined) throw error;
        },
      );
    }
    if (this.waited && !this.#answered) {
      this.#endsWithAnswer = true;
      this.#untilDeadline();
    } else this.finish();
    return result;
  }

  /** The handler is done (`error`: it failed). A request it failed for lack of time gets the deadline answer. */
  finish(error?: unknown): void {
    const { incoming } = this;
    if (incoming.ended) return;
    const failure = error ?? incoming.context.stopReason;
    const typed = failure === undefined ? undefined : findDeadlineError(failure);
    if (typed instanceof DeadlineExceededError && this.waited && !this.#answered) {
      this.#answerDeadline(typed.hop ?? hopOf(incoming));
    }
    incoming.end(
      failure === undefined ? 'ok' : typed === undefined ? 'error' : String((typed as { code: string }).code),
      failure,
    );
  }

  /** At the context's stop (its deadline), before the handler is done: answered and ended then. */
  #untilDeadline(): () => void {
    return this.incoming.onStop((reason) => this.finish(reason));
  }

  #answerDeadline(hop: string | undefined): void {
    this.#answered = true;
    answerDeadline(this.#respond, this.msg, hop ?? 'service');
  }

  /** `msg.respond()`, but never after the deadline: such an answer is counted (`late-answer`) and not sent. */
  #guardRespond(): void {
    if (!this.waited) return;
    const arrival = this;
    const respond = this.#respond;
    try {
      Object.defineProperty(this.msg, 'respond', {
        configurable: true,
        writable: true,
        value: function respondInTime(this: NatsMsgLike, data?: Uint8Array | string, options?: { headers?: unknown }) {
          if (arrival.#tooLate()) {
            publishMessageDropped({
              protocol: 'nats',
              target: arrival.target,
              reason: 'late-answer',
              hop: hopOf(arrival.incoming),
            });
            return false;
          }
          arrival.#answered = true;
          const sent = respond.call(this, data, options);
          if (arrival.#endsWithAnswer) arrival.finish();
          return sent;
        },
      });
    } catch {
      // A frozen message: answers are not guarded.
    }
  }

  #tooLate(): boolean {
    const { context } = this.incoming;
    if (context.stopReason instanceof DeadlineExceededError) return true;
    if (context.deadline.isExpired()) return true;
    // The deadline answer went: whatever the handler says now comes after it.
    return this.#answered && findDeadlineError(context.stopReason) !== undefined;
  }
}

/** The hop the message's context names (this service's). */
function hopOf(incoming: IncomingCall<NatsMsgLike>): string | undefined {
  return incoming.context.hop;
}

function isThenable(value: unknown): value is PromiseLike<unknown> {
  return typeof (value as { then?: unknown } | null)?.then === 'function';
}
