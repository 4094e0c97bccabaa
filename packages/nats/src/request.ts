/**
 * `request()` on a wrapped connection, inside a deadline context: one `OutgoingCall` — not sent when too little time
 * is left (nothing reaches the socket), the message carrying the budget and the trace, the wait bounded by what is
 * left less `marginMs` (or by the app's own `timeout`, when shorter) and ended by a `DeadlineExceededError` whose
 * `whose`/`hop` say whose deadline fired. The reply comes to the connection's reply inbox (reply-inbox.ts).
 */
import { DeadlineExceededError, InvalidArgumentError } from '@deadline/core';
import { OutgoingCall, type Scope } from '@deadline/core/internal';
import { exceededByOf } from './deadline-answer.js';
import type { NatsConnectionCalls, NatsMsgLike, PublishOptionsLike } from './nats-types.js';
import type { ResolvedNatsOptions } from './options.js';
import { withBudget } from './publish-headers.js';
import { inboxOf } from './reply-inbox.js';

/** The error of a request nobody listens to (the server's 503), with the fields both clients' errors have. */
class NoRespondersError extends Error {
  readonly code = '503';
  readonly subject: string;
  constructor(subject: string) {
    super(`no responders: '${subject}'`);
    this.name = 'NoRespondersError';
    this.subject = subject;
  }
  /** As `@nats-io/nats-core`'s `RequestError` says it. */
  isNoResponders(): boolean {
    return true;
  }
}

/** @internal */
export function boundedRequest(
  nc: NatsConnectionCalls,
  options: ResolvedNatsOptions,
  scope: Scope | undefined,
  subject: string,
  payload: unknown,
  given: PublishOptionsLike | undefined,
): Promise<NatsMsgLike> {
  let call: OutgoingCall;
  try {
    const own = given?.timeout;
    if (own !== undefined && !(typeof own === 'number' && own >= 1)) {
      throw new InvalidArgumentError('timeout', 'a number of ms, at least 1', own);
    }
    // The app's own timeout caps the call: the responder is told no more than the caller will wait.
    const callOptions = own === undefined ? options.callOptions : { ...options.callOptions, maxMs: Math.floor(own) };
    call = OutgoingCall.start(subject, callOptions, options.limits.guard, scope);
  } catch (refusal) {
    // Not sent: no time left, the request stopped, the breaker refused.
    return Promise.reject(refusal);
  }
  return new Promise<NatsMsgLike>((resolve, reject) => {
    const inbox = inboxOf(nc);
    let reply = '';
    const fail = (error: unknown, late: boolean) => {
      inbox.close(reply, late);
      call.end(error);
      reject(error);
    };
    try {
      reply = inbox.open({
        subject,
        hop: call.hop,
        reply: (msg) => {
          offStop();
          const hop = exceededByOf(msg);
          if (hop === undefined) {
            call.end();
            resolve(msg);
          } else fail(call.downstreamExceeded(hop), false);
        },
        noResponders: () => {
          offStop();
          fail(new NoRespondersError(subject), false);
        },
        failed: (error) => {
          offStop();
          fail(error, false);
        },
      });
      nc.publish(subject, payload, {
        ...given,
        reply,
        headers: withBudget(given?.headers, call.headers, call.timeoutMs),
      });
    } catch (error) {
      // The client refused it (a bad subject, a closed connection, too large a payload): its own error.
      fail(error, false);
      return;
    }
    // Armed after the publish: a stop now is a request sent and given up on, whose reply would come late.
    const offStop = call.onStop((reason) => fail(reason, reason instanceof DeadlineExceededError));
  });
}
