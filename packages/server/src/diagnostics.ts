/**
 * The server's own diagnostics event: one message per request per hop, the same fields as its log line.
 */
import diagnostics from 'node:diagnostics_channel';
import type { RequestLine } from './request-deadline.js';

/** Published once per request when its response closes; the message is a {@link RequestLine}. @example `diagnostics.subscribe(REQUEST_END_CHANNEL, onLine)` */
export const REQUEST_END_CHANNEL = 'deadline:server:request';

const requestEnd = diagnostics.channel(REQUEST_END_CHANNEL);

/** @internal */
export function hasRequestEndSubscribers(): boolean {
  return requestEnd.hasSubscribers;
}

/** @internal */
export function publishRequestEnd(line: RequestLine): void {
  if (requestEnd.hasSubscribers) requestEnd.publish(line);
}
