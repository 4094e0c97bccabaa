/**
 * How a responder says "my deadline fired, I am not answering": an empty message whose status line is
 * `NATS/1.0 504 Deadline Exceeded` and whose `x-deadline-exceeded-by` header names the hop — HTTP's 504 and header,
 * in NATS's own status form (the server's no-responders answer is `503`, JetStream's `408` and `409`). A wrapped
 * connection's `request()` turns it into a `DeadlineExceededError` naming that hop; a plain client sees an empty
 * reply with `msg.headers.code === 504`.
 */
import { DEADLINE_EXCEEDED_BY_HEADER, parseExceededBy } from '@deadline/core/wire';
import { headerSource } from './message-headers.js';
import type { NatsMsgLike } from './nats-types.js';
import { OutgoingHeaders } from './outgoing-headers.js';

/**
 * The status code of a deadline answer (and of nothing else a NATS server or client sends).
 *
 * @example
 * ```ts
 * import { DEADLINE_STATUS } from '@deadline/nats';
 * const reply = await nc.request('stock.get', payload); // a plain client, not wrapped
 * if (reply.headers?.code === DEADLINE_STATUS) console.warn('timed out at', reply.headers.get('x-deadline-exceeded-by'));
 * ```
 */
export const DEADLINE_STATUS = 504;

const DESCRIPTION = 'Deadline Exceeded';
const EMPTY = new Uint8Array(0);

/** Answers `msg` (which has a reply subject) with the deadline answer naming `hop`, through `respond`. @internal */
export function answerDeadline(respond: NatsMsgLike['respond'], msg: NatsMsgLike, hop: string): void {
  const headers = new OutgoingHeaders(undefined, DEADLINE_STATUS, DESCRIPTION);
  headers.set(DEADLINE_EXCEEDED_BY_HEADER, hop);
  try {
    respond.call(msg, EMPTY, { headers });
  } catch {
    // The connection is closing: the caller's own deadline answers it.
  }
}

/** The hop a reply says it is the deadline answer of, if it is one. @internal */
export function exceededByOf(reply: NatsMsgLike): string | undefined {
  if (reply.data.length !== 0) return undefined;
  const value = headerSource(reply.headers).get(DEADLINE_EXCEEDED_BY_HEADER);
  return typeof value === 'string' ? parseExceededBy(value) : undefined;
}

/** Whether a reply is the server's "no responders" (status 503, no data). @internal */
export function isNoResponders(reply: NatsMsgLike): boolean {
  if (reply.data.length !== 0) return false;
  try {
    return reply.headers?.code === 503;
  } catch {
    return false;
  }
}
